# The README's leader loop (examples/leader.sh), run for real: two
# instances, one leads; it is stalled with SIGSTOP past its ttl, the other
# takes over with a higher generation, and when the stalled one wakes its
# fenced writes are refused.  In the work log no write of an older
# generation follows one of a newer generation.  Then with a ttl below 3 s,
# given as a fraction: it leads, hands over on shutdown, and does not
# busy-loop.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE SCHEMA hoplock;
	CREATE EXTENSION hoplock SCHEMA hoplock;
});

local $ENV{PGHOST} = $node->host;
local $ENV{PGPORT} = $node->port;
local $ENV{PGDATABASE} = 'postgres';
local $ENV{LEADER_TTL} = 3;

my ($out_a, $err_a, $out_b, $err_b) = ('', '', '', '');
my $a = IPC::Run::start([ 'sh', 'examples/leader.sh', 'job' ], '>', \$out_a, '2>', \$err_a);
$node->poll_query_until('postgres', q{SELECT count(*) > 0 FROM work_log})
  or die 'the first instance never led';
my $b = IPC::Run::start([ 'sh', 'examples/leader.sh', 'job' ], '>', \$out_b, '2>', \$err_b);

# Let the first lead for a while; the second stays a follower.
sleep 4;
my $g1 = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock.hoplock_holder('job')});
is($node->safe_psql('postgres', q{SELECT count(DISTINCT owner) || '/' || count(DISTINCT generation) || '/' || max(generation) FROM work_log}),
	"1/1/$g1", "one leader, one generation (the holder's, $g1), while it keeps renewing");

# Stall the leader; the follower takes over once the term lapses.
my $leader_pid = $a->{KIDS}[0]{PID};
kill 'STOP', $leader_pid;
$node->poll_query_until('postgres', qq{SELECT max(generation) > $g1 FROM work_log})
  or die 'the follower never took over';
my $g2 = $node->safe_psql('postgres', q{SELECT max(generation) FROM work_log});
is($node->safe_psql('postgres', qq{SELECT count(DISTINCT generation) FROM work_log WHERE generation > $g1}),
	'1', "the follower took over with a higher generation ($g2) after the leader stalled");

# Wake the stalled leader.  Depending on where it stalled, its next renewal
# returns NULL or its next fenced write raises 55P03; either way it steps
# down and writes nothing more.
kill 'CONT', $leader_pid;
sleep 3;
is($err_a =~ s/^ERROR:  lease "job" is at generation $g2, not $g1\n//mr, '',
	'the woken leader saw no error but the fence\'s');
like($node->safe_psql('postgres', q{SELECT owner || '/' || generation FROM hoplock.hoplock_holder('job')}),
	qr{/$g2$}, "the new leader still holds generation $g2");
is( $node->safe_psql(
		'postgres', q{
		SELECT count(*) FROM work_log AS old, work_log AS new
		 WHERE old.generation < new.generation AND old.id > new.id}),
	'0',
	'no write of an older generation after one of a newer generation');
is( $node->safe_psql(
		'postgres', q{SELECT count(DISTINCT owner) FROM work_log GROUP BY generation HAVING count(DISTINCT owner) > 1}),
	'',
	'every generation wrote from one owner only');

# Shutdown releases.
$b->signal('TERM');
$a->signal('TERM');
$a->finish;
$b->finish;
is($node->safe_psql('postgres', q{SELECT count(*) FROM hoplock.hoplock_leases WHERE NOT expired}),
	'0', 'the leader released on SIGTERM');

# A short, fractional ttl.
local $ENV{LEADER_TTL} = '0.6';
$node->safe_psql('postgres', 'TRUNCATE work_log');
my ($out_c, $err_c, $out_d, $err_d) = ('', '', '', '');
my $c = IPC::Run::start([ 'sh', 'examples/leader.sh', 'short' ], '>', \$out_c, '2>', \$err_c);
my $d = IPC::Run::start([ 'sh', 'examples/leader.sh', 'short' ], '>', \$out_d, '2>', \$err_d);
sleep 3;
my ($owners, $rows) = split /\|/, $node->safe_psql('postgres',
	q{SELECT count(DISTINCT owner), count(*) FROM work_log WHERE lease = 'short'});
is($owners, '1', 'with a ttl of 0.6 s one instance leads');
# a unit of work every 0.2 s: some 15 in 3 s, far from a busy loop
cmp_ok($rows, '>=', 5, "it works ($rows units)");
cmp_ok($rows, '<=', 30, 'at a third of the ttl, not in a busy loop');
my $gen_before = $node->safe_psql('postgres', q{SELECT max(generation) FROM work_log WHERE lease = 'short'});
# the leader stops: the other takes over within its wait, not a ttl later
my $leader = $node->safe_psql('postgres',
	q{SELECT owner FROM hoplock.hoplock_holder('short')});
my ($stop, $stays) = $leader =~ /:$c->{KIDS}[0]{PID}$/ ? ($c, $d) : ($d, $c);
$stop->signal('TERM');
$stop->finish;
$node->poll_query_until('postgres',
	qq{SELECT max(generation) > $gen_before FROM work_log WHERE lease = 'short'})
  or die 'the other instance never took over';
pass('the other instance leads after the first shut down');
$stays->signal('TERM');
$stays->finish;
is($err_c . $err_d, '', 'no errors from either instance');
is($node->safe_psql('postgres', 'SELECT count(*) FROM hoplock.hoplock_leases WHERE NOT expired'),
	'0', 'both released');

# Instances started at once, before work_log exists: they race to create
# it, and none may die of losing (CREATE TABLE IF NOT EXISTS does not
# serialise concurrent creators).  Fresh schemas, four at a time.
local $ENV{LEADER_TTL} = '1';
my $died = '';
for my $round (1 .. 5)
{
	$node->safe_psql('postgres', "CREATE SCHEMA race$round");
	local $ENV{LEADER_WORK_SCHEMA} = "race$round";
	my @runs;
	for my $i (1 .. 4)
	{
		my ($out, $err) = ('', '');
		push @runs,
		  [ IPC::Run::start([ 'sh', 'examples/leader.sh', "race$round" ], '>', \$out, '2>', \$err), \$err ];
	}
	$node->poll_query_until('postgres', "SELECT count(*) > 0 FROM race$round.work_log")
	  or die "nobody led in round $round";
	usleep(300_000);
	for my $run (@runs)
	{
		$died .= "round $round: exited early: ${$run->[1]}" unless $run->[0]->pumpable;
		$run->[0]->signal('TERM');
		$run->[0]->finish;
		$died .= "round $round: ${$run->[1]}" if ${$run->[1]} ne '';
	}
}
is($died, '', 'instances started at once all survive creating work_log');

# A ttl that is not a number is refused at once.
local $ENV{LEADER_TTL} = '1s';
my ($out_e, $err_e) = ('', '');
IPC::Run::run([ 'sh', 'examples/leader.sh', 'bad' ], '>', \$out_e, '2>', \$err_e);
like($err_e, qr/LEADER_TTL must be a number of seconds/, 'a bad ttl is refused');

$node->stop;
done_testing();
