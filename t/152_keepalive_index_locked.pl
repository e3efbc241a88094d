# A lock held on the lease table's partial index on keepalive alone (a
# superuser's ALTER INDEX ... SET TABLESPACE, not a lock of the table) when
# hoplock_renew_all moves a keepalive's expiry earlier -- the first look of
# its transaction through that index -- is contention: 55P03, the call
# changes nothing, and the backend does not crash.  (It used to scan the
# index it could not open: an assertion failure, a NULL pointer without
# assertions.)
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('keepalive_index_locked');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub q1 { return $node->safe_psql('postgres', $_[0]); }

q1(q{SELECT count(*) FROM hoplock_renew_all('o', '60 s')});
q1(q{SELECT hoplock_acquire('t1', 'o', '60 s')});
my $before = q1(q{SELECT expires_at FROM hoplock_internal.keepalive WHERE owner = 'o'});

my $h = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		q{BEGIN; ALTER INDEX hoplock_internal.lease_by_keepalive SET TABLESPACE pg_default;
		  SELECT pg_sleep(5); COMMIT;}
	],
	'>', \my $out, '2>&1');
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_locks
	   WHERE relation = 'hoplock_internal.lease_by_keepalive'::regclass
	     AND mode = 'AccessExclusiveLock' AND granted})
  or die 'the index is not locked';

my ($ret, $stdout, $stderr) = $node->psql('postgres',
	q{SELECT count(*) FROM hoplock_renew_all('o', '10 s')});
like($stderr, qr/could not lock table "hoplock_internal\.lease"/,
	'a shorter renewal while the index is locked is contention');
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server is up');
is(q1(q{SELECT expires_at FROM hoplock_internal.keepalive WHERE owner = 'o'}),
	$before, 'the keepalive is as it was');
$h->finish;
unlike(slurp_file($node->logfile), qr/terminated by signal|TRAP:/,
	'no crash in the server log');

$node->stop;
done_testing();
