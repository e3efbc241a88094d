# The expiry workers under faults: a damaged lease table is reported, not
# crashed on in a loop; a worker stuck in a commit that waits for a missing
# synchronous standby still leaves at once on fast shutdown or DROP
# DATABASE; only a statement that will really run (its caller has the
# rights) stops a database's worker, and the worker is back as soon as the
# statement is over; one worker per database after crash-restarts; and
# hoplock.databases takes names as written.
use strict;
use warnings;
use lib 't/lib';
use Hoplock::Crash;
use Hoplock::Listener;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('faults');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
restart_after_crash = on
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub worker_pid
{
	my ($db) = @_;
	return $node->safe_psql('postgres',
		qq{SELECT coalesce(max(pid), 0) FROM hoplock_workers WHERE datname = '$db' AND state <> 'starting'});
}

sub wait_served
{
	my ($db) = @_;
	$node->poll_query_until('postgres',
		qq{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = '$db' AND pid IS NOT NULL AND state = 'sleeping'})
	  or die "$db not served";
}

wait_served('postgres');

# --- A NULL in the table: reported, no crash loop -----------------------------
$node->safe_psql('postgres', 'CREATE DATABASE damaged');
$node->safe_psql('damaged', 'CREATE EXTENSION hoplock');
wait_served('damaged');
$node->safe_psql('damaged', q{
	SELECT hoplock_acquire('ok', 'a', '1 h');
	ALTER TABLE hoplock_internal.lease ALTER COLUMN owner DROP NOT NULL;
	INSERT INTO hoplock_internal.lease
	     VALUES ('broken', 'h', NULL, 'x', 1, now(), now(), now() + interval '1 s',
	             NULL, NULL, 10);
});
my $log_offset = -s $node->logfile;
$node->restart;
sleep 4;
my $log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/terminated by signal|was terminated by|server process .* exited with exit code|all server processes terminated/,
	'a damaged table crashes nothing');
like($log, qr/column "owner" of table "hoplock_internal\.lease" must be NOT NULL/,
	'the worker says what is wrong with the table');
my $starts = () = $log =~ /hoplock worker for database "damaged" started/g;
cmp_ok($starts, '<=', 1, "and does not restart in a loop ($starts starts in 4 s)");
is($node->safe_psql('postgres', q{SELECT state FROM hoplock_workers WHERE datname = 'damaged'}),
	'failing', 'hoplock_workers shows it failing');
my ($ret, $out, $err) = $node->psql('damaged', q{SELECT hoplock_acquire('x', 'a', '1 s')});
like($err, qr/must be NOT NULL/, 'calls raise the same error (55000)');
# repaired, the worker catches up by itself
$node->safe_psql('damaged', q{
	DELETE FROM hoplock_internal.lease WHERE owner IS NULL;
	ALTER TABLE hoplock_internal.lease ALTER COLUMN owner SET NOT NULL;
	SELECT hoplock_acquire('after', 'a', '200 ms');
});
$node->poll_query_until('damaged',
	q{SELECT state = 'x' FROM hoplock_internal.lease WHERE name = 'after'})
  or die 'not announced after the repair';
pass('once the table is repaired, the worker announces again');
$node->safe_psql('postgres', 'DROP DATABASE damaged');

# --- Only a statement that will really run stops a worker ---------------------
$node->safe_psql('postgres', q{
	CREATE ROLE mallory LOGIN;
	CREATE DATABASE other;
});
$node->safe_psql('other', 'CREATE EXTENSION hoplock');
wait_served('other');
my $pid = worker_pid('postgres');
$log_offset = -s $node->logfile;
foreach my $stmt (
	'DROP DATABASE postgres',
	'ALTER DATABASE postgres RENAME TO stolen',
	'ALTER DATABASE postgres SET TABLESPACE pg_default',
	'CREATE DATABASE copied TEMPLATE postgres',
	'DROP DATABASE other WITH (FORCE)')
{
	($ret, $out, $err) = $node->psql('other', $stmt, extra_params => [ '-U', 'mallory' ]);
	isnt($ret, 0, "mallory: $stmt fails");
}
# and in a loop, as fast as a role can send them
$node->psql('other', q{
	DO $$
	BEGIN
		FOR i IN 1..50 LOOP
			BEGIN
				EXECUTE 'ALTER DATABASE postgres RENAME TO stolen';
			EXCEPTION WHEN OTHERS THEN NULL;
			END;
		END LOOP;
	END $$;}, extra_params => [ '-U', 'mallory' ]);
sleep 1;
is(worker_pid('postgres'), $pid, 'none of it stopped the worker of database postgres');
$log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/hoplock worker for database "postgres" stopped/, 'no worker stop in the log');

# CREATE DATABASE ... TEMPLATE DEFAULT works with hoplock preloaded
($ret, $out, $err) = $node->psql('postgres', 'CREATE DATABASE defaulted TEMPLATE DEFAULT');
is($ret, 0, 'CREATE DATABASE ... TEMPLATE DEFAULT works') or diag($err);

# --- A statement that did run: the worker is back as soon as it is over -------
# (a rename to a name that exists fails after the worker was stopped)
for my $round (1 .. 5)
{
	$node->safe_psql('other', q{SELECT hoplock_acquire('back', 'a', '1 s')});
	my $t0 = time();
	($ret, $out, $err) = $node->psql('postgres', 'ALTER DATABASE other RENAME TO postgres');
	like($err, qr/already exists/, "round $round: the rename fails");
	$node->poll_query_until('other',
		q{SELECT state = 'x' FROM hoplock_internal.lease WHERE name = 'back'})
	  or die 'expiry never announced';
	my $took = time() - $t0;
	cmp_ok($took, '<', 2.5,
		sprintf('round %d: a 1 s lease is announced %.2f s after the statement', $round, $took));
	$node->safe_psql('other', q{SELECT hoplock_release('back', 'a')});
}

# --- A strong lock on the lease table is contention, not an error ------------
# A superuser holds ACCESS EXCLUSIVE on the table for a few seconds (as
# VACUUM FULL would), and the worker of the database starts again while it
# does (the failed rename), so that it must read the table then: no error,
# never "failing", and a term that lapses 1 s after the lock went is
# announced at once.
{
	my $listener = Hoplock::Listener->new($node, 'other');
	$node->safe_psql('other', q{SELECT hoplock_acquire('during', 'a', '1 s')});
	my $after_expires = $node->safe_psql('other', q{
		SELECT extract(epoch FROM expires_at) FROM hoplock_acquire('after', 'a', '4 s')});
	my $offset = -s $node->logfile;
	my $locker = $node->background_psql('other');
	$locker->query_safe('BEGIN; LOCK hoplock_internal.lease');
	($ret, $out, $err) = $node->psql('postgres', 'ALTER DATABASE other RENAME TO postgres');
	like($err, qr/already exists/, 'the rename fails, and the worker starts again');
	my ($polls, $failing) = (0, 0);
	while (time() < $after_expires - 1.0)
	{
		$failing++ if $node->safe_psql('postgres',
			q{SELECT count(*) FROM hoplock_workers WHERE datname = 'other' AND state = 'failing'}) ne '0';
		$polls++;
		usleep(50_000);
	}
	$locker->query_safe('COMMIT');
	my $released = time();
	$locker->quit;
	my $events = $listener->collect(10, sub {
		grep { $_->{event} eq 'expired' && $_->{name} eq 'after' } @{ $_[0] } });
	my ($during) = grep { $_->{event} eq 'expired' && $_->{name} eq 'during' } @$events;
	my ($after) = grep { $_->{event} eq 'expired' && $_->{name} eq 'after' } @$events;
	ok($during, 'the term that lapsed during the lock is announced');
	ok($after, 'the term that lapsed after it too');
	my $lag = $after ? ($after->{received_at} - Hoplock::Listener::epoch($after->{expires_at})) * 1000 : -1;
	diag(sprintf('lock held %.1f s; "during" announced %.0f ms after the lock went; "after" %.0f ms after it lapsed',
		$released - ($after_expires - 4),
		$during ? ($during->{received_at} - $released) * 1000 : -1, $lag));
	cmp_ok($lag, '<', 200, 'the later term is announced within 200 ms of its expiry');
	cmp_ok($lag, '>=', -1, 'not before it');
	is($failing, 0, "the worker was never failing ($polls looks)");
	my @errors = grep { /ERROR/ && !/already exists/ }
	  split /\n/, slurp_file($node->logfile, $offset);
	is(scalar(@errors), 0, 'no error in the server log') or diag(join("\n", @errors));
	$listener->disconnect;
	$node->safe_psql('other', q{SELECT hoplock_forget('during'), hoplock_forget('after')});
}

# --- Synchronous replication with the standby missing --------------------------
$node->safe_psql('postgres', 'CREATE DATABASE syncdb');
$node->safe_psql('syncdb', 'CREATE EXTENSION hoplock');
wait_served('syncdb');
$node->append_conf('postgresql.conf', "synchronous_standby_names = 'nosuch'");
$node->reload;
# the checkpointer tells the other processes a standby is now required
$node->poll_query_until('postgres', q{SELECT current_setting('synchronous_standby_names') = 'nosuch'})
  or die 'no reload';
sleep 1;
# the clients commit locally; the worker's announcement waits for the standby
$node->safe_psql('syncdb', q{SET synchronous_commit = local; SELECT hoplock_acquire('s', 'a', '200 ms')});
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity
	   WHERE backend_type = 'hoplock worker' AND datname = 'syncdb' AND wait_event = 'SyncRep'})
  or die 'the worker never waited for the standby';
pass('the worker waits for the missing synchronous standby');
# DROP DATABASE stops a worker stuck there
my $t0 = time();
($ret, $out, $err) = $node->psql('postgres', 'SET synchronous_commit = local; DROP DATABASE syncdb');
is($ret, 0, 'DROP DATABASE of its database succeeds') or diag($err);
cmp_ok(time() - $t0, '<', 4, 'at once');
# (a session stuck in a commit that waits for a standby holds interrupts,
# so it would keep any DROP DATABASE waiting for it: one at a time here)
$node->safe_psql('postgres', q{SET synchronous_commit = local; SELECT hoplock_acquire('s', 'a', '200 ms')});
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity
	   WHERE backend_type = 'hoplock worker' AND datname = 'postgres' AND wait_event = 'SyncRep'})
  or die 'the worker never waited for the standby';
# a fast shutdown is not held up
$t0 = time();
my $stopped;
{
	local $ENV{PGCTLTIMEOUT} = 20;
	$stopped = $node->stop('fast', fail_ok => 1);
}
ok($stopped, 'pg_ctl stop -m fast succeeds');
cmp_ok(time() - $t0, '<', 10, sprintf('in %.1f s', time() - $t0));
$node->stop('immediate') unless $stopped;
$node->append_conf('postgresql.conf', "synchronous_standby_names = ''");
$node->start;
wait_served('postgres');

# --- Crash-restarts: one worker per database -----------------------------------
for my $crash (1 .. 2)
{
	my $victim = $node->background_psql('postgres');
	my $vpid = $victim->query_safe('SELECT pg_backend_pid()');
	kill_and_wait_for_restart($node, $vpid);
	eval { $victim->quit };
	wait_served('postgres');
	sleep 3;
	is($node->safe_psql('postgres',
			q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'hoplock worker' AND datname = 'postgres'}),
		'1', "after crash-restart $crash: one worker serves the database");
}

# --- hoplock.databases takes names as written ------------------------------------
$node->safe_psql('postgres', 'CREATE DATABASE "MyDB"');
$node->safe_psql('MyDB', 'CREATE EXTENSION hoplock');
$node->append_conf('postgresql.conf', "hoplock.databases = 'postgres, MyDB'");
$node->reload;
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = 'MyDB' AND pid IS NOT NULL})
  or die 'MyDB not served';
pass('a database named MyDB is served when hoplock.databases says MyDB');
is($node->safe_psql('postgres', q{SELECT count(*) FROM hoplock_workers WHERE datname = 'other' AND pid IS NOT NULL}),
	'0', 'and a database it does not list is not');

$node->stop;
done_testing();
