# Hostile input: every SQL function of hoplock, and the trigger
# hoplock_fenced (created with random arguments, on tables and views,
# BEFORE, AFTER, INSTEAD OF, per row and per statement), called 50,000
# times (in make test; more with HOPLOCK_FUZZ_CALLS) with random and edge arguments -- names and owners of 0,
# 1, 255, 256, 257 bytes and longer, multibyte at the 256-byte edge, invalid
# UTF-8, C0, DEL and C1 control characters, NULLs; intervals with months,
# negative, zero, huge, "infinite" (no such interval before PostgreSQL 17:
# the literal is refused), at hoplock.max_ttl and a microsecond either
# side; generations 0, -1, 2^63-1, -2^63 and beyond; garbage and stale
# handles; settings at their limits (max_ttl, max_names_per_role,
# notify_renewals, log_events, read-only sessions) -- over prepared
# statements, from ordinary roles and superusers, in UTF8, LATIN1,
# SQL_ASCII and WIN1252 databases with clients in several
# encodings, in autocommit and in transaction blocks of every isolation
# level (savepoints, read-only, another session's change after the
# snapshot, PREPARE TRANSACTION).  Two processes share the work, each on
# databases of its own.
#
# Checked, call by call:
# - every error has a SQLSTATE of the contract (README, Errors), or is
#   PostgreSQL's own for an argument literal it cannot take in (22P02,
#   22007, 22008, 22015, 22003, 22021, 22P05) -- told apart by casting each
#   literal alone, on the same connection, beforehand -- or for a result it
#   cannot convert to the client's encoding (22P05); the trigger may also
#   say how it is set up wrong (42703, 42804, 39P01, as in sql/fenced.sql);
# - the error is the one the arguments call for: 22004 for a NULL; 22023
#   for a name or owner that is empty, longer than 256 bytes, holds a
#   control character or is no Unicode text (judged on the name as the
#   server has it, converted to UTF-8), a ttl that is not positive, has
#   months or exceeds the session's hoplock.max_ttl, a negative timeout, a
#   generation <= 0; 42501 for a function the role may not execute; never
#   22004 or 22023 when every argument is good; and through the trigger,
#   what its setup and the row call for;
# - a failing call changes nothing: the name's row in hoplock's lease table
#   and its last terms in the history (now and then the whole tables, with
#   their row counts),
#   the generation floor and the branches, and -- for calls refused for their arguments or
#   rights -- the counters, compared before and after sampled failing calls
#   in autocommit, and after ROLLBACK TO SAVEPOINT in transaction blocks (in
#   the same snapshot under REPEATABLE READ and SERIALIZABLE); outside one
#   snapshot, a difference that is only the expiry worker announcing a
#   lapsed term meanwhile is told apart;
# - a lease returned carries the name and owner given, and a positive
#   generation;
# - no connection is lost, the server answers at the end, its log shows no
#   crash, TRAP, PANIC, WARNING or error outside the clients' sessions, and
#   no client saw a WARNING.
#
# HOPLOCK_FUZZ_SEED repeats a run (the same calls; what the server answers
# still depends on timing), HOPLOCK_FUZZ_CALLS sets how many calls,
# HOPLOCK_FUZZ_SECONDS bounds the time.
#
# The calls are drawn by Hoplock::Fuzz::Generator, made by Hoplock::Fuzz,
# and judged by Hoplock::Fuzz::Judge (whose self-test is
# t/048_fuzz_judge.pl); this file says what must hold.
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use Hoplock::Fuzz;
use Hoplock::Fuzz::Judge;

sub from_env { my ($v, $default) = @_; return defined $v && $v =~ /^\d+$/ ? $v : $default }
my $seed = from_env($ENV{HOPLOCK_FUZZ_SEED}, (int(time() * 1000) ^ $$) % 2_147_483_647);
my $target_calls = from_env($ENV{HOPLOCK_FUZZ_CALLS}, 50_000);
my $max_seconds = from_env($ENV{HOPLOCK_FUZZ_SECONDS}, 300);
diag("seed $seed (set HOPLOCK_FUZZ_SEED=$seed to repeat this run)");
srand($seed);

my $run = Hoplock::Fuzz->new(seed => $seed, calls => $target_calls, seconds => $max_seconds);
$run->run;
my $node = $run->{node};
my ($calls, $elapsed, %by_fn, %count, %checks);
($calls, $elapsed) = @$run{qw(calls elapsed)};
%by_fn = %{ $run->{by_fn} };
%count = %{ $run->{count} };
%checks = %{ $run->{checks} };
my $tally = $run->{tally};
my @client_warnings = @{ $run->{client_warnings} };
my @perl_warnings = @{ $run->{perl_warnings} };
my ($library, $replaced) = @$run{qw(library replaced)};

# --- Afterwards --------------------------------------------------------------------------
my $alive = $node->safe_psql('postgres', 'SELECT 1');
is($alive, '1', 'the server answers after the run');
is($run->{dead}, 0, 'every connection of the run is still up');

diag(sprintf('%d calls in %.1f s (%.0f a second), seed %d', $calls, $elapsed, $calls / $elapsed, $seed));
diag('calls by function: ' . join(', ', map { "$_ $by_fn{$_}" } sort keys %by_fn));
my %by_state;
for my $key (keys %count)
{
	my ($fn, $class, $state) = split / /, $key;
	next unless defined $state && exists $by_fn{$fn};
	$by_state{"$class $state"} += $count{$key};
}
my $ok_calls = 0;
$ok_calls += $count{"$_ ok"} // 0 for keys %by_fn;
diag("succeeded: $ok_calls");
diag("errors, argument literals refused by PostgreSQL: "
	  . join(', ', map { (split / /)[1] . " $by_state{$_}" } sort grep { /^argument/ } keys %by_state));
diag("errors sending a result or message the client's encoding cannot show: "
	  . join(', ', map { (split / /)[1] . " $by_state{$_}" } sort grep { /^output/ } keys %by_state))
  if grep { /^output/ } keys %by_state;
diag("errors raised past the literals: "
	  . join(', ', map { (split / /)[1] . " $by_state{$_}" } sort grep { /^hoplock/ } keys %by_state));
diag('other statements: '
	  . join(', ', map { "$_ $count{$_}" } sort grep { !exists $by_fn{ (split / /)[0] } } keys %count));
diag('calls judged by their arguments: ' . join(', ', map { s/^arguments_//r . " $checks{$_}" } sort grep { /^arguments_/ } keys %checks));
diag('comparisons around failing calls: ' . join(', ', map { "$_ $checks{$_}" } sort grep { !/^arguments_/ } keys %checks));

cmp_ok($calls, '>=', $target_calls, "at least $target_calls calls");
cmp_ok($checks{autocommit} + $checks{in_transaction}, '>', $calls / 20,
	'failing calls compared before and after, often');

my @kinds = sort keys %{ $tally->{signatures} };
for my $kind (@Hoplock::Fuzz::Judge::KINDS)
{
	my $n = $tally->{problems}{"$kind (count)"} // 0;
	is($n, 0, "no call: $kind") or diag(Hoplock::Fuzz::Judge::report($tally, $kind));
}
diag("$library was replaced during the run: a crash may come from that, not from the calls")
  if $replaced && ($tally->{problems}{'a connection was lost (count)'} // 0);
my @other = grep { my $k = $_; !grep { $_ eq $k } @Hoplock::Fuzz::Judge::KINDS } @kinds;
is(scalar(@other), 0, 'no other problem')
  or diag(join("\n", map { "$_:\n" . Hoplock::Fuzz::Judge::report($tally, $_) } @other));

is(scalar(@client_warnings), 0, 'no client saw a WARNING')
  or diag(join('', @client_warnings[ 0 .. ($#client_warnings < 9 ? $#client_warnings : 9) ]));
is(scalar(@perl_warnings), 0, 'the test itself ran without warnings')
  or diag(join('', @perl_warnings[ 0 .. ($#perl_warnings < 9 ? $#perl_warnings : 9) ]));

my @bad_lines = Hoplock::Fuzz::Judge::bad_log_lines(slurp_file($node->logfile));
is(scalar(@bad_lines), 0, 'the server log shows no crash, no WARNING, and no error outside the clients\' sessions')
  or diag(join("\n", @bad_lines[ 0 .. ($#bad_lines < 19 ? $#bad_lines : 19) ],
		$replaced ? "$library was replaced during the run: a crash may come from that, not from the calls" : ()));

$node->stop('fast');
done_testing();
