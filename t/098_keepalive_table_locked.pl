# Maintenance of the keepalive table and of its indexes (REINDEX, LOCK
# TABLE) is contention, as for the lease table: no call waits for it (a
# new term of any owner looks its owner's keepalive up), and
# the expiry worker neither fails its rounds over it nor pauses after it
# as it does after an error -- a keepalive that lapsed meanwhile is
# announced as soon as the lock is gone.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('keepalive_locked');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub q1 { return $node->safe_psql('postgres', $_[0]); }

# "sql" run by another session holding the lock on "relation" for "secs"
sub hold_lock
{
	my ($sql, $relation, $mode, $secs) = @_;
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
			"BEGIN; $sql; SELECT pg_sleep($secs); COMMIT;"
		],
		'>', \my $out, '2>&1');
	$node->poll_query_until('postgres',
		qq{SELECT count(*) = 1 FROM pg_locks
		   WHERE relation = '$relation'::regclass
		     AND mode = '$mode' AND granted})
	  or die "$relation is not locked";
	return $h;
}

# the database has a keepalive: new terms look their owner's up
q1(q{SELECT count(*) FROM hoplock_renew_all('someone', '1 h')});

# --- a REINDEX of the keepalive table's index on the owner ------------------
my $h = hold_lock('REINDEX INDEX hoplock_internal.keepalive_by_owner',
	'hoplock_internal.keepalive_by_owner', 'AccessExclusiveLock', 4);
my ($ret, $stdout, $stderr) = $node->psql('postgres', q{
	SET statement_timeout = '3 s';
	SELECT coalesce((hoplock_acquire('r1', 'other', '1 h')).owner, 'contended')});
unlike($stderr, qr/statement timeout/, 'an acquire does not wait for the REINDEX');
like($stdout, qr/^(other|contended)$/, '... it is a term or contention');
$h->finish;

# --- the worker, while the keepalive table is locked -------------------------
# owner K's keepalive lapses in 2 s, with a term attached as it began
q1(q{SELECT count(*) FROM hoplock_renew_all('K', '2 s')});
q1(q{SELECT hoplock_acquire('k1', 'K', '1 h')});
is(q1(q{SELECT keepalive > 0 FROM hoplock_internal.lease WHERE name = 'k1'}),
	't', 'k1 is attached');
my $log_offset = -s $node->logfile;
$h = hold_lock('LOCK TABLE hoplock_internal.keepalive',
	'hoplock_internal.keepalive', 'AccessExclusiveLock', 12);
$h->finish;
my $unlocked = time;
$node->poll_query_until('postgres',
	q{SELECT state = 'x' FROM hoplock_internal.lease WHERE name = 'k1'})
  or die 'k1 was not announced';
my $late = time - $unlocked;
cmp_ok($late, '<', 3, 'the lapse is announced at once once the lock is gone');
note sprintf('announced %.2f s after the lock went', $late);
my $log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/ERROR:.*hoplock_internal\.keepalive/,
	'the worker raised no error over the locked table');

# --- a session-bound attached term whose session ends meanwhile -----------
q1(q{SELECT count(*) FROM hoplock_renew_all('S', '1 h')});
my $session = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $node->connstr('postgres'),
		'-c', q{SELECT hoplock_acquire('s1', 'S', '1 h', session_bound => true)},
		'-c', 'SELECT pg_sleep(4)'
	],
	'>', \my $sout, '2>&1');
$node->poll_query_until('postgres',
	q{SELECT keepalive > 0 FROM hoplock_internal.lease WHERE name = 's1'})
  or die 's1 was not attached';
$log_offset = -s $node->logfile;
$h = hold_lock('LOCK TABLE hoplock_internal.keepalive',
	'hoplock_internal.keepalive', 'AccessExclusiveLock', 6);
$session->finish;
$h->finish;
$node->poll_query_until('postgres',
	q{SELECT state = 'r' FROM hoplock_internal.lease WHERE name = 's1'})
  or die 's1 was not released';
pass('the term of the session that ended is released once the lock is gone');
$log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/(ERROR|FATAL):.*hoplock_internal\.keepalive/,
	'the session left without an error over the locked table');

$node->stop;
done_testing();
