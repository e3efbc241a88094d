# Session-bound terms across exits in the middle of a transaction, after a
# failed one and after ROLLBACK TO SAVEPOINT: the exit ends the terms whose
# binding committed, and changes nothing for a name whose binding rolled
# back, nor for another session's bound term.
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('session_paths');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub session
{
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start([ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=0', '-d', $node->connstr('postgres') ],
		'<', \$in, '>', \$out, '2>', \$err);
	return { h => $h, in => \$in, out => \$out, err => \$err };
}

sub run_until
{
	my ($s, $sql, $re) = @_;
	${ $s->{in} } .= $sql;
	my $t0 = time();
	while (${ $s->{out} } !~ $re && time() - $t0 < 30)
	{
		$s->{h}->pump_nb;
		usleep(10_000);
	}
	die "timed out waiting for $re: ${ $s->{out} } ${ $s->{err} }" unless ${ $s->{out} } =~ $re;
}

sub holder
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce((SELECT owner FROM hoplock_holder('$name')), 'none')");
}

sub gone
{
	my ($pid) = @_;
	$node->poll_query_until('postgres',
		"SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $pid)") or die;
	usleep(300_000);
}

# Another session holds 'other' bound to itself.
my $other = session();
run_until($other, "SELECT hoplock_acquire('other', 'o', '1 h', session_bound => true) IS NOT NULL AS got;\n", qr/^t$/m);

# --- pg_terminate_backend while idle in a transaction ---------------------
my $s = session();
run_until($s, "SELECT pg_backend_pid();\n", qr/^\d+$/m);
my ($pid) = ${ $s->{out} } =~ /^(\d+)$/m;
run_until($s, qq{
SELECT hoplock_acquire('kept', 's', '1 h', session_bound => true) IS NOT NULL AS k1;
BEGIN;
SAVEPOINT a;
SELECT hoplock_acquire('rolled-back', 's', '1 h', session_bound => true) IS NOT NULL AS r1;
ROLLBACK TO SAVEPOINT a;
SELECT hoplock_acquire('in-flight', 's', '1 h', session_bound => true) IS NOT NULL AS f1;
SELECT hoplock_acquire('other', 's', '1 h', session_bound => true) IS NULL AS contended;
SELECT 'ready';
}, qr/^ready$/m);
is(holder('kept'), 's', 'kept is held');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
gone($pid);
is(holder('kept'), 'none', 'terminate: the committed binding ended');
is(holder('in-flight'), 'none', 'terminate: the uncommitted binding rolled back');
is($node->safe_psql('postgres', "SELECT count(*) FROM hoplock_internal.lease WHERE name IN ('in-flight', 'rolled-back')"),
	'0', 'no rows for the rolled-back names');
is(holder('other'), 'o', "terminate: another session's bound term untouched");

# --- a failed transaction, then disconnect --------------------------------
$s = session();
run_until($s, "SELECT pg_backend_pid();\n", qr/^\d+$/m);
($pid) = ${ $s->{out} } =~ /^(\d+)$/m;
run_until($s, qq{
SELECT hoplock_acquire('kept2', 's', '1 h', session_bound => true) IS NOT NULL AS k2;
BEGIN;
SELECT hoplock_acquire('failed', 's', '1 h', session_bound => true) IS NOT NULL AS f2;
SELECT 1/0;
ROLLBACK;
SELECT 'ready2';
}, qr/^ready2$/m);
${ $s->{in} } .= "\\q\n";
$s->{h}->finish;
gone($pid);
is(holder('kept2'), 'none', 'failed transaction: the committed binding ended at exit');
is(holder('failed'), 'none', 'failed transaction: nothing held');
is(holder('other'), 'o', "failed transaction: another session's term untouched");

# --- the released event of the exit names only the committed binding ------
is($node->safe_psql('postgres',
	"SELECT string_agg(name || ':' || how_ended, ',' ORDER BY name) FROM hoplock_internal.history WHERE name IN ('kept','kept2','in-flight','failed','other') AND how_ended IS NOT NULL"),
	'kept:session ended,kept2:session ended', 'history: only the committed bindings ended by the session')
	if $node->safe_psql('postgres', "SELECT count(*) FROM pg_attribute WHERE attrelid = 'hoplock_internal.history'::regclass AND attname = 'how_ended'") eq '1';

${ $other->{in} } .= "\\q\n";
$other->{h}->finish;
$node->stop;
done_testing();
