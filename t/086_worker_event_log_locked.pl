# The event log locked by maintenance (VACUUM FULL, CLUSTER, pg_repack and
# LOCK TABLE take ACCESS EXCLUSIVE on it) is contention to the expiry
# worker, as the lease table locked is: it does not fail, and an expiry or
# the end of a hold (min_hold) that fell due meanwhile is announced as soon
# as the lock goes, not after the pause that follows an error.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time sleep);

my $node = PostgreSQL::Test::Cluster->new('event_locked');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub q1 { return $node->safe_psql('postgres', $_[0]); }

q1(q{SELECT hoplock_acquire('lapses', 'A', '2 s')});
q1(q{SELECT hoplock_acquire('kept', 'A', '2 s', min_hold => '2 s')});
q1(q{SELECT hoplock_release('kept', 'A')});
my $log_start = -s $node->logfile;

# the event log locked as VACUUM FULL locks it, across both deadlines
my ($in, $out) = ('', '');
my $h = IPC::Run::start([ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-f', '-' ],
	'<', \$in, '>', \$out, '2>&1');
$in .= "BEGIN;\nLOCK hoplock_internal.event IN ACCESS EXCLUSIVE MODE;\nSELECT 'locked';\n";
$h->pump until $out =~ /locked/;
sleep 6;
my @states = split /\n/, q1(q{SELECT state FROM hoplock_workers});
$in .= "COMMIT;\n\\q\n";
$h->finish;
my $t0 = time;

is(join(',', @states), 'sleeping', 'the worker waits for the lock, it does not fail');
$node->poll_query_until('postgres',
	q{SELECT count(*) = 2 FROM hoplock_events(0)
	   WHERE (name, event) IN (('lapses', 'expired'), ('kept', 'freed'))})
  or die 'not announced';
my $after = time - $t0;
cmp_ok($after, '<', 1, "expired and freed are announced as soon as the lock goes ($after s)");
my $log = slurp_file($node->logfile, $log_start);
unlike($log, qr/ERROR:  could not lock table "hoplock_internal.event"/,
	'the worker reports no error');

$node->stop;
done_testing();
