# What a review of min_hold found, each a reproduction that failed before
# its fix (1, 2, 4) or the documented behaviour (3).
#
# 1. The README ("Hold at least"): "The term's own owner ... may take the
#    name again at once."  It may not while another owner waits in
#    hoplock_wait: the candidate gate (hl_candidate_may_take) refuses the
#    owner's acquire because a candidate is first -- a candidate the hold
#    keeps out anyway.  The name is then free to nobody until the hold
#    ends, and any role that can call hoplock_wait on the name can stop
#    the owner's documented retake.
# 2. hoplock_leases lists a term released during its hold with
#    expired = true: the term was released, not expired; a client
#    re-subscribing (README: LISTEN, then read hoplock_leases) takes it
#    for a lapsed term.
# 3. During a hold, hoplock_read says there is no state (NULL: the term
#    ended), and hoplock_write with prev_handle NULL by another owner is
#    refused all the same: the README says so, and hoplock_leases says
#    until when (hold_until).
# 4. A term handed to a session-bound candidate that waited with min_hold,
#    never taken because the candidate's session ended, is ended by the
#    worker either as "abandoned" (no hold) or, when the worker finds the
#    candidate's session gone first (a pass after a restart), as "session
#    ended" -- keeps_hold() then keeps the name for the candidate's whole
#    min_hold, from every owner, for a term nobody ever took.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('min_hold_review');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub q1 { return $node->safe_psql('postgres', $_[0]); }

sub bg
{
	my @sql = @_;
	my $out = '';
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), map { ('-c', $_) } @sql ],
		'>', \$out, '2>&1');
	return { h => $h, out => \$out };
}

# --- 1. the hold's owner retakes the name while another owner waits ---------
q1(q{SELECT hoplock_acquire('tick', 'A', '1 min', min_hold => '30 s')});
q1(q{SELECT hoplock_release('tick', 'A')});
my $w = bg(q{SELECT coalesce((hoplock_wait('tick', 'B', '1 min', '8 s')).owner, 'none')});
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_candidates WHERE name = 'tick'})
  or die 'B is not waiting';
is(q1(q{SELECT coalesce((hoplock_acquire('tick', 'A', '1 min')).owner, 'refused')}),
	'A', "the hold's owner takes the name again at once, though B waits (README)");
$w->{h}->finish;
is(${ $w->{out} }, "none\n", 'B, kept out by the hold and then by A, got nothing');

# ... and with hoplock_wait by the owner, behind B
q1(q{SELECT hoplock_acquire('tick2', 'A', '1 min', min_hold => '30 s')});
q1(q{SELECT hoplock_release('tick2', 'A')});
$w = bg(q{SELECT coalesce((hoplock_wait('tick2', 'B', '1 min', '8 s')).owner, 'none')});
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_candidates WHERE name = 'tick2'})
  or die 'B is not waiting';
is(q1(q{SELECT coalesce((hoplock_wait('tick2', 'A', '1 min', '2 s')).owner, 'timed out')}),
	'A', "the hold's owner, waiting behind B, takes the name within its hold");
$w->{h}->finish;

# --- 2. hoplock_leases: a released term is not an expired one --------------
q1(q{SELECT hoplock_acquire('v', 'A', '1 h', min_hold => '1 h')});
q1(q{SELECT hoplock_release('v', 'A')});
is(q1(q{SELECT expired FROM hoplock_leases WHERE name = 'v'}), 'f',
	'a term released during its hold is not listed as expired');

# --- 3. hoplock_read and hoplock_write agree --------------------------------
q1(q{SELECT hoplock_acquire('cas', 'A', '1 h', min_hold => '1 h')});
q1(q{SELECT hoplock_release('cas', 'A')});
is(q1(q{SELECT (hoplock_read('cas') IS NULL)::text || ' '
             || coalesce((hoplock_write('cas', NULL, 'B', '1 h')).owner, 'refused') || ' '
             || (SELECT (hold_until > now())::text FROM hoplock_leases WHERE name = 'cas')}),
	'true refused true',
	'in a hold: hoplock_read has no state, write(prev_handle NULL) is refused, hoplock_leases says until when');

# --- 4. an untaken handed term keeps no hold --------------------------------
# Several names, so that the worker's order of the two ends it finds for
# each (session gone, candidate gone) does not hide it.
my @names = map { "ab$_" } 1 .. 6;
my (@cands, @cpids);
for my $n (@names)
{
	q1(qq{SELECT hoplock_acquire('$n', 'A', '10 min')});
	push @cands, bg(qq{SELECT hoplock_wait('$n', 'C', '10 min', '10 min',
	                                       session_bound => true, min_hold => '5 min')});
	$node->poll_query_until('postgres',
		qq{SELECT count(*) = 1 FROM hoplock_candidates WHERE name = '$n'})
	  or die "no candidate for $n";
	my $cpid = q1(qq{SELECT pid FROM hoplock_candidates WHERE name = '$n'});
	kill 'STOP', $cpid;    # it cannot take what it is handed
	push @cpids, $cpid;
	is(q1(qq{SELECT owner FROM hoplock_handoff('$n', 'A', (SELECT generation FROM hoplock_holder('$n')))}),
		'C', "$n handed to C");
}
my $wpid = q1(q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'hoplock worker' AND datname = 'postgres'});
kill 'STOP', $wpid;    # the candidates' "abandoned" stays in the mailbox
for my $cpid (@cpids) { kill 'TERM', $cpid; kill 'CONT', $cpid; }
$node->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM hoplock_candidates WHERE name LIKE 'ab%'})
  or die 'the candidates did not end';
$node->stop('immediate');    # the mailbox is lost: the worker's pass finds both
kill 'CONT', $wpid;
$node->start;
$_->{h}->finish for @cands;
$node->poll_query_until('postgres',
	q{SELECT count(*) = 6 FROM hoplock_history WHERE name LIKE 'ab%' AND owner = 'C' AND how IS NOT NULL})
  or die 'the handed terms were not ended';
is(q1(q{SELECT string_agg(name, ',' ORDER BY name) FROM hoplock_leases
         WHERE name LIKE 'ab%' AND hold_until IS NOT NULL}), '',
	'no name is kept by the hold of a handed term its candidate never took');
is(q1(q{SELECT string_agg(DISTINCT how, ',') FROM hoplock_history WHERE name LIKE 'ab%' AND owner = 'C'}),
	'abandoned', 'the untaken handed terms ended as abandoned');
is(q1(q{SELECT count(*) FROM unnest('{ab1,ab2,ab3,ab4,ab5,ab6}'::text[]) AS n
          WHERE hoplock_acquire(n, 'A', '1 min') IS NOT NULL}), '6',
	'A, which handed the names off, may take each of them back');

$node->stop;
done_testing();
