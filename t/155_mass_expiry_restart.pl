# A mass expiry cut short, and no worker to finish it (massexpiry.c): the
# batch's expired events are committed, its lease rows not all written,
# when the server crash-restarts with the database left out of
# hoplock.databases.  Then writers find in the event log what the lost
# shared memory said: another owner's acquire of a term the batch
# announced records no second "expired", nor does the one the worker
# later writes the row of; a term lapsing now is announced by whoever
# takes it over, as ever.  Once the worker is back it writes every row
# the batch left, clears the mark in the delivery row, sends everything,
# and the next mass expiry runs as usual, its waiters served.  A row of a
# batch held by another owner's open takeover costs the worker nothing
# while it waits.  A dump taken while a batch writes its rows restores
# into another database with each term's one expiry.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/lib";
use Hoplock::Crash;

my $n = 5000;

my $node = PostgreSQL::Test::Cluster->new('mass_restart');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'hoplock'
max_locks_per_transaction = 256
restart_after_crash = on
hoplock.history_size = 100000
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

# expired events of the names "$prefix-*" since $from, per term
sub expired_per_term
{
	my ($prefix, $from) = @_;
	return q1(qq{SELECT count(*), count(DISTINCT (name, generation))
	               FROM hoplock_events($from)
	              WHERE event = 'expired' AND name LIKE '$prefix-%'});
}

# In $session, a transaction left open: as soon as a batch's expired
# events of the names "$prefix-*" are committed, $sql, in the same
# statement (the worker writes a batch's rows within milliseconds)
sub once_batch_committed
{
	my ($session, $prefix, $sql) = @_;
	$session->query_safe('BEGIN');
	$session->query_safe(qq{
		DO \$\$
		BEGIN
			WHILE NOT EXISTS (SELECT FROM hoplock_internal.event
			                   WHERE event = 'expired' AND name LIKE '$prefix-%') LOOP
				PERFORM pg_sleep(0.0005);
			END LOOP;
			$sql;
		END \$\$});
	return;
}

wait_for_worker();
my $from = q1('SELECT hoplock_position()');

# --- a batch committed, its rows half written, the worker held up ------------
is(q1(qq{SELECT count(hoplock_acquire('cut-' || i, 'o', t.at - clock_timestamp()))
           FROM (SELECT statement_timestamp() + interval '2 s' AS at) AS t,
                generate_series(1, $n) AS i}),
	$n, "$n names lapsing at one instant");
my $pid = worker_pid();
my $watcher = $node->background_psql('postgres');
# as soon as the batch's events are seen, the worker's next rounds are
# held up by a lock of the lease table (that readers pass): the batch's
# rows stay unwritten
my $watcher_pid = $watcher->query_safe('SELECT pg_backend_pid()');
once_batch_committed($watcher, 'cut', 'LOCK TABLE hoplock_internal.lease IN EXCLUSIVE MODE');
my ($events, $unwritten, $marked) = split /\|/, q1(q{
	SELECT (SELECT count(*) FROM hoplock_events(0) WHERE event = 'expired' AND name LIKE 'cut-%'),
	       (SELECT count(*) FROM hoplock_internal.lease WHERE name LIKE 'cut-%' AND state = 'h'),
	       (SELECT expiries_after IS NOT NULL FROM hoplock_internal.delivery)});
diag("worker held up with $events expired events committed, $unwritten lease rows not written");
cmp_ok($events, '>', $n / 2, 'the batch committed the expired events of the terms due');
cmp_ok($unwritten, '>', 100, 'and had not written all their lease rows');
is($marked, 't', 'the delivery row marks the batch');

# --- the worker goes, the server crash-restarts, no worker serves the database
$node->append_conf('postgresql.conf', "hoplock.databases = 'no_database_here'");
$node->reload;
$node->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM hoplock_workers WHERE datname = 'postgres' AND pid IS NOT NULL})
  or die 'the worker did not go';
is(q1(q{SELECT expiries_after IS NOT NULL FROM hoplock_internal.delivery}), 't',
	'the worker went with the mark set');
Hoplock::Crash::kill_and_wait_for_restart($node, $watcher_pid);
eval { $watcher->quit };
is(q1(q{SELECT count(*) FROM hoplock_workers WHERE datname = 'postgres' AND pid IS NOT NULL}),
	'0', 'no worker after the restart');

# another owner takes over terms the batch announced and did not write
my @pending = split /\n/, q1(q{
	SELECT l.name FROM hoplock_internal.lease AS l
	 WHERE l.name LIKE 'cut-%' AND l.state = 'h'
	   AND EXISTS (SELECT FROM hoplock_events(0) AS e
	                WHERE e.name = l.name AND e.event = 'expired')
	 ORDER BY l.name LIMIT 20});
is(scalar(@pending), 20, 'terms left lapsed and unwritten by the batch');
my $list = join(', ', map { "'$_'" } @pending);
is(q1(qq{SELECT count(hoplock_acquire(n, 'p', '10 min')) FROM unnest(ARRAY[$list]) AS n}),
	'20', 'another owner takes them over');
is(q1(qq{SELECT count(*) FROM hoplock_events($from)
          WHERE event = 'expired' AND name IN ($list)}),
	'20', 'recording no second expired event of them');
is(q1(qq{SELECT count(*) FROM hoplock_history
          WHERE name IN ($list) AND owner = 'o' AND how = 'expired'}),
	'20', 'their history rows end "expired", as the batch announced');

# a term that lapses now is announced by whoever takes it over
q1(q{SELECT hoplock_acquire('solo', 'o', '50 ms')});
usleep(100_000);
my $solo_from = q1('SELECT hoplock_position()');
q1(q{SELECT hoplock_acquire('solo', 'p', '10 min')});
is(q1(qq{SELECT string_agg(event, ',' ORDER BY seq) FROM hoplock_events($solo_from) WHERE name = 'solo'}),
	'expired,acquired', 'a term lapsing since is announced by its takeover');

# --- the worker comes back and finishes the batch -----------------------------
$node->append_conf('postgresql.conf', "hoplock.databases = ''");
$node->reload;
wait_for_worker();
$node->poll_query_until('postgres',
	q{SELECT NOT EXISTS (SELECT FROM hoplock_internal.lease
	                      WHERE name LIKE 'cut-%' AND state = 'h' AND owner = 'o')})
  or die 'the batch was not finished';
$node->poll_query_until('postgres',
	q{SELECT expiries_after IS NULL FROM hoplock_internal.delivery})
  or die 'the mark was not cleared';
pass('the worker writes every row the batch left, and clears its mark');
is(expired_per_term('cut', $from), "$n|$n", 'one expired event per term, none doubled');
is(q1(q{SELECT count(*) FROM hoplock_history WHERE name LIKE 'cut-%' AND owner = 'o'
          AND how = 'expired' AND ended_at IS NOT NULL}),
	$n, 'every term of the batch ends "expired" in the history');
is(q1(q{SELECT count(*) FROM hoplock_history AS h JOIN hoplock_internal.lease AS l USING (name, generation)
	  WHERE name LIKE 'cut-%' AND h.ended_at = l.expires_at AND l.state = 'x'}),
	$n - 20, 'at its expires_at, each row not taken over marked announced');
$node->poll_query_until('postgres',
	qq{SELECT delivered >= (SELECT max(seq) FROM hoplock_events($from)) FROM hoplock_internal.delivery})
  or die 'not everything sent';
pass('everything recorded was sent');

# --- and the next mass expiry is as usual, its waiters served -----------------
$from = q1('SELECT hoplock_position()');
is(q1(qq{SELECT count(hoplock_acquire('next-' || i, 'o', t.at - clock_timestamp()))
           FROM (SELECT statement_timestamp() + interval '2 s' AS at) AS t,
                generate_series(1, 1000) AS i}),
	'1000', '1,000 more names lapsing at one instant');
my $waiter = $node->background_psql('postgres');
$waiter->query_until(qr/waiting/, q{\echo waiting
SELECT (hoplock_wait('next-7', 'w', '10 min', '30 s')).owner AS waited;
});
$node->poll_query_until('postgres',
	q{SELECT NOT EXISTS (SELECT FROM hoplock_internal.lease WHERE name LIKE 'next-%' AND state = 'h' AND owner = 'o')
	     AND (SELECT expiries_after IS NULL FROM hoplock_internal.delivery)})
  or die 'the next lapse was not announced';
is(expired_per_term('next', $from), '1000|1000', 'each announced once');
$node->poll_query_until('postgres', q{SELECT (hoplock_holder('next-7')).owner = 'w'})
  or die 'the waiter did not get its lease';
pass('a session waiting for one of the names gets it');
$waiter->quit;
is(q1(qq{SELECT string_agg(event || ' ' || owner, ', ' ORDER BY seq) FROM hoplock_events($from) WHERE name = 'next-7'}),
	'acquired o, expired o, acquired w', 'its events: the lapsed term, its expiry once, the waiter\'s term');

# --- a row of a batch held by a transaction in flight --------------------------
# Another owner takes over a name of a batch, in a transaction it leaves
# open, before the worker wrote the row: the worker looks at that row
# again now and then, and does not spin meanwhile.  Once the takeover
# commits, the batch is done.
$from = q1('SELECT hoplock_position()');
is(q1(qq{SELECT count(hoplock_acquire('held-' || i, 'o', t.at - clock_timestamp()))
           FROM (SELECT statement_timestamp() + interval '2 s' AS at) AS t,
                generate_series(1, 2000) AS i}),
	'2000', '2,000 more names lapsing at one instant');
$pid = worker_pid();
# as soon as the batch's events are seen, in a transaction left open
my $taker = $node->background_psql('postgres');
once_batch_committed($taker, 'held', q{
	CREATE TEMP TABLE taken AS
	SELECT count(hoplock_acquire('held-' || i, 'p', '10 min')) AS n
	  FROM generate_series(1951, 2000) AS i});
is($taker->query_safe('SELECT n FROM taken'),
	'50', 'another owner takes over the last 50 names of the batch, in a transaction left open');
my $taken_names = join(', ', map { "'held-$_'" } 1951 .. 2000);
sub cpu_ms
{
	open my $f, '<', "/proc/$_[0]/schedstat" or return 0;
	my ($ns) = split ' ', scalar <$f>;
	return $ns / 1e6;
}
$node->poll_query_until('postgres', qq{
	SELECT count(*) = count(*) FILTER (WHERE name IN ($taken_names))
	  FROM hoplock_internal.lease
	 WHERE name LIKE 'held-%' AND state = 'h' AND owner = 'o'})
  or die 'the batch did not write the other rows';
my $pending = q1(qq{SELECT count(*) FROM hoplock_internal.lease
                     WHERE name IN ($taken_names) AND state = 'h' AND owner = 'o'});
diag("$pending of the 50 taken over before the batch wrote their rows");
cmp_ok($pending, '>', 0, 'some taken over before the batch wrote their rows');
my $cpu0 = cpu_ms($pid);
usleep(2_000_000);
my $spent = cpu_ms($pid) - $cpu0;
diag(sprintf('worker CPU over 2 s with a row of its batch held: %.0f ms', $spent));
cmp_ok($spent, '<', 400, 'the worker does not spin on a row held by a transaction in flight');
is(q1(q{SELECT expiries_after IS NOT NULL FROM hoplock_internal.delivery}), 't',
	'the batch is not done while that row is held');
$taker->query_safe('COMMIT');
$taker->quit;
$node->poll_query_until('postgres',
	q{SELECT expiries_after IS NULL FROM hoplock_internal.delivery})
  or die 'the batch was not done after the takeover committed';
pass('once the takeover commits, the batch is done');
is(expired_per_term('held', $from), '2000|2000', 'one expired event per term');
is(q1(qq{SELECT count(*) FROM (
            SELECT string_agg(event || ' ' || owner, ', ' ORDER BY seq) AS events
              FROM hoplock_events($from) WHERE name IN ($taken_names) GROUP BY name) AS e
          WHERE events = 'acquired o, expired o, acquired p'}),
	'50', 'each name taken over: its expiry once, then its new term');

# --- a dump taken while a batch's rows are being written, restored ------------
# The dump holds the batch's events, the mark, and lease rows that still
# say running.  Restored into another database -- whose worker trusted its
# empty set before the rows came in -- each term keeps its one expiry.
is(q1(qq{SELECT count(hoplock_acquire('dump-' || i, 'o', t.at - clock_timestamp()))
           FROM (SELECT statement_timestamp() + interval '2 s' AS at) AS t,
                generate_series(1, 1000) AS i}),
	'1000', '1,000 more names lapsing at one instant');
my $locker = $node->background_psql('postgres');
once_batch_committed($locker, 'dump', 'LOCK TABLE hoplock_internal.lease IN EXCLUSIVE MODE');
cmp_ok(q1(q{SELECT count(*) FROM hoplock_internal.lease WHERE name LIKE 'dump-%' AND state = 'h'}),
	'>', 0, 'rows of the batch not written yet');
my $dump = $node->basedir . '/mid_batch.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('postgres') ],
	'dumped while the batch writes its rows');
$locker->query_safe('COMMIT');
$locker->quit;
q1('CREATE DATABASE rdb');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('rdb'), $dump ], 'restored into another database');
$node->poll_query_until('rdb',
	q{SELECT NOT EXISTS (SELECT FROM hoplock_internal.lease
	                      WHERE name LIKE 'dump-%' AND state = 'h' AND owner = 'o')
	     AND (SELECT expiries_after IS NULL FROM hoplock_internal.delivery)})
  or die 'the restored batch was not finished';
is($node->safe_psql('rdb', q{
	SELECT count(*), count(DISTINCT (name, generation)) FROM hoplock_events(0)
	 WHERE event = 'expired' AND name LIKE 'dump-%'}),
	'1000|1000', 'restored: one expired event per term, none recorded again');

$node->stop;
done_testing();
