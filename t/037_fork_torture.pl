# Fork torture: random chains of grants, renewals, releases, lapses (of a
# lease with two slots too, whose events are judged per slot),
# fenced writes, compare-and-swap writes and event reads, across forks of
# the lease state -- pg_dump (plain, custom, --data-only) restored into a
# new database, another cluster and in place (pg_restore --clean), CREATE
# DATABASE ... TEMPLATE, crash restarts, promotions of a synchronous and
# of an asynchronous standby (cut off first; the old primary stopped or
# serving on), and data directories cloned and started twice -- recording
# every value any client was told (Hoplock::Forks).  The checker
# (Hoplock::Forks::Check) then holds, across all branches: no (name,
# generation), event number or (name, handle) stands for two things; every
# stale fence and stale-handle write was refused; hoplock_events(n) from
# every number a client saw returns the complete stream or an error.
#
# The checker's self-test must pass, and so must the run's checks (1.1
# broke them all: issue 17, defects 1-6; the 1.2 numbering of
# docs/forks-and-events.md holds).  The counts and violations are printed
# either way.
#
# HOPLOCK_FORKS_SECONDS (default 30) sets how long chains are drawn,
# HOPLOCK_FORKS_SEED the seed.  The record stays in tmp_check/log/037_fork_torture/.
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Hoplock::Forks;
use Hoplock::Forks::Check;

my $seconds = $ENV{HOPLOCK_FORKS_SECONDS} || 30;
my $seed    = $ENV{HOPLOCK_FORKS_SEED};

# --- The checker finds what it looks for ----------------------------------------
my ($clean, $mutated) = Hoplock::Forks::Check::self_test();
my @noise = map { "$_: @{ $clean->{$_} }" } grep { @{ $clean->{$_} } } sort keys %$clean;
ok(!@noise, 'checker self-test: a well-formed record passes every check')
  or diag(join("\n", @noise));
for my $m (@$mutated)
{
	my ($id, $what, $found) = @$m;
	ok($found, "checker self-test: $id reports $what");
}

# --- The run --------------------------------------------------------------------------
my $dir = "$PostgreSQL::Test::Utils::log_path/037_fork_torture";
PostgreSQL::Test::Utils::rmtree($dir) if -d $dir;
my $run = Hoplock::Forks->new(seconds => $seconds, dir => $dir, (defined $seed ? (seed => $seed) : ()));
$run->run;
is(join("\n", @{ $run->{errors} }), '', 'every fork was made and every server came back');

my $h = $run->history;
my $v = Hoplock::Forks::Check::check($h);
my $n = Hoplock::Forks::Check::counts($h);

my $line = sub { diag(sprintf('%-16s %s', @_)) };
my $c = sub { join(', ', map { my ($k, $label) = @$_; ($n->{$k} // 0) . " $label" } @_) };
diag("fork torture: $seconds s, seed $run->{seed}, record in $dir");
$line->('chains', "$n->{chains} chains, $n->{branches} branches, $n->{forks} forks, $run->{step} steps");
$line->('forks', join(', ', map { "$_ " . ($n->{"fork_$_"} // 0) } @Hoplock::Forks::FORK_KINDS));
$line->('promotions', $c->([ 'failover', 'with the old primary stopped' ], [ 'split_brain', 'with it serving on (split brain)' ]));
$line->('dumps', $c->([ 'dump_plain', 'plain' ], [ 'dump_custom', 'custom' ], [ 'dump_dataonly', '--schema-only + --data-only' ]));
$line->('grants', $c->([ 'acquire', 'acquires' ], [ 'acquire_granted', 'granted' ], [ 'renew', 'renewals' ], [ 'renew_ok', 'renewed' ],
		[ 'release', 'releases' ], [ 'release_ok', 'released' ], [ 'lapse', 'pauses for lapses' ]));
$line->('terms', $c->([ 'terms', 'distinct terms told' ], [ 'grants_told', 'leases and history rows told' ]));
$line->('fences', $c->([ 'guard_fence', 'hoplock_fence' ], [ 'guard_fence_passed', 'passed' ], [ 'guard_fence_stale', 'stale' ],
		[ 'guard_fence_other_branch', 'with a term of another branch' ]));
$line->('fenced rows', $c->([ 'guard_trigger', 'hoplock_fenced' ], [ 'guard_trigger_passed', 'passed' ], [ 'guard_trigger_stale', 'stale' ],
		[ 'guard_trigger_other_branch', 'with a term of another branch' ]));
$line->('CAS writes', $c->([ 'guard_write', 'hoplock_write' ], [ 'guard_write_passed', 'passed' ], [ 'guard_write_stale', 'stale' ],
		[ 'guard_write_other_branch', 'with a handle of another branch' ], [ 'read', 'hoplock_read' ]));
$line->('handles', $c->([ 'handles', 'distinct (name, handle)' ], [ 'handles_told', 'told' ]));
$line->('events', $c->([ 'event_numbers', 'distinct numbers' ], [ 'events_told', 'told' ], [ 'notified', 'by NOTIFY' ],
		[ 'streams', 'hoplock_events(0) reads' ]));
$line->('resumes', $c->([ 'resumes', 'hoplock_events(n)' ], [ 'resumes_other_branch', 'from a number of another branch' ],
		[ 'resumes_standby', 'on a standby' ], [ 'resumes_error', 'raised an error' ], [ 'late', 'late commits' ]));
$line->('checks', join(', ', map { "$_ " . ($n->{"check_$_"} // 0) } grep { $_ ne 'no_crash' } Hoplock::Forks::Check::check_ids()));

my $summary = Hoplock::Forks::Check::by_fork($v);
my $failed = 0;
for my $id (Hoplock::Forks::Check::check_ids())
{
	my @vi = @{ $v->{$id} };
	$failed += @vi;
	next unless @vi;
	diag(scalar(@vi) . " violations of $id, by the forks between where a value was told and where it was used: "
		  . join(', ', map { "$_ $summary->{$id}{$_}" } sort keys %{ $summary->{$id} }));
	diag("  $_") for @vi[ 0 .. ($#vi < 9 ? $#vi : 9) ];
}
if ($failed)
{
	open(my $fh, '>', "$dir/violations.txt") or die;
	for my $id (Hoplock::Forks::Check::check_ids())
	{
		print $fh "$id: $_\n" for @{ $v->{$id} };
	}
	close $fh;
	diag("verdict: $failed violations (all in $dir/violations.txt; steps in $dir/steps.log); seed $run->{seed}");
}
else
{
	diag('verdict: no violation');
}

for my $id (Hoplock::Forks::Check::check_ids())
{
	is(scalar @{ $v->{$id} }, 0, "$id: " . Hoplock::Forks::Check::describe($id));
}

cmp_ok($n->{forks}, '>', 0, 'the run forked');
cmp_ok($n->{acquire_granted} // 0, '>', 0, 'and granted terms');
cmp_ok($n->{resumes}, '>', 0, 'and resumed event streams');

done_testing();
