# Many terms lapsing at one instant: 10,000 names acquired together lapse
# together, and the worker announces them in batches of terms per
# transaction.  Each term gets one expired event with its own number and
# generation, and its history row ends at its expires_at.  A listener
# receives every event once, in number order, none missing.  Terms renewed
# before the instant are not expired, nor is one whose renewal is still in
# flight while the batches run.  A renewal of a name outside the lapse is
# not held up, and another owner's acquires of lapsed names during it all
# succeed (a batch keeps its rows from them only briefly).  Then the
# worker is killed with SIGKILL in the middle of a lapse of 10,000, its
# events committed in bulk and its lease rows not all written yet
# (massexpiry.c): after the crash-restart each term is announced exactly
# once, every row written, and everything recorded is sent.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use List::Util;
use Time::HiRes qw(time usleep);
use FindBin;
use lib "$FindBin::RealBin/lib";
use Hoplock::Crash;
use Hoplock::Listener;

my $n = 10_000;

my $node = PostgreSQL::Test::Cluster->new('mass_expiry');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'hoplock'
hoplock.history_size = 100000
# 10,000 terms begun in one transaction: each holds its term lock until
# the commit
max_locks_per_transaction = 256
restart_after_crash = on
# the renewal left in flight below must not be ended as a hung holder
hoplock.hung_holder_timeout = 0
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub q1 { return $node->safe_psql('postgres', $_[0]); }

sub worker_pid
{
	return q1(q{SELECT pid FROM hoplock_workers WHERE datname = 'postgres'});
}

sub wait_for_worker
{
	$node->poll_query_until('postgres',
		q{SELECT pid IS NOT NULL FROM hoplock_workers WHERE datname = 'postgres'})
	  or die 'no worker';
}

# $n names "$prefix-1".. acquired by $owner in one statement, each with the
# ttl that ends it $delay seconds after the statement began.  Returns that
# instant (epoch seconds) and how many were acquired.
sub lapse_together
{
	my ($prefix, $owner, $delay) = @_;
	return split /\|/, q1(qq{
		SELECT extract(epoch FROM t.at), a.c
		  FROM (SELECT statement_timestamp() + interval '$delay s' AS at) AS t,
		       LATERAL (SELECT count(hoplock_acquire('$prefix-' || i, '$owner',
		                                             t.at - clock_timestamp())) AS c
		                  FROM generate_series(1, $n) AS i) AS a});
}

# Sleep until epoch instant $at
sub sleep_until
{
	my ($at) = @_;
	my $left = $at - time();
	usleep(int($left * 1e6)) if $left > 0;
}

wait_for_worker();

# --- 10,000 names lapse together ---------------------------------------------
my $from = q1('SELECT hoplock_position()');
my $listener = Hoplock::Listener->new($node, 'postgres');
q1(q{SELECT hoplock_acquire('bystander', 'b', '10 min')});
my ($at, $acquired) = lapse_together('mass', 'o', 5);
is($acquired, $n, "$n names acquired, all lapsing at one instant");
cmp_ok($at - time(), '>', 2, 'with time left before the instant');

# mass-1 .. mass-100 renewed before the instant; mass-101's renewal is in
# flight across it, committed once the worker has announced all the others
# (so it found mass-101 being changed, lapsed by the committed state)
is(q1(q{SELECT count(hoplock_renew('mass-' || i, 'o', '10 min')) FROM generate_series(1, 100) AS i}),
	'100', '100 of them renewed before the instant');
my $renewer = $node->background_psql('postgres');
$renewer->query_safe('BEGIN');
is($renewer->query_safe(q{SELECT hoplock_renew('mass-101', 'o', '10 min') IS NOT NULL}),
	't', 'a renewal of mass-101 begins before the instant');
sleep_until($at + 0.05);

# a name outside the lapse is renewed while the worker works through it
my $bystander = $node->background_psql('postgres');
my $t0 = time();
is($bystander->query_safe(q{SELECT hoplock_renew('bystander', 'b', '10 min') IS NOT NULL}),
	't', 'a renewal of another name during the lapse succeeds');
my $took = time() - $t0;
diag(sprintf('renewal of another name during the lapse: %.1f ms', 1000 * $took));
cmp_ok($took, '<', 1, 'and is not held up by it');

# another owner takes lapsed names, one at a time in random order, while
# the worker announces the lapse: an acquire of a row that the batch in
# flight holds waits for its commit (50 ms at most), and so is never
# refused.
my @candidates = List::Util::shuffle(grep { $_ != 5001 } 102 .. $n);
my ($taken_n, $refused, $slowest) = (0, 0, 0);
my $deadline = time() + 120;
while (time() < $deadline)
{
	my $i = shift @candidates;
	$t0 = time();
	$refused++ if $bystander->query_safe(
		"SELECT hoplock_acquire('mass-$i', 'p', '10 min') IS NOT NULL") ne 't';
	$slowest = time() - $t0 if time() - $t0 > $slowest;
	$taken_n++;
	last if $taken_n % 10 == 0 && $bystander->query_safe(q{
		SELECT NOT EXISTS (SELECT FROM hoplock_internal.lease
		                    WHERE name LIKE 'mass-%' AND name <> 'mass-101'
		                      AND state = 'h' AND expires_at < now())}) eq 't';
}
diag(sprintf('%d acquires of lapsed names during the lapse, the slowest %.1f ms', $taken_n, 1000 * $slowest));
cmp_ok($taken_n, '>=', 10, 'another owner took lapsed names during the lapse');
is($refused, 0, 'none was refused');
$bystander->quit;

my $want_expired = $n - 101;
my $events = $listener->collect(
	120,
	sub {
		my %names = map { $_->{name} => 1 }
		  grep { $_->{event} eq 'expired' && $_->{name} =~ /^mass-/ } @{ $_[0] };
		return keys(%names) >= $want_expired;
	});
$renewer->query_safe('COMMIT');
$renewer->quit;
$node->poll_query_until('postgres',
	q{SELECT NOT EXISTS (SELECT FROM hoplock_internal.lease WHERE name LIKE 'mass-%' AND state = 'h' AND expires_at < now())})
  or die 'not all announced';

my %expired;
$expired{ $_->{name} }++ for grep { $_->{event} eq 'expired' && $_->{name} =~ /^mass-/ } @$events;
is(scalar(keys %expired), $want_expired, "the listener got an expired event for each of the $want_expired lapsed names");
is(scalar(grep { $_ != 1 } values %expired), 0, 'each exactly once');
is(scalar(grep { /^mass-(\d+)$/ && $1 <= 101 } keys %expired), 0,
	'none for the terms renewed, before the instant or across it');

# the stream against the log: every committed event, in number order, once
my @committed = split /\n/, q1("SELECT seq FROM hoplock_events($from) ORDER BY seq");
my @got = map { $_->{seq_text} } @$events;
my %committed = map { $_ => 1 } @committed;
my %seen;
my @first = grep { !$seen{$_}++ } @got;
is(scalar(grep { !$seen{$_} } @committed), 0, 'no committed event missing at the listener');
is(scalar(grep { !$committed{$_} } @first), 0, 'nothing but committed events');
is(scalar(@got), scalar(@first), 'nothing sent twice');
is_deeply(\@first, [ sort { $a <=> $b } @first ], 'in number order');

# the log: a batch's events are rows of up to 1,000, each the last term's
# event carrying the others', numbered consecutively below it (eventlog.c)
my ($carrying, $widest) = split /\|/, q1(q{
	SELECT count(*), max(cardinality(earlier_names)) + 1 FROM hoplock_internal.event
	 WHERE event = 'expired' AND name LIKE 'mass-%' AND earlier_names IS NOT NULL});
diag("the lapse's events are in $carrying rows of the log, the widest of $widest events");
cmp_ok($carrying, '>=', 2, 'the batch recorded its events as rows that carry many');
cmp_ok($widest, '<=', 1000, 'at most 1,000 to a row');
# a reader resuming from a number inside such a row gets the rest of the
# log, as from any other number
my $mid = q1(q{
	SELECT seq - ((cardinality(earlier_names) - 4)::bigint << 11) FROM hoplock_internal.event
	 WHERE event = 'expired' AND name LIKE 'mass-%' AND cardinality(earlier_names) >= 10
	 ORDER BY seq LIMIT 1});
ok(scalar(grep { $_ eq $mid } @committed), 'a number inside a row is an event of the stream');
is(q1(qq{SELECT (SELECT array_agg(seq ORDER BY seq) FROM hoplock_events($mid))
              = (SELECT array_agg(seq ORDER BY seq) FROM hoplock_events($from) WHERE seq > $mid)}),
	't', 'hoplock_events from inside a row returns what follows that number');
is(q1(qq{SELECT min(seq) FROM hoplock_watch($mid, '1 s')}),
	(grep { $_ > $mid } @committed)[0], 'hoplock_watch from inside a row: the next number first');
# a row damaged by hand is an error, never fewer events
for my $damage (
	[ 'earlier_owners = earlier_owners[1:2]', 'Its columns earlier_\* are arrays of different lengths', 'arrays of different lengths' ],
	[ 'earlier_names = NULL', 'Some of its columns earlier_\* are null, and some are not', 'its names null, the rest not' ],
	[ 'earlier_generations[3] = NULL', 'One of its earlier names, owners, generations or expiries is null', 'a null generation' ],
	[ q{earlier_names = '{}'}, 'Its columns earlier_\* are not the one-dimensional arrays hoplock writes', 'an empty array' ])
{
	my ($set, $detail, $what) = @$damage;
	my ($ret, $out, $err) = $node->psql('postgres', qq{
		BEGIN;
		UPDATE hoplock_internal.event SET $set
		 WHERE seq = (SELECT max(seq) FROM hoplock_internal.event WHERE earlier_names IS NOT NULL);
		SELECT count(*) FROM hoplock_events(0);
		ROLLBACK;});
	like($err, qr/ERROR:  the row of event \d+ of table "hoplock_internal.event" is damaged\nDETAIL:  $detail/,
		"a row with $what is an error, not fewer events");
}

# each lapsed term, as its history row has it (those taken over during the
# lapse too, "taken over" if the acquire announced it before the worker):
# its row ends at its expires_at, and the log holds one expired event of
# it, with its generation and instant
is(q1(qq{SELECT count(*) FROM hoplock_history AS h
	  WHERE h.name LIKE 'mass-%' AND h.owner = 'o' AND h.how IN ('expired', 'taken over')
	    AND (SELECT count(*) FROM hoplock_events($from) AS e
	          WHERE e.name = h.name AND e.generation = h.generation
	            AND e.event = 'expired' AND e.at = h.ended_at) = 1}),
	$want_expired, 'one expired event per lapsed term, with its generation and instant');
is(q1(qq{SELECT count(DISTINCT seq) FROM hoplock_events($from) WHERE event = 'expired' AND name LIKE 'mass-%'}),
	$want_expired, 'each with a number of its own');
is(q1(q{SELECT count(*) FROM hoplock_history AS h JOIN hoplock_internal.lease AS l USING (name, generation)
	  WHERE name LIKE 'mass-%' AND h.how = 'expired' AND h.ended_at = l.expires_at AND l.state = 'x'}),
	$want_expired - $taken_n, 'the history row of each term lapsed and not taken ends at its expires_at');
is(q1(qq{SELECT count(*) FROM hoplock_history AS h
	  WHERE h.name LIKE 'mass-%' AND h.owner = 'p' AND h.ended_at IS NULL
	    AND h.generation > (SELECT o.generation FROM hoplock_history AS o
	                         WHERE o.name = h.name AND o.owner = 'o'
	                           AND o.how IN ('expired', 'taken over'))}),
	$taken_n, "the $taken_n taken over run in new terms with greater generations");
is(q1(q{SELECT count(*) FROM hoplock_history WHERE name LIKE 'mass-%' AND owner = 'o' AND ended_at IS NULL}),
	'101', 'the renewed terms run on in the history');
is(q1(q{SELECT count(*) FROM generate_series(1, 101) AS i
	  WHERE (hoplock_holder('mass-' || i)).owner = 'o'}),
	'101', 'and hold their leases');
is(q1(q{SELECT (hoplock_acquire('mass-5001', 'p', '1 min')).generation
	  > (SELECT generation FROM hoplock_history WHERE name = 'mass-5001' AND how = 'expired')}),
	't', 'a lapsed name taken over gets a greater generation');

my @lags = map { 1000 * ($_->{received_at} - Hoplock::Listener::epoch($_->{expires_at})) }
  grep { $_->{event} eq 'expired' && $_->{name} =~ /^mass-/ } @$events;
diag(sprintf('expired at the listener after expires_at: p50 %.1f ms, p99 %.1f ms, max %.1f ms',
		Hoplock::Listener::percentile(50, @lags), Hoplock::Listener::percentile(99, @lags),
		Hoplock::Listener::percentile(100, @lags)));
$listener->disconnect;

# --- The worker is killed in the middle of a lapse ---------------------------
$from = q1('SELECT hoplock_position()');
($at, $acquired) = lapse_together('crash', 'k', 3);
is($acquired, $n, "$n more names lapsing at one instant");
my $pid = worker_pid();
my $watcher = $node->background_psql('postgres');
# as soon as the batch's events are seen, the worker's next rounds are
# held up by a lock of the lease table (that readers pass), so that the
# kill lands before the rows are written
$watcher->query_safe('BEGIN');
$watcher->query_safe(q{
	DO $$
	BEGIN
		WHILE NOT EXISTS (SELECT FROM hoplock_internal.event
		                   WHERE event = 'expired' AND name LIKE 'crash-%') LOOP
			PERFORM pg_sleep(0.0005);
		END LOOP;
		LOCK TABLE hoplock_internal.lease IN EXCLUSIVE MODE;
	END $$});
my ($before, $unwritten) = split /\|/, q1(q{
	SELECT (SELECT count(*) FROM hoplock_events(0) WHERE event = 'expired' AND name LIKE 'crash-%'),
	       (SELECT count(*) FROM hoplock_internal.lease WHERE name LIKE 'crash-%' AND state = 'h')});
Hoplock::Crash::kill_and_wait_for_restart($node, $pid);
eval { $watcher->quit };
diag("worker killed when $before of $n expiries were committed, $unwritten lease rows not written yet");
cmp_ok($before, '>', 0, 'the worker was killed after it had announced some');
cmp_ok($unwritten, '>', 0, 'and before it had written all their lease rows');

wait_for_worker();
$node->poll_query_until('postgres',
	q{SELECT NOT EXISTS (SELECT FROM hoplock_internal.lease WHERE name LIKE 'crash-%' AND state = 'h')})
  or die 'not all announced after the restart';
is(q1(qq{SELECT count(*) FROM hoplock_internal.lease AS l
	  WHERE l.name LIKE 'crash-%' AND l.state = 'x'
	    AND (SELECT count(*) FROM hoplock_events($from) AS e
	          WHERE e.name = l.name AND e.generation = l.generation
	            AND e.event = 'expired') = 1}),
	$n, 'after the crash: one expired event per term, none lost, none doubled');
is(q1(qq{SELECT count(*) FROM hoplock_events($from) WHERE event = 'expired' AND name LIKE 'crash-%'}),
	$n, 'and no other');
is(q1(q{SELECT count(*) FROM hoplock_history AS h JOIN hoplock_internal.lease AS l USING (name, generation)
	  WHERE name LIKE 'crash-%' AND h.how = 'expired' AND h.ended_at = l.expires_at}),
	$n, 'the history row of each ends once, at its expires_at');
is(q1(q{SELECT count(*) FROM hoplock_history WHERE name LIKE 'crash-%'}),
	$n, 'one history row per term');
$node->poll_query_until('postgres',
	qq{SELECT delivered >= (SELECT max(seq) FROM hoplock_events($from)) FROM hoplock_internal.delivery})
  or die 'not everything sent';
pass('everything recorded was sent after the restart');

$node->stop;
done_testing();
