# hoplock_wait(..., preempt => true): a candidate of higher priority than
# the running term asks its holder to step down to it.  The worker writes
# the request (the candidate's transaction is open while it waits): a
# step_down event naming the candidate, step_down in the holder's next
# renewal, step_down_to in hoplock_leases.  Once per term and candidate;
# never for a candidate of equal or lower priority, nor without preempt,
# nor for a candidate whose role lacks the privileges of the term's role.
# The holder decides: it hands over (to whom it was asked) or keeps its
# term, which then goes on.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('preempt');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE app LOGIN;
	CREATE ROLE other LOGIN;
	CREATE ROLE app_member LOGIN IN ROLE app;
});
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_workers WHERE state = 'sleeping'})
  or die 'no worker';

# A psql waiting for lease $name as $owner (role $role) with $priority and
# preempt; returns once it is a candidate.
sub start_candidate
{
	my (%a) = @_;
	my $out = '';
	my $preempt = $a{preempt} // 'true';
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres'),
			'-U', $a{role} // 'app', '-c',
			"SELECT coalesce(owner || ' ' || generation, 'timeout') FROM hoplock_wait('$a{name}', '$a{owner}', '1 h', '$a{timeout}', priority => $a{priority}, preempt => $preempt)"
		],
		'>', \$out, '2>&1');
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM hoplock_candidates WHERE name = '$a{name}' AND owner = '$a{owner}'")
	  or die "$a{owner} is no candidate";
	return { h => $h, out => \$out };
}

sub finish
{
	my ($c) = @_;
	$c->{h}->finish;
	my ($o) = split /\n/, ${ $c->{out} };
	return $o;
}

# the step_down events of lease $name: "owner>to_owner" each
sub step_downs
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(string_agg(owner || '>' || coalesce(value, '-'), ',' ORDER BY seq), '') FROM hoplock_events(0) WHERE name = '$name' AND event = 'step_down'");
}

sub quiet_for_a_moment
{
	# the worker has had time to act on a request, had there been one
	$node->safe_psql('postgres', 'SELECT pg_sleep(0.5)');
}

# --- a preempting candidate of higher priority -------------------------------
$node->safe_psql('postgres', q{SET ROLE app; SELECT hoplock_acquire('p', 'low', '1 h')});
my $g1 = $node->safe_psql('postgres', q{SELECT generation FROM hoplock_holder('p')});
my $high = start_candidate(name => 'p', owner => 'high', priority => 5, timeout => '60 s');
$node->poll_query_until('postgres', q{SELECT step_down_to = 'high' FROM hoplock_leases WHERE name = 'p'})
  or die 'no step-down request';
pass('a preempting candidate of higher priority: the holder is asked to step down to it');
is(step_downs('p'), 'low>high', 'one step_down event, naming the candidate');
is($node->safe_psql('postgres', q{SET ROLE app; SELECT step_down FROM hoplock_renew('p', 'low', '1 h')}),
	't', 'the holder learns it from its next renewal');
is($node->safe_psql('postgres', q{SELECT owner FROM hoplock_holder('p')}),
	'low', 'the term goes on until the holder hands it over');

# a second preempting candidate of lower priority than the first: nothing new
my $mid = start_candidate(name => 'p', owner => 'mid', priority => 3, timeout => '60 s');
quiet_for_a_moment();
is(step_downs('p'), 'low>high', 'a later, lesser candidate asks nothing more');

# the holder hands over to whom it was asked: the new term has that priority
is($node->safe_psql('postgres', qq{SET ROLE app; SELECT owner FROM hoplock_handoff('p', 'low', $g1, 'high')}),
	'high', 'the holder hands over');
like(finish($high), qr/^high \d+$/, "the candidate's wait returns the term");
is($node->safe_psql('postgres', q{SELECT priority || ' ' || (step_down_at IS NULL) FROM hoplock_leases WHERE name = 'p'}),
	'5 true', 'the new term carries its priority, and no request');
quiet_for_a_moment();
is(step_downs('p'), 'low>high', '"mid" (priority 3) does not preempt a term of priority 5');
$node->safe_psql('postgres', q{SELECT pg_cancel_backend(pid) FROM hoplock_candidates WHERE owner = 'mid'});
finish($mid);

# --- no request: equal priority, no preempt, another role --------------------
$node->safe_psql('postgres', q{SET ROLE app; SELECT hoplock_acquire('q', 'holder', '1 h')});
my @quiet = (
	start_candidate(name => 'q', owner => 'equal', priority => 0, timeout => '60 s'),
	start_candidate(name => 'q', owner => 'polite', priority => 9, preempt => 'false', timeout => '60 s'),
	start_candidate(name => 'q', owner => 'stranger', priority => 9, role => 'other', timeout => '60 s'),
);
quiet_for_a_moment();
is(step_downs('q'), '', 'no request: equal priority, no preempt, or a role without the privileges of the term\'s');
is($node->safe_psql('postgres', q{SELECT step_down FROM hoplock_renew('q', 'holder', '1 h')}),
	'f', '... and the renewal says so');

# a member of the term's role may preempt
my $member = start_candidate(name => 'q', owner => 'member', priority => 2, role => 'app_member', timeout => '60 s');
$node->poll_query_until('postgres', q{SELECT step_down_to = 'member' FROM hoplock_leases WHERE name = 'q'})
  or die 'no step-down request for a member';
pass('a candidate whose role is a member of the term\'s role preempts');

# a higher one arriving later is asked for in turn
my $top = start_candidate(name => 'q', owner => 'top', priority => 7, role => 'app', timeout => '60 s');
$node->poll_query_until('postgres', q{SELECT step_down_to = 'top' FROM hoplock_leases WHERE name = 'q'})
  or die 'no step-down request for the higher candidate';
is(step_downs('q'), 'holder>member,holder>top', 'a better preempting candidate asks again, once');

# the holder that ignores the request keeps its term; released, it goes to
# the first candidate, as any freed lease
$node->safe_psql('postgres', q{SELECT pg_cancel_backend(pid) FROM hoplock_candidates WHERE name = 'q' AND owner <> 'top'});
finish($_) for (@quiet, $member);
is($node->safe_psql('postgres', q{SELECT owner FROM hoplock_holder('q')}),
	'holder', 'a holder that ignores the request keeps its term');
$node->safe_psql('postgres', q{SELECT hoplock_release('q', 'holder')});
like(finish($top), qr/^top \d+$/, 'released: the candidate gets it');

# --- a request for a candidate that has gone is not written ---------------
$node->safe_psql('postgres', q{SET ROLE app; SELECT hoplock_acquire('r', 'holder', '1 h')});
my $brief = start_candidate(name => 'r', owner => 'brief', priority => 1, timeout => '0.2 s');
is(finish($brief), 'timeout', 'a candidate that timed out');
quiet_for_a_moment();
# (it may have been asked for while it waited; never after: no later event)
my $n = $node->safe_psql('postgres',
	q{SELECT count(*) FROM hoplock_events(0) WHERE name = 'r' AND event = 'step_down'});
ok($n <= 1, 'at most the one request made while it waited');

# --- bad input -----------------------------------------------------------
my ($ret, $out, $err) = $node->psql('postgres',
	q{SELECT hoplock_wait('s', 'o', '1 s', '0', preempt => NULL)});
like($err, qr/preempt/, 'preempt => NULL is refused, naming the argument');

$node->stop;
done_testing();
