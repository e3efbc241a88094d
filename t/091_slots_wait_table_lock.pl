# hoplock_wait with slots under a strong lock on the lease table (VACUUM
# FULL, CLUSTER, REINDEX, LOCK TABLE): it keeps waiting, as a wait for a
# lease without slots does, and takes a slot once the lock is gone --
# rather than raising 55P03 as an acquire does.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('slots_table_lock');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

# the lease table locked for 2 s by another session
sub lock_table
{
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
			'BEGIN; LOCK TABLE hoplock_internal.lease; SELECT pg_sleep(2); COMMIT;'
		],
		'>', \my $out, '2>&1');
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_locks
		   WHERE relation = 'hoplock_internal.lease'::regclass
		     AND mode = 'AccessExclusiveLock' AND granted})
	  or die 'the table is not locked';
	return $h;
}

my $h = lock_table();
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	q{SELECT owner FROM hoplock_wait('plain', 'c', '1 h', '20 s')});
is($stdout, 'c', 'a wait without slots outlasts the lock');
is($stderr, '', '... and raises nothing');
$h->finish;

$h = lock_table();
($ret, $stdout, $stderr) = $node->psql('postgres',
	q{SELECT owner FROM hoplock_wait('slotted', 'c', '1 h', '20 s', slots => 2)});
is($stdout, 'c', 'a wait with slots outlasts the lock');
is($stderr, '', '... and raises nothing');
$h->finish;

$node->stop;
done_testing();
