# Candidates: the sessions waiting in hoplock_wait for a lease.  A freed
# lease goes to the candidate with the highest priority, among equals to
# the one that has waited longest; a plain hoplock_acquire, or a candidate
# that is not first, finds it contended meanwhile.  hoplock_candidates
# shows them, in that order.  A candidate whose client has gone stops
# being one within about a second.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('candidates');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE cand LOGIN;
	GRANT USAGE ON SCHEMA public TO cand;
});

# A psql running hoplock_wait for lease $name as $owner with $priority,
# as role $role; returns once it is a candidate: (handle, output, psql's
# pid).
sub start_candidate
{
	my ($name, $owner, $priority, $role) = @_;
	my $out = '';
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres'),
			'-U', $role // 'postgres', '-c',
			"SELECT coalesce(owner, 'timeout') FROM hoplock_wait('$name', '$owner', '1 h', '60 s', priority => $priority)"
		],
		'>', \$out, '2>&1');
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM hoplock_candidates WHERE name = '$name' AND owner = '$owner'")
	  or die "$owner is no candidate";
	return ($h, \$out, $h->{KIDS}[0]{PID});
}

sub finish_candidate
{
	my ($h, $out) = @_;
	$h->finish;
	chomp(my $o = $$out);
	return $o;
}

sub holder
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce((SELECT owner FROM hoplock_holder('$name')), 'nobody')");
}

# --- The view, and the order a freed lease goes in ---------------------------
is($node->safe_psql('postgres', 'SELECT count(*) FROM hoplock_candidates'),
	'0', 'nobody waits: no candidates');
$node->safe_psql('postgres', q{SELECT hoplock_acquire('c', 'holder', '1 h')});
my %c;
for my $w ([ 'w1', 0, undef ], [ 'w2', 5, 'cand' ], [ 'w3', 0, undef ], [ 'w4', 5, undef ])
{
	my ($owner, $priority, $role) = @$w;
	my ($h, $out, $pid) = start_candidate('c', $owner, $priority, $role);
	$c{$owner} = { h => $h, out => $out };
	usleep(2_000);    # waiting_since apart
}
is( $node->safe_psql('postgres',
		q{SELECT string_agg(owner || ':' || priority || ':' || role, ' ') FROM hoplock_candidates WHERE name = 'c'}),
	'w2:5:cand w4:5:postgres w1:0:postgres w3:0:postgres',
	'hoplock_candidates: by priority, then by how long they wait');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM hoplock_candidates c JOIN pg_stat_activity a USING (pid)
		   WHERE c.name = 'c' AND a.query LIKE '%hoplock_wait(''c'', ''' || c.owner || '''%'}),
	'4', 'each candidate\'s pid is its backend\'s');

my @served;
for my $expect (qw(w2 w4 w1 w3))
{
	# the holder lets go; in its next statement, a plain acquire of the
	# freed lease finds it contended: the first candidate has it coming
	my $plain = $node->safe_psql('postgres',
		q{SELECT hoplock_release('c', (SELECT owner FROM hoplock_holder('c')));
		  SELECT hoplock_acquire('c', 'plain', '1 h') IS NULL});
	is($plain, "t\nt", "freed with candidates waiting: a plain acquire gets NULL (next: $expect)");
	my $got = finish_candidate($c{$expect}{h}, $c{$expect}{out});
	push @served, $got;
	is(holder('c'), $expect, "the lease went to $expect");
}
is(join(' ', @served), 'w2 w4 w1 w3', 'served in order: priority, then arrival');
is($node->safe_psql('postgres', 'SELECT count(*) FROM hoplock_candidates'),
	'0', 'no candidates left');
$node->safe_psql('postgres', q{SELECT hoplock_release('c', 'w3')});
is($node->safe_psql('postgres', q{SELECT owner FROM hoplock_acquire('c', 'plain', '1 h')}),
	'plain', 'with no candidate, a plain acquire takes the freed lease');

# --- A candidate that gives up, or whose client goes, is none --------------
my ($h1, $o1, $psql1) = start_candidate('c', 'gone', 9);
my ($h2, $o2, $psql2) = start_candidate('c', 'next', 0);
kill 'KILL', $psql1;
my $t0 = time();
$node->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM hoplock_candidates WHERE owner = 'gone'})
  or die 'the candidate whose client went stays';
my $gone_after = time() - $t0;
$h1->finish;
note sprintf('a candidate whose client was killed left after %.2f s', $gone_after);
cmp_ok($gone_after, '<', 3, 'a candidate whose client has gone is none within about a second');
$node->safe_psql('postgres', q{SELECT hoplock_release('c', 'plain')});
is(finish_candidate($h2, $o2), 'next', 'the next candidate gets the lease');

# a candidate whose wait times out leaves, and the plain acquire may take
# the lease again
$node->safe_psql('postgres', q{SELECT hoplock_release('c', 'next')});
$node->safe_psql('postgres', q{SELECT hoplock_acquire('c', 'holder', '1 h')});
is($node->safe_psql('postgres', q{SELECT coalesce(owner, 'timeout') FROM hoplock_wait('c', 'brief', '1 h', '50 ms', priority => 3)}),
	'timeout', 'a wait that times out');
is($node->safe_psql('postgres', 'SELECT count(*) FROM hoplock_candidates'),
	'0', '... leaves no candidate behind');

# --- Bad input ----------------------------------------------------------------
my ($ret, $out, $err) = $node->psql('postgres',
	q{SELECT hoplock_wait('c', 'x', '1 h', '0', false, NULL)});
like($err, qr/priority/, 'a NULL priority is refused, naming the argument');

$node->stop;
done_testing();
