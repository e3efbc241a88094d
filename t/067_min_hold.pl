# min_hold beyond what one session shows (sql/min_hold.sql): a handoff
# to a candidate that waited with min_hold gives its term the hold, and
# keeps none for the term handed away; a session-bound term whose session
# ends during its hold keeps the name; a hold outlives a restart of the
# worker and of the server, and its end is announced after it; a
# candidate of another owner sleeps until the hold is over, not before; the
# released event says when the hold frees the name.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time);
use FindBin;
use lib "$FindBin::RealBin/lib";
use Hoplock::Listener;

my $node = PostgreSQL::Test::Cluster->new('min_hold');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

# psql running @sql in the background
sub bg
{
	my @sql = @_;
	my $out = '';
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), map { ('-c', $_) } @sql ],
		'>', \$out, '2>&1');
	return { h => $h, out => \$out };
}

sub q1 { return $node->safe_psql('postgres', $_[0]); }

sub events
{
	my ($name) = @_;
	return q1("SELECT string_agg(event || ':' || owner, ' ' ORDER BY seq) FROM hoplock_events(0) WHERE name = '$name'");
}

# --- 1. a handoff to a candidate that waits with min_hold --------------------
q1(q{SELECT hoplock_acquire('h', 'A', '1 h', min_hold => '1 h')});
my $c = bg(q{SELECT owner FROM hoplock_wait('h', 'C', '1 h', '30 s', min_hold => '40 min')});
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM hoplock_candidates WHERE name = 'h'})
  or die 'no candidate';
is(q1(q{SELECT owner FROM hoplock_handoff('h', 'A', (SELECT generation FROM hoplock_holder('h')))}),
	'C', 'the term of A, in its hold, is handed to C');
$c->{h}->finish;
is(q1(q{SELECT owner || ' ' || (hold_until - acquired_at) FROM hoplock_leases WHERE name = 'h'}),
	'C 00:40:00', "the candidate's term has the hold it waited with; A's keeps none");
is(q1(q{SELECT hoplock_release('h', 'C')}), 't', 'C releases in its hold');
is(q1(q{SELECT coalesce((hoplock_acquire('h', 'A', '1 h')).owner, 'kept')}), 'kept',
	'and the name is kept from A');

# --- 2. a session-bound term whose session ends in its hold ------------------
my $s = bg(q{SELECT hoplock_acquire('s', 'A', '1 h', session_bound => true, min_hold => '3 s')},
	q{SELECT pg_sleep(60)});
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM hoplock_leases WHERE name = 's' AND NOT expired})
  or die 'no term';
q1(q{SELECT pg_terminate_backend(holder_pid) FROM hoplock_leases WHERE name = 's'});
$s->{h}->finish;
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM hoplock_history WHERE name = 's' AND how IS NOT NULL})
  or die 'session end not recorded';
is(q1(q{SELECT how FROM hoplock_history WHERE name = 's'}), 'session ended', 'the session ended the term');
is(q1(q{SELECT coalesce((hoplock_acquire('s', 'B', '1 h')).owner, 'kept')}), 'kept',
	'the hold keeps the name from B');

# --- 3. a candidate of another owner sleeps until the hold is over -----------
my $t0 = time;
my $w = bg(q{SELECT owner FROM hoplock_wait('s', 'B', '1 h', '30 s')});
$w->{h}->finish;
my $waited = time - $t0;
is(${ $w->{out} }, "B\n", 'the waiting candidate took the name when the hold was over');
is(events('s'), 'acquired:A released:A freed:A acquired:B', 'released, freed, then the next term');
cmp_ok($waited, '<', 4, "it waited for the hold's end, about 3 s after the term began ($waited s)");

# --- 4. the released event's payload says when the name frees ---------------
my $l = Hoplock::Listener->new($node, 'postgres');
q1(q{SELECT hoplock_acquire('p', 'A', '1 h', min_hold => '1 h')});
q1(q{SELECT hoplock_release('p', 'A')});
# (JSON's own rendering of the instant, in UTC)
my $expect = q1(q{SELECT trim(both '"' FROM to_json((acquired_at + interval '1 h') AT TIME ZONE 'UTC')::text) || '+00:00'
                     FROM hoplock_history WHERE name = 'p'});
my @ev = grep { $_->{name} eq 'p' } @{ $l->collect(10, sub { grep { $_->{name} eq 'p' && $_->{event} eq 'released' } @{ $_[0] } }) };
is(join(' ', map { $_->{event} } @ev), 'acquired released', 'the listener got the term and its release');
is($ev[1]{free_at}, $expect, 'the released event says when the hold frees the name (free_at)');
ok(!exists $ev[0]{free_at}, 'the acquired event has no free_at');
$l->disconnect;

# --- 5. a hold outlives a restart of the worker, and of the server -----------
q1(q{SELECT hoplock_acquire('r', 'A', '1 h', min_hold => '6 s')});
q1(q{SELECT hoplock_release('r', 'A')});
q1(q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'hoplock worker'});
$node->stop('immediate');
$node->start;
is(q1(q{SELECT coalesce((hoplock_acquire('r', 'B', '1 h')).owner, 'kept')}), 'kept',
	'after an immediate restart the hold still keeps the name');
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM hoplock_events(0) WHERE name = 'r' AND event = 'freed'})
  or die 'the end of the hold was never announced';
is(q1(q{SELECT at = (SELECT acquired_at + interval '6 s' FROM hoplock_history WHERE name = 'r')
          FROM hoplock_events(0) WHERE name = 'r' AND event = 'freed'}),
	't', 'the worker, restarted, announced the hold over at its end');
is(q1(q{SELECT owner FROM hoplock_acquire('r', 'B', '1 h')}), 'B', 'and the name is free');

$node->stop;
done_testing();
