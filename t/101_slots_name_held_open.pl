# An ordinary role that holds a name with slots in a transaction left
# open -- its free slots taken without slots, which removes their rows
# and holds the name's lock in ExclusiveLock until it commits -- keeps
# every slot acquire out, but boundedly, as any term change in flight
# does: an acquire returns NULL at once, a wait returns NULL at its
# timeout, and a wait takes a slot within moments of the rollback.  A
# transaction that took a slot cannot be prepared (2PC).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('slots_name_held_open',
	port => $ENV{HOPLOCK_TAP_PORT});
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
max_prepared_transactions = 5});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE mallory LOGIN;});

$node->safe_psql('postgres', q{
	SELECT hoplock_acquire('jobs', 'a', '1 h', slots => 2);
	SELECT hoplock_release('jobs', 'a');});

my $out = '';
my $m = IPC::Run::start(
	[ 'psql', '-XAtq', '-U', 'mallory', '-d', $node->connstr('postgres'),
	  '-c', q{BEGIN;
		SELECT hoplock_acquire('jobs', 'm', '1 h') IS NOT NULL;
		SELECT pg_sleep(4);
		ROLLBACK;} ],
	'>', \$out, '2>&1');
$node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE query LIKE '%pg_sleep(4)%' AND wait_event = 'PgSleep'})
  or die 'mallory did not take the name';

my $t0 = time;
is($node->safe_psql('postgres',
		q{SELECT hoplock_acquire('jobs', 'a', '1 h', slots => 2) IS NULL}),
	't', 'a slot acquire meanwhile: NULL');
cmp_ok(time - $t0, '<', 1, '... at once');

$t0 = time;
is($node->safe_psql('postgres',
		q{SELECT hoplock_wait('jobs', 'a', '1 h', '1 s', slots => 2) IS NULL}),
	't', 'a slot wait meanwhile: NULL at its timeout');
cmp_ok(time - $t0, '<', 2.5, '... not later');

my $gate_end;
$t0 = time;
my $owner = $node->safe_psql('postgres',
	q{SELECT owner FROM hoplock_wait('jobs', 'a', '1 h', '30 s', slots => 2)});
my $took = time - $t0;
$m->finish;
like($out, qr/^t$/m, 'mallory had taken the free name without slots');
is($owner, 'a', 'a wait gets a slot once the transaction rolls back');
cmp_ok($took, '<', 6, "... soon after it (took ${\ sprintf '%.1f', $took} s)");

# 2PC: a transaction that took a slot is not prepared
my ($ret, $o, $err) = $node->psql('postgres', q{
	BEGIN;
	SELECT hoplock_acquire('jobs', 'b', '1 h', slots => 2) IS NOT NULL;
	PREPARE TRANSACTION 'slot';});
like($err, qr/cannot PREPARE a transaction that has changed a hoplock lease/,
	'a slot taken in a transaction to prepare: refused');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_prepared_xacts}), '0', '... nothing prepared');
is($node->safe_psql('postgres', q{
	SELECT string_agg(owner, ',' ORDER BY owner) FROM hoplock_leases
	 WHERE name = 'jobs' AND NOT expired}), 'a', '... and no slot taken');

$node->stop;
done_testing();
