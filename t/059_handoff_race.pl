# hoplock_handoff racing the other term changes.  A handoff holds the
# term lock until its transaction ends: a force-release, a second handoff
# or a release of the same term meanwhile changes nothing, and the
# handoff's commit hands the term to the candidate, whose hoplock_wait
# returns it.  A handoff that rolls back hands nothing: the candidate
# waits on, and a release then gives it the lease.  After a release that
# committed first, the handoff finds the term gone.  A candidate arriving
# while a handoff is in flight is not the one picked.  A term that lapses
# while its handoff is in flight is handed, not announced as expired; a
# handoff after the term lapsed finds it gone.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('handoff_race');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub candidate
{
	my ($owner, $timeout, $count) = @_;
	my $out = '';
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
			"SELECT coalesce(owner, 'timeout') FROM hoplock_wait('H', '$owner', '1 h', '$timeout')"
		],
		'>', \$out, '2>&1');
	$node->poll_query_until('postgres',
		"SELECT count(*) = $count FROM hoplock_candidates WHERE name = 'H'")
	  or die "$owner is no candidate";
	return sub { $h->finish; $out =~ s/\n$//r };
}

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub fresh_term
{
	sql(q{SELECT hoplock_force_release('H')});
	return sql(q{SELECT generation FROM hoplock_acquire('H', 'lead', '1 h')});
}

# --- in flight: force-release, second handoff, release change nothing ------
my $g = fresh_term();
my $c1 = candidate('c1', '30 s', 1);
my $lead = $node->background_psql('postgres');
$lead->query_safe('BEGIN');
is($lead->query_safe("SELECT owner FROM hoplock_handoff('H', 'lead', $g)"),
	'c1', 'the handoff in flight picked the candidate');
is(sql(q{SELECT hoplock_force_release('H')}), 'f', 'a force-release meanwhile finds it contended');
is(sql("SELECT hoplock_handoff('H', 'lead', $g) IS NULL"), 't', 'so does a second handoff');
is(sql(q{SELECT hoplock_release('H', 'lead')}), 'f', 'and the holder\'s own release');
is(sql(q{SELECT owner FROM hoplock_holder('H')}), 'lead', 'the term is still the leader\'s until the commit');
$lead->query_safe('COMMIT');
is($c1->(), 'c1', 'at the commit the candidate\'s wait returns the term');
is(sql(q{SELECT owner FROM hoplock_holder('H')}), 'c1', 'and it holds the lease');
is(sql("SELECT string_agg(how, ',' ORDER BY generation) FROM hoplock_history WHERE name = 'H' AND generation >= $g"),
	'handed off', 'one term ended, handed off; one running');

# --- rolled back: the candidate waits on -----------------------------------
$g = fresh_term();
$c1 = candidate('c1', '30 s', 1);
$lead->query_safe('BEGIN');
$lead->query_safe("SELECT hoplock_handoff('H', 'lead', $g)");
$lead->query_safe('ROLLBACK');
is(sql(q{SELECT owner || ' ' || generation FROM hoplock_holder('H')}), "lead $g",
	'a handoff rolled back hands nothing');
is(sql(q{SELECT count(*) FROM hoplock_candidates WHERE name = 'H'}), '1',
	'the candidate waits on');
sql(q{SELECT hoplock_release('H', 'lead')});
is($c1->(), 'c1', 'and a release then gives it the lease');

# --- a release committed first -----------------------------------------------
$g = fresh_term();
$c1 = candidate('c1', '30 s', 1);
sql(q{SELECT hoplock_release('H', 'lead')});
is($c1->(), 'c1', 'the release gives the candidate the lease');
is(sql("SELECT hoplock_handoff('H', 'lead', $g) IS NULL"), 't',
	'the handoff then finds the term gone');

# --- a candidate arriving while a handoff is in flight -----------------------
$g = fresh_term();
$c1 = candidate('c1', '30 s', 1);
$lead->query_safe('BEGIN');
is($lead->query_safe("SELECT owner FROM hoplock_handoff('H', 'lead', $g)"),
	'c1', 'the handoff picked the first candidate');
my $c2 = candidate('c2', '3 s', 2);
$lead->query_safe('COMMIT');
is($c1->(), 'c1', 'which gets the term');
is($c2->(), 'timeout', 'the candidate that arrived meanwhile does not');

$lead->quit;
# --- expiry: the term lapses while its handoff is in flight ----------------
sql(q{SELECT hoplock_force_release('H')});
$g = sql(q{SELECT generation FROM hoplock_acquire('H', 'lead', '1 s')});
my $before = sql('SELECT coalesce(max(seq), 0) FROM hoplock_events(0)');
my $cx = candidate('cx', '30 s', 1);
$lead = $node->background_psql('postgres');
$lead->query_safe('BEGIN');
is($lead->query_safe("SELECT owner FROM hoplock_handoff('H', 'lead', $g)"),
	'cx', 'a handoff in flight near the end of the term');
sleep 2;    # the term's ttl passes while the handoff is open
$lead->query_safe('COMMIT');
$lead->quit;
is($cx->(), 'cx', 'the term lapsed meanwhile, yet the handoff\'s commit hands it over');
is(sql("SELECT how FROM hoplock_history WHERE name = 'H' AND generation = $g"),
	'handed off', 'the old term ended handed off, not expired');
$node->poll_query_until('postgres', "SELECT count(*) >= 2 FROM hoplock_events($before) WHERE name = 'H'");
sleep 1;
is(sql("SELECT string_agg(event, ',' ORDER BY seq) FROM hoplock_events($before) WHERE name = 'H' AND event <> 'renewed'"),
	'released,acquired', 'one released and one acquired event, no expired');

# --- expiry first: a handoff after the term lapsed finds it gone ----------
sql(q{SELECT hoplock_force_release('H')});
$g = sql(q{SELECT generation FROM hoplock_acquire('H', 'lead', '1 s')});
my $cy = candidate('cy', '30 s', 1);
is($cy->(), 'cy', 'the term lapsed: the waiting candidate takes the freed lease');
is(sql("SELECT hoplock_handoff('H', 'lead', $g) IS NULL"), 't',
	'the old holder\'s handoff afterwards returns NULL');
is(sql(q{SELECT owner FROM hoplock_holder('H')}), 'cy', 'and the candidate keeps its term');

$node->stop;
done_testing();
