# An event number a client has seen never stands for another event on
# another copy of the data, and hoplock_events never silently returns less
# (issue 17, defects 3, 4 and 6):
#
# - a dump whose terms lapse before it is restored: the restored database's
#   worker numbers their expiries above the dumped events, and
#   hoplock_events from the last dumped number returns them;
# - an asynchronous standby promoted after missing events: its events are
#   numbered above every number the old primary handed out; hoplock_events
#   from a number both had returns what followed on the standby, and from
#   one only the old primary had raises HL001 ("not in this history")
#   rather than return less;
# - more databases numbering events at once than shared memory has entries
#   for: none is refused a number (they share an overflow entry);
# - a full history drops the terms that ended first, not those that began
#   first: a reader up to date still gets a long term's end;
# - on a standby, hoplock_events refuses (it cannot know which numbers the
#   primary's running transactions hold) rather than skip late commits.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('fork_events');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION hoplock');
my $tmp = PostgreSQL::Test::Utils::tempdir;

# --- a dump whose terms lapse before the restore ---------------------------------
$node->safe_psql('app', q{
	SELECT hoplock_acquire('lapse-' || i, 'o', '2 s') FROM generate_series(1, 3) AS i});
$node->command_ok([ 'pg_dump', '-Fc', '-f', "$tmp/app.dump", '-d', $node->connstr('app') ],
	'a dump with three running terms');
my $dumped_max = $node->safe_psql('app', 'SELECT max(seq) FROM hoplock_events(0)');
sleep 3;
$node->safe_psql('postgres', 'CREATE DATABASE copy');
$node->safe_psql('copy', 'CREATE TABLE public.unrelated (x int)');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('copy'), "$tmp/app.dump" ],
	'restored after the terms lapsed');
$node->poll_query_until('copy', q{
	SELECT count(*) = 3 FROM hoplock_events(0) WHERE event = 'expired'})
  or diag('the expiries were not announced');
is($node->safe_psql('copy', qq{
	SELECT count(*) FROM hoplock_events($dumped_max) WHERE event = 'expired'}),
	'3', "hoplock_events from the last dumped number ($dumped_max) returns the three expiries");
is($node->safe_psql('copy', q{
	SELECT count(*) = count(DISTINCT seq) FROM hoplock_events(0)}),
	't', 'no event number is used twice in the restored database');

# --- an asynchronous standby promoted after missing events ---------------------------
$node->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'base', has_streaming => 1);
$standby->start;
$node->safe_psql('app', q{SELECT hoplock_acquire('seen', 'o', '1 h')});
$node->wait_for_catchup($standby);

my ($rc, $out, $err) = $standby->psql('app', 'SELECT count(*) FROM hoplock_events(0)');
like($err, qr/cannot be read on a standby/,
	'hoplock_events refuses on a standby instead of skipping what commits late');

my $kept = $node->safe_psql('app', 'SELECT max(seq) FROM hoplock_events(0)');
$standby->stop('fast');
$node->safe_psql('app', q{
	SELECT hoplock_release('seen', 'o');
	SELECT hoplock_acquire('missed-' || i, 'o', '1 h') FROM generate_series(1, 100) AS i});
my $seen = $node->safe_psql('app', 'SELECT max(seq) FROM hoplock_events(0)');
$node->stop('immediate');
$standby->start;
$standby->promote;
$standby->poll_query_until('app', 'SELECT NOT pg_is_in_recovery()') or die 'no promotion';
$standby->safe_psql('app', q{SELECT hoplock_acquire('after', 'o', '1 h')});
my $after = $standby->safe_psql('app', q{
	SELECT seq FROM hoplock_events(0) WHERE name = 'after' AND event = 'acquired'});
cmp_ok($after, '>', $seen,
	"the promoted standby numbers its first event ($after) above the last the old primary handed out ($seen)");
is($standby->safe_psql('app', qq{
	SELECT string_agg(event || ' ' || name, ', ' ORDER BY seq) FROM hoplock_events($kept)}),
	'acquired after',
	'hoplock_events from the last number both had returns what followed there');
($rc, $out, $err) = $standby->psql('app', "SELECT count(*) FROM hoplock_events($seen)",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/HL001: event number $seen is not in this history/,
	'from a number the promoted standby never had, it raises HL001 instead of returning less');
($rc, $out, $err) = $standby->psql('app', "SELECT count(*) FROM hoplock_events(12345)");
like($err, qr/is not in this history/, 'so it does for a number of no history at all');

$standby->stop;

# --- more databases numbering events at once than shared memory has entries -----
# (hoplock.max_databases = 1: 2 * 1 + 8 entries, one of them the overflow):
# twelve databases each hold an event number in an open transaction; none
# is refused one, and each database's numbers still grow.
my $many = PostgreSQL::Test::Cluster->new('many');
$many->init;
$many->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
hoplock.max_databases = 1
max_prepared_transactions = 0
});
$many->start;
my @holders;
for my $i (1 .. 12)
{
	$many->safe_psql('postgres', "CREATE DATABASE db$i");
	$many->safe_psql("db$i", 'CREATE EXTENSION hoplock');
	$many->safe_psql("db$i", q{SELECT hoplock_acquire('first', 'o', '1 h')});
}
my $refused = 0;
for my $i (1 .. 12)
{
	my $h = $many->background_psql("db$i", on_error_stop => 0);
	my $out = $h->query(q{BEGIN; SELECT hoplock_acquire('open', 'o', '1 h') IS NOT NULL});
	$refused++ unless defined $out && $out =~ /^t$/m;
	push @holders, $h;
}
is($refused, 0, 'twelve databases each hold an event number at once, none refused');
$_->query_safe('COMMIT') for @holders;
$_->quit for @holders;
my $grows = 0;
for my $i (1 .. 12)
{
	$grows++ if $many->safe_psql("db$i", q{
		SELECT (array_agg(seq ORDER BY seq))[1] < (array_agg(seq ORDER BY seq))[2]
		   AND (array_agg(name ORDER BY seq))[1:2] = ARRAY['first', 'open']
		  FROM hoplock_events(0)}) eq 't';
}
is($grows, 12, 'and in each, the later event has the greater number');
$many->stop;

# --- a full history drops terms in the order they ended --------------------
# A long term that has just ended keeps its row (and its end event) while
# terms that ended before it are dropped: a reader up to date before the
# end still gets it after the worker trims the history.
my $trim = PostgreSQL::Test::Cluster->new('trim');
$trim->init;
$trim->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
hoplock.history_size = 10
});
$trim->start;
$trim->safe_psql('postgres', 'CREATE EXTENSION hoplock');
$trim->safe_psql('postgres', q{SELECT hoplock_acquire('leader', 'victim', '1 h')});
$trim->safe_psql('postgres', q{
	SELECT hoplock_acquire('churn', 'bob', '1 h'), hoplock_release('churn', 'bob')
	  FROM generate_series(1, 12)});
my $pos = $trim->safe_psql('postgres', 'SELECT max(seq) FROM hoplock_events(0)');
$trim->safe_psql('postgres', q{SELECT hoplock_release('leader', 'victim')});
is($trim->safe_psql('postgres', "SELECT string_agg(event || ' ' || name, ',') FROM hoplock_events($pos)"),
	'released leader', 'a reader up to date gets the end of the long term');
$trim->poll_query_until('postgres', q{SELECT count(*) <= 11 FROM hoplock_history})
  or diag('the history was not trimmed');
is($trim->safe_psql('postgres', "SELECT string_agg(event || ' ' || name, ',') FROM hoplock_events($pos)"),
	'released leader', 'and still gets it once the worker has trimmed the history');
$trim->stop;
done_testing();
