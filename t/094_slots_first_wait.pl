# Waits with slots => N on a name that has never had slots: the first
# attempt of a wait writes the row recording N.  An attempt that took no
# slot (another candidate comes first) must leave nothing behind when it
# sleeps -- not the row recording N, not the name's lock, nor the removal
# of another number's rows: else every other waiter finds the name being
# changed, and waits until the sleeper's timeout while a slot is free.
# The gate: a term without slots, begun in a transaction left open, keeps
# both waiters contended until it rolls back; then they race to record N.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use Hoplock::Background;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('slots_first_wait',
	port => $ENV{HOPLOCK_TAP_PORT});
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');




# -- gated: candidate b first, a after it; the gate opens; both must get a
#    slot within a few seconds, not at the end of the 8 s timeout
my $tries = 12;
my $stalled = 0;
my $slowest = 0;
for my $i (1 .. $tries)
{
	my $name = "g$i";
	# (held open until both waiters are candidates: a gate timed by a
	# sleep opened before them on a loaded machine)
	my $gate_in = qq{BEGIN;\nSELECT hoplock_acquire('$name', 'gate', '1 h') IS NOT NULL;\n};
	my $gate_out = '';
	my $gate = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
		'<', \$gate_in, '>', \$gate_out, '2>&1',
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	$gate->pump until $gate_out =~ /^t$/m;
	my $b = start_psql($node, "SELECT owner FROM hoplock_wait('$name', 'b', '1 h', '8 s', slots => 2)");
	wait_candidates($node, $name, 1);
	my $a = start_psql($node, "SELECT owner FROM hoplock_wait('$name', 'a', '1 h', '8 s', slots => 2)");
	wait_candidates($node, $name, 2);
	my $t0 = time;
	$gate_in .= "ROLLBACK;\n";
	$gate->finish;
	my $got = join ',', sort grep { $_ ne '' } split /\n/,
	  finish_psql($a) . finish_psql($b);
	my $took = time - $t0;
	$slowest = $took if $took > $slowest;
	if ($got ne 'a,b' || $took > 4)
	{
		$stalled++;
		diag(sprintf 'try %d: %s after %.1f s', $i, $got, $took);
	}
}
is($stalled, 0, "gated: both waiters get a slot at once, $tries tries");
note(sprintf 'slowest %.2f s after the gate opened', $slowest);

# -- the reported shape: two waits started at the same moment
$tries = 60;
$stalled = 0;
for my $i (1 .. $tries)
{
	my $name = "s$i";
	my $t0 = time;
	my @w = map {
		start_psql($node, "SELECT owner FROM hoplock_wait('$name', '$_', '1 h', '8 s', slots => 2)")
	} qw(a b);
	my $got = join ',', sort grep { $_ ne '' } split /\n/,
	  join '', map { finish_psql($_) } @w;
	my $took = time - $t0;
	if ($got ne 'a,b' || $took > 4)
	{
		$stalled++;
		diag(sprintf 'try %d: %s after %.1f s', $i, $got, $took);
	}
}
is($stalled, 0, "at once: both waiters get a slot at once, $tries tries");

$node->stop;
done_testing();
