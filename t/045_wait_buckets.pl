# Sleepers are woken by changes of what they wait for, not by whoever
# shares a condition variable with them.  A role that changes a lease of
# its own in a loop must not wake the hoplock_wait sleepers of another
# role's lease, even with a name chosen offline to share their bucket as
# the digest of the name used to pick it (bytes 8-11 of its SHA-256, modulo
# 1024); nor wake the hoplock_watch sleepers of another database, even one
# whose OID shares theirs modulo 64.  The sleepers still wake at once for
# their own lease, and their own database's events.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('buckets');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE victim LOGIN;
	CREATE ROLE mallory LOGIN;
});
# the counters live in the database's worker slot
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = 'postgres' AND state = 'sleeping'})
  or die 'no worker';

sub wakeups
{
	return $node->safe_psql('postgres',
		q{SELECT wakeups FROM hoplock_stats WHERE datname = 'postgres'});
}

# The attacker's loop: $n acquire/release pairs of $name, each call its own
# transaction.  Returns the seconds it took.
sub churn
{
	my ($db, $name, $n) = @_;
	my $script = '';
	$script .= "SELECT hoplock_acquire('$name', 'mallory-1', '1 min');\n"
	  . "SELECT hoplock_release('$name', 'mallory-1');\n"
	  for 1 .. $n;
	my $t0 = time();
	my ($out, $err) = ('', '');
	IPC::Run::run(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-U', 'mallory',
		  '-d', $node->connstr($db) ],
		'<', \$script, '>', \$out, '2>', \$err)
	  or die "churn failed: $err";
	return time() - $t0;
}

# --- hoplock_wait ------------------------------------------------------------

my $victim_name = 'payroll-leader';
$node->safe_psql('postgres',
	"SET ROLE victim; SELECT hoplock_acquire('$victim_name', 'holder', '1 h')");

# A name in the victim's bucket, found offline: the lookup costs about a
# thousand digests.  The database's OID is mixed in by XOR, the same for
# both names.
my $attack_name = $node->safe_psql('postgres', qq{
	WITH b AS (
		SELECT n, ((get_byte(d, 10) & 3) << 8) | get_byte(d, 11) AS bucket
		  FROM generate_series(1, 100000) AS i,
		       LATERAL (SELECT 'mallory-' || i AS n) AS x,
		       LATERAL (SELECT sha256(convert_to(x.n, 'UTF8')) AS d) AS y)
	SELECT n FROM b
	 WHERE bucket = (SELECT ((get_byte(d, 10) & 3) << 8) | get_byte(d, 11)
	                   FROM (SELECT sha256(convert_to('$victim_name', 'UTF8')) AS d) AS v)
	 LIMIT 1});
ok($attack_name =~ /^mallory-\d+$/, "a name sharing the victim's bucket: $attack_name");

my $nwaiters = 10;
my @waiters;
for my $i (1 .. $nwaiters)
{
	my $out = '';
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-U', 'victim', '-d', $node->connstr('postgres'), '-c',
		  "SELECT owner FROM hoplock_wait('$victim_name', 'w$i', '1 h', '2 min')" ],
		'>', \$out, '2>&1');
	push @waiters, { h => $h, out => \$out };
}
$node->poll_query_until('postgres', qq{
	SELECT count(*) = $nwaiters FROM pg_stat_activity
	 WHERE query LIKE '%hoplock_wait(''$victim_name''%' AND state = 'active'
	   AND wait_event_type = 'Extension' AND pid <> pg_backend_pid()})
  or die 'the waiters did not start';
usleep(200_000);

sub terms_begun
{
	return $node->safe_psql('postgres',
		q{SELECT terms_begun FROM hoplock_stats WHERE datname = 'postgres'});
}

my $before = wakeups();
my $terms_before = terms_begun();
my $pairs = 300;
my $secs = churn('postgres', $attack_name, $pairs);
usleep(500_000);
my $woken = wakeups() - $before;
is(terms_begun() - $terms_before, $pairs, "the attacker began $pairs terms");
note(sprintf('%d attacker transactions in %.2f s: %d wake-ups of %d waiters',
	2 * $pairs, $secs, $woken, $nwaiters));
cmp_ok($woken, '<', $nwaiters,
	"the attacker's transactions on a name of its own wake none of the victim's waiters");
is( $node->safe_psql('postgres', qq{
		SELECT count(*) FROM pg_stat_activity
		 WHERE query LIKE '%hoplock_wait(''$victim_name''%' AND state = 'active'
		   AND pid <> pg_backend_pid()}),
	$nwaiters, 'and they all still sleep');

# Their own lease's release wakes them at once: one takes the lease.
$before = wakeups();
$node->safe_psql('postgres',
	"SET ROLE victim; SELECT hoplock_release('$victim_name', 'holder')");
my $winner;
my $t0 = time();
while (!defined $winner && time() - $t0 < 10)
{
	for my $w (@waiters)
	{
		$w->{h}->pump_nb;
		$winner = $1 if ${ $w->{out} } =~ /^(w\d+)$/m;
	}
	usleep(10_000);
}
my $lag = time() - $t0;
ok(defined $winner, 'a release of the lease itself wakes a waiter, which takes it');
cmp_ok($lag, '<', 2, 'at once');
cmp_ok(wakeups() - $before, '>=', 1, 'counted as a wake-up');

$node->safe_psql('postgres', qq{
	SELECT pg_cancel_backend(pid) FROM pg_stat_activity
	 WHERE query LIKE '%hoplock_wait(''$victim_name''%' AND pid <> pg_backend_pid()});
for my $w (@waiters)
{
	$w->{h}->finish;
}

# --- hoplock_watch, across databases ------------------------------------------

SKIP:
{
	skip 'CREATE DATABASE ... OID needs PostgreSQL 15', 5
	  if $node->safe_psql('postgres', 'SHOW server_version_num') < 150000;

	# a database whose OID is the same as postgres's modulo 64
	my $pgoid = $node->safe_psql('postgres',
		q{SELECT oid FROM pg_database WHERE datname = 'postgres'});
	my $oid = $pgoid + 64 * int((30000 - $pgoid) / 64);
	$node->safe_psql('postgres', "CREATE DATABASE tenant OID $oid");
	$node->safe_psql('tenant', q{
		CREATE EXTENSION hoplock;
		SELECT hoplock_acquire('tenant-leader', 'holder', '1 h');
	});
	is($node->safe_psql('postgres',
			q{SELECT oid::bigint % 64 FROM pg_database WHERE datname = 'tenant'}),
		$pgoid % 64, 'a database sharing the bucket of postgres');

	# Reads of the tenant's hoplock tables: each wake-up of a watcher reads
	# the event log.  Counted when the backends that made them exit.
	my $reads_sql = q{
		SELECT pg_stat_clear_snapshot();
		SELECT sum(coalesce(seq_scan, 0) + coalesce(idx_scan, 0))
		  FROM pg_stat_all_tables WHERE schemaname = 'hoplock_internal'};
	my $reads = sub {
		my @r = split /\n/, $node->safe_psql('tenant', $reads_sql);
		return $r[-1];
	};
	my $tenant_idle = q{
		SELECT count(*) = 0 FROM pg_stat_activity
		 WHERE datname = 'tenant' AND backend_type = 'client backend'
		   AND pid <> pg_backend_pid()};
	$node->poll_query_until('tenant', $tenant_idle) or die 'tenant busy';
	my $reads_before = $reads->();

	my $wout = '';
	my $wh = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('tenant'), '-c',
		  q{SELECT count(*) FROM hoplock_watch(hoplock_position(), '6 s')} ],
		'>', \$wout, '2>&1');
	$node->poll_query_until('tenant', q{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE datname = 'tenant' AND query LIKE '%hoplock_watch(%'
		   AND wait_event_type = 'Extension'})
	  or die 'the watcher did not start';
	my $wsecs = churn('postgres', 'mallory-watch', $pairs);
	$wh->finish;
	$node->poll_query_until('tenant', $tenant_idle) or die 'tenant busy';
	my $watcher_reads = $reads->() - $reads_before;
	note(sprintf('%d transactions in postgres in %.2f s: %d reads in tenant',
		2 * $pairs, $wsecs, $watcher_reads));
	like($wout, qr/^0$/m, 'the watcher saw no event of its database');
	cmp_ok($watcher_reads, '<', 50,
		"another database's events do not wake the watcher, which reads its log only once a second");

	# the watcher still wakes at once for its own database's events
	$wout = '';
	$wh = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('tenant'), '-c',
		  q{SELECT event FROM hoplock_watch(hoplock_position(), '30 s')} ],
		'>', \$wout, '2>&1');
	$node->poll_query_until('tenant', q{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE datname = 'tenant' AND query LIKE '%hoplock_watch(%'
		   AND wait_event_type = 'Extension'})
	  or die 'the watcher did not start';
	my $t1 = time();
	$node->safe_psql('tenant', q{SELECT hoplock_release('tenant-leader', 'holder')});
	$wh->finish;
	my $wlag = time() - $t1;
	like($wout, qr/^released$/m, "the watcher gets its database's event");
	cmp_ok($wlag, '<', 2, 'at once');
}

# --- a waiter leaves the table of names however it ends ------------------------

# The table has one entry per process that could wait.  Waiters that end
# by an error (statement_timeout) and by FATAL (pg_terminate_backend), more
# of them than it has entries, each on a name of its own, leave it as they
# found it: a waiter afterwards, on another name, still sleeps on its
# name's condition variable (it does not poll) and wakes at once.
my $procs = $node->safe_psql('postgres', q{
	SELECT current_setting('max_connections')::int
	     + current_setting('autovacuum_max_workers')::int + 1
	     + current_setting('max_worker_processes')::int
	     + current_setting('max_wal_senders')::int
	     + current_setting('max_prepared_transactions')::int + 5});
my $rounds = $procs + 5;
$node->safe_psql('postgres', q{SELECT hoplock_acquire('held-' || i, 'holder', '1 h')
	FROM generate_series(0, } . (2 * $rounds) . q{) AS i});

my $script = "SET statement_timeout = '20ms';\n";
$script .= "SELECT hoplock_wait('held-$_', 'timed-out', '1 h', '1 min');\n"
  for 1 .. $rounds;
my ($sout, $serr) = ('', '');
IPC::Run::run([ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
	'<', \$script, '>', \$sout, '2>', \$serr);
is(scalar(() = $serr =~ /canceling statement due to statement timeout/g),
	$rounds, "$rounds waiters ended by an error");

my $terminated = 0;
for my $i ($rounds + 1 .. 2 * $rounds)
{
	my $out = '';
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		  "SELECT hoplock_wait('held-$i', 'terminated', '1 h', '1 min')" ],
		'>', \$out, '2>&1');
	$node->poll_query_until('postgres', qq{
		SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		 WHERE query LIKE '%hoplock_wait(''held-$i''%' AND wait_event_type = 'Extension'
		   AND pid <> pg_backend_pid()})
	  or die "waiter $i did not start";
	$h->finish;
	$terminated++ if $out =~ /terminating connection/;
}
is($terminated, $rounds, "$rounds waiters ended by FATAL");

{
	my $out = '';
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		  "SET client_min_messages = debug1; SELECT owner FROM hoplock_wait('held-0', 'after', '1 h', '1 min')" ],
		'>', \$out, '2>&1');
	$node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE query LIKE '%hoplock_wait(''held-0''%' AND wait_event_type = 'Extension'
		   AND pid <> pg_backend_pid()})
	  or die 'the waiter did not start';
	# long enough for a poll to be a second apart
	sleep(3);
	my $t2 = time();
	$node->safe_psql('postgres', q{SELECT hoplock_release('held-0', 'holder')});
	$h->finish;
	my $lag2 = time() - $t2;
	like($out, qr/^after$/m, 'a waiter afterwards gets the lease');
	unlike($out, qr/polling/, 'on its condition variable, not by polling');
	cmp_ok($lag2, '<', 0.5, 'at once');
}

$node->stop;
done_testing();
