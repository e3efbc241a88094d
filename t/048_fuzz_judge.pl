# The judge of t/018_fuzz.pl (Hoplock::Fuzz::Judge), on made-up calls:
# well-formed ones must pass, and each kind of problem it looks for must
# be reported when a call shows it.  No server: the judge reads nothing
# but the call it is handed.
use strict;
use warnings;
use lib 't/lib';
use Test::More;
use Hoplock::Fuzz::Generator qw(@FUNCS);
use Hoplock::Fuzz::Judge;

my %F = map { $_->[0] => $_ } @FUNCS;
my $V = 150000;    # server_version_num

# A connection: an ordinary role, or the superuser, on a UTF8 database
sub conn
{
	my (%o) = @_;
	return {
		d => { db => 'fz_utf8', enc => 'UTF8' }, user => 'fuzz_user', role => 'fuzz_user',
		set_role => undef, su => 0, cenc => 'UTF8', output_may_fail => 0,
		settings => { max_ttl => 86400, read_only => 'off' }, %o };
}
my $user = conn();
my $su = conn(user => 'postgres', role => 'su', su => 1);

# Literal info, as Hoplock::Fuzz gets it from the server
sub text_lit { my ($s) = @_; return { state => '', bytes => length($s), utf8 => $s }; }
sub ival_lit { my ($us, $months) = @_; return { state => '', months => $months // 0, usecs => $us }; }
sub gen_lit { return { state => '', value => $_[0] }; }
my $NULL = { state => '', null => 1 };
sub refused { return { state => $_[0] }; }

# acquire3(name, owner, ttl): the call, its outcome
sub acquire
{
	my (%o) = @_;
	my $lits = $o{lits} // [ text_lit('fz-a'), text_lit('o1'), ival_lit(3_600_000_000) ];
	my $args = $o{args} // [ 'fz-a', 'o1', '1 h' ];
	return {
		c => $o{c} // $user, f => $F{ $o{fn} // 'acquire3' }, args => $args, lits => $lits,
		state => $o{state} // '', rows => $o{rows} // [ [ 'fz-a', 'o1', 7, 'h2:1:7' ] ],
		msg => '', context => 'autocommit', server_version => $o{server_version} // $V };
}

# The kinds of the problems the judge reports for a call
sub kinds { return join(', ', map { $_->[0] } @{ Hoplock::Fuzz::Judge::call($_[0])->{problems} }); }

# --- Calls that are as they should be ----------------------------------------------
my @good = (
	[ 'a lease granted', acquire() ],
	[ 'NULL: held by another', acquire(rows => [ [ undef, undef, undef, undef ] ]) ],
	[ 'an empty name refused (22023)', acquire(args => [ '', 'o1', '1 h' ],
		lits => [ text_lit(''), text_lit('o1'), ival_lit(3_600_000_000) ], state => '22023', rows => []) ],
	[ 'a 257-byte owner refused (22023)', acquire(args => [ 'fz-a', 'o' x 257, '1 h' ],
		lits => [ text_lit('fz-a'), text_lit('o' x 257), ival_lit(3_600_000_000) ], state => '22023', rows => []) ],
	[ 'a C1 control character refused (22023)', acquire(args => [ "a\xc2\x85", 'o1', '1 h' ],
		lits => [ text_lit("a\xc2\x85"), text_lit('o1'), ival_lit(3_600_000_000) ], state => '22023', rows => []) ],
	[ 'a NULL name refused (22004)', acquire(args => [ undef, 'o1', '1 h' ],
		lits => [ $NULL, text_lit('o1'), ival_lit(3_600_000_000) ], state => '22004', rows => []) ],
	[ 'a ttl with months refused (22023)', acquire(args => [ 'fz-a', 'o1', '1 mon' ],
		lits => [ text_lit('fz-a'), text_lit('o1'), ival_lit(0, 1) ], state => '22023', rows => []) ],
	[ 'a ttl above max_ttl refused (22023)', acquire(args => [ 'fz-a', 'o1', '86400.000001 s' ],
		lits => [ text_lit('fz-a'), text_lit('o1'), ival_lit('86400000001') ], state => '22023', rows => []) ],
	[ 'a literal PostgreSQL refuses, refused the same', acquire(args => [ 'fz-a', 'o1', 'garbage' ],
		lits => [ text_lit('fz-a'), text_lit('o1'), refused('22007') ], state => '22007', rows => []) ],
	[ 'a name held elsewhere (55P03 of fence)', { %{ acquire(fn => 'fence', args => [ 'fz-a', '7' ],
		lits => [ text_lit('fz-a'), gen_lit(7) ], state => '55P03', rows => []) } } ],
	[ 'a privileged function refused to an ordinary role (42501)', acquire(fn => 'force_release',
		args => ['fz-a'], lits => [ text_lit('fz-a') ], state => '42501', rows => []) ],
	[ 'a privileged function run by the superuser', acquire(c => $su, fn => 'force_release',
		args => ['fz-a'], lits => [ text_lit('fz-a') ], rows => [ ['t'] ]) ],
	[ 'a result the client\'s encoding cannot show (22P05)',
		acquire(c => conn(cenc => 'LATIN1', output_may_fail => 1), state => '22P05', rows => []) ],
	[ 'hoplock_read returns the holder, another owner', acquire(fn => 'read', args => ['fz-a'],
		lits => [ text_lit('fz-a') ], rows => [ [ 'fz-a', 'o9', 3, 'h2:1:3' ] ]) ],
	[ 'before PostgreSQL 14, intervals are not judged', acquire(server_version => 130000,
		args => [ 'fz-a', 'o1', '2 days' ], lits => [ text_lit('fz-a'), text_lit('o1'), ival_lit('172800000000') ]) ],
	[ 'the arguments fetched one by one', { %{ acquire() },
		lits => sub { (text_lit('fz-a'), text_lit('o1'), ival_lit(3_600_000_000))[ $_[0] ] } } ],
	[ 'a handoff to the first candidate (to_owner NULL) returns its owner', acquire(fn => 'handoff',
		args => [ 'fz-a', 'o1', '7', undef ], lits => [ text_lit('fz-a'), text_lit('o1'), gen_lit(7), $NULL ],
		rows => [ [ 'fz-a', 'cand', 8, 'h2:2:8' ] ]) ],
	[ 'a handoff to a named candidate returns that owner', acquire(fn => 'handoff',
		args => [ 'fz-a', 'o1', '7', 'cand' ], lits => [ text_lit('fz-a'), text_lit('o1'), gen_lit(7), text_lit('cand') ],
		rows => [ [ 'fz-a', 'cand', 8, 'h2:2:8' ] ]) ],
	[ 'a proclaim clearing the value (NULL)', acquire(fn => 'proclaim',
		args => [ 'fz-a', 'o1', '7', undef ], lits => [ text_lit('fz-a'), text_lit('o1'), gen_lit(7), $NULL ],
		rows => [ ['t'] ]) ],
	[ 'a value with a control character refused (22023)', acquire(fn => 'proclaim',
		args => [ 'fz-a', 'o1', '7', "a" ], lits => [ text_lit('fz-a'), text_lit('o1'), gen_lit(7), text_lit("a") ],
		state => '22023', rows => []) ],
	[ 'a step-down request refused to an ordinary role (42501)', acquire(fn => 'step_down',
		args => [ 'fz-a', undef ], lits => [ text_lit('fz-a'), $NULL ], state => '42501', rows => []) ],
	[ 'no hold (min_hold NULL)', acquire(fn => 'acquire_hold',
		args => [ 'fz-a', 'o1', '1 h', undef ], lits => [ text_lit('fz-a'), text_lit('o1'), ival_lit(3_600_000_000), $NULL ]) ],
	[ 'a min_hold as long as the ttl', acquire(fn => 'acquire_hold',
		args => [ 'fz-a', 'o1', '1 h', '1 h' ],
		lits => [ text_lit('fz-a'), text_lit('o1'), ival_lit(3_600_000_000), ival_lit(3_600_000_000) ]) ],
	[ 'a min_hold longer than the ttl refused (22023)', acquire(fn => 'acquire_hold',
		args => [ 'fz-a', 'o1', '1 h', '2 h' ],
		lits => [ text_lit('fz-a'), text_lit('o1'), ival_lit(3_600_000_000), ival_lit(7_200_000_000) ],
		state => '22023', rows => []) ],
	[ 'renew_all: the terms renewed', acquire(fn => 'renew_all', args => [ 'o1', '1 h' ],
		lits => [ text_lit('o1'), ival_lit(3_600_000_000) ], rows => [ [ 'fz-a', 1, 7 ], [ 'fz-b', 1, 9 ] ]) ],
	[ 'renew_all: no term, no row', acquire(fn => 'renew_all', args => [ 'o1', '1 h' ],
		lits => [ text_lit('o1'), ival_lit(3_600_000_000) ], rows => []) ],
	[ 'renew_all: a ttl of 0 refused (22023)', acquire(fn => 'renew_all', args => [ 'o1', '0' ],
		lits => [ text_lit('o1'), ival_lit(0) ], state => '22023', rows => []) ],
	[ 'a NULL priority refused (22004)', acquire(fn => 'wait_candidate',
		args => [ 'fz-a', 'o1', '1 h', '0', undef, undef, 'true' ],
		lits => [ text_lit('fz-a'), text_lit('o1'), ival_lit(3_600_000_000), ival_lit(0), $NULL, $NULL, { state => '' } ],
		state => '22004', rows => []) ],
	[ 'three slots', acquire(fn => 'acquire_slots', args => [ 'fz-slots-3', 'o1', '1 h', '3' ],
		lits => [ text_lit('fz-slots-3'), text_lit('o1'), ival_lit(3_600_000_000), gen_lit(3) ],
		rows => [ [ 'fz-slots-3', 'o1', 7, 'h2:1:7' ] ]) ],
	[ 'slots 0 refused (22023)', acquire(fn => 'acquire_slots', args => [ 'fz-a', 'o1', '1 h', '0' ],
		lits => [ text_lit('fz-a'), text_lit('o1'), ival_lit(3_600_000_000), gen_lit(0) ],
		state => '22023', rows => []) ],
	[ 'a NULL slots refused (22004)', acquire(fn => 'wait_slots', args => [ 'fz-a', 'o1', '1 h', '0', undef ],
		lits => [ text_lit('fz-a'), text_lit('o1'), ival_lit(3_600_000_000), ival_lit(0), $NULL ],
		state => '22004', rows => []) ],
	[ 'a 252-byte name with slots refused (22023)', acquire(fn => 'acquire_slots',
		args => [ 'n' x 252, 'o1', '1 h', '2' ],
		lits => [ text_lit('n' x 252), text_lit('o1'), ival_lit(3_600_000_000), gen_lit(2) ],
		state => '22023', rows => []) ],
	[ 'a lease with 3 slots acquired without slots (22023)', { %{ acquire(state => '22023', rows => []) },
		msg => 'ERROR:  lease "fz-a" has 3 slots, not 1' } ],
	[ 'a lease of 1 slot acquired with 2 (22023)', { %{ acquire(fn => 'acquire_slots', args => [ 'fz-a', 'o1', '1 h', '2' ],
		lits => [ text_lit('fz-a'), text_lit('o1'), ival_lit(3_600_000_000), gen_lit(2) ],
		state => '22023', rows => []) }, msg => 'ERROR:  lease "fz-a" has 1 slot, not 2' } ],
	[ 'a 252-byte name with one slot', acquire(fn => 'acquire_slots',
		args => [ 'n' x 252, 'o1', '1 h', '1' ],
		lits => [ text_lit('n' x 252), text_lit('o1'), ival_lit(3_600_000_000), gen_lit(1) ],
		rows => [ [ 'n' x 252, 'o1', 7, 'h2:1:7' ] ]) ],
);
for my $g (@good)
{
	my ($what, $r) = @$g;
	is(kinds($r), '', "well formed: $what");
}
is(Hoplock::Fuzz::Judge::call(acquire())->{arguments}, 'good', 'good arguments are told good');
is(Hoplock::Fuzz::Judge::call($good[2][1])->{arguments}, 'bad', 'an empty name is told bad');
is(Hoplock::Fuzz::Judge::call($good[8][1])->{class}, 'argument', 'a literal PostgreSQL refuses: class argument');
is(Hoplock::Fuzz::Judge::call($good[14][1])->{arguments}, 'undecided', 'intervals before 14: undecided');

# --- Calls that show a problem, one of each kind --------------------------------------------
my @bad = (
	[ 'unexpected SQLSTATE', 'an internal error (XX000)', acquire(state => 'XX000', rows => []) ],
	[ 'an argument PostgreSQL refuses, but the call did otherwise', 'a refused literal, yet success',
		acquire(lits => [ text_lit('fz-a'), text_lit('o1'), refused('22007') ]) ],
	[ 'unexpected SQLSTATE', 'a refused literal, refused with a SQLSTATE of no literal',
		acquire(lits => [ text_lit('fz-a'), text_lit('o1'), refused('42P01') ], state => '42P01', rows => []) ],
	[ 'a bad argument not refused as the contract says', 'an empty name granted',
		acquire(args => [ '', 'o1', '1 h' ], lits => [ text_lit(''), text_lit('o1'), ival_lit(3_600_000_000) ],
			rows => [ [ '', 'o1', 7, 'h2:1:7' ] ]) ],
	[ 'a bad argument not refused as the contract says', 'a NULL owner refused as a bad value (22023, not 22004)',
		acquire(args => [ 'fz-a', undef, '1 h' ], lits => [ text_lit('fz-a'), $NULL, ival_lit(3_600_000_000) ],
			state => '22023', rows => []) ],
	[ 'a bad argument not refused as the contract says', 'a generation of 0 taken',
		acquire(fn => 'fence', args => [ 'fz-a', '0' ], lits => [ text_lit('fz-a'), gen_lit(0) ], rows => [ [''] ]) ],
	[ 'a bad argument not refused as the contract says', 'a negative ttl taken',
		acquire(args => [ 'fz-a', 'o1', '-1 s' ], lits => [ text_lit('fz-a'), text_lit('o1'), ival_lit(-1_000_000) ]) ],
	[ 'a bad argument not refused as the contract says', 'a min_hold longer than the ttl taken',
		acquire(fn => 'acquire_hold', args => [ 'fz-a', 'o1', '1 h', '2 h' ],
			lits => [ text_lit('fz-a'), text_lit('o1'), ival_lit(3_600_000_000), ival_lit(7_200_000_000) ]) ],
	[ 'a bad argument not refused as the contract says', 'a min_hold of 0 taken',
		acquire(fn => 'acquire_hold', args => [ 'fz-a', 'o1', '1 h', '0' ],
			lits => [ text_lit('fz-a'), text_lit('o1'), ival_lit(3_600_000_000), ival_lit(0) ]) ],
	[ 'good arguments refused', 'a min_hold as long as the ttl refused',
		acquire(fn => 'acquire_hold', args => [ 'fz-a', 'o1', '1 h', '1 h' ],
			lits => [ text_lit('fz-a'), text_lit('o1'), ival_lit(3_600_000_000), ival_lit(3_600_000_000) ],
			state => '22023', rows => []) ],
	[ 'a bad argument not refused as the contract says', 'slots 1001 taken',
		acquire(fn => 'acquire_slots', args => [ 'fz-a', 'o1', '1 h', '1001' ],
			lits => [ text_lit('fz-a'), text_lit('o1'), ival_lit(3_600_000_000), gen_lit(1001) ]) ],
	[ 'a bad argument not refused as the contract says', 'a 252-byte name with slots taken',
		acquire(fn => 'acquire_slots', args => [ 'n' x 252, 'o1', '1 h', '2' ],
			lits => [ text_lit('n' x 252), text_lit('o1'), ival_lit(3_600_000_000), gen_lit(2) ],
			rows => [ [ 'n' x 252, 'o1', 7, 'h2:1:7' ] ]) ],
	[ 'good arguments refused', 'a 251-byte name with slots refused',
		acquire(fn => 'acquire_slots', args => [ 'n' x 251, 'o1', '1 h', '2' ],
			lits => [ text_lit('n' x 251), text_lit('o1'), ival_lit(3_600_000_000), gen_lit(2) ],
			state => '22023', rows => []) ],
	[ 'good arguments refused', 'slots refused as disagreeing, naming another number than the call\'s',
		{ %{ acquire(state => '22023', rows => []) }, msg => 'ERROR:  lease "fz-a" has 3 slots, not 2' } ],
	[ 'good arguments refused', 'good arguments refused as bad (22023)', acquire(state => '22023', rows => []) ],
	[ 'good arguments refused', 'good arguments refused as NULL (22004)', acquire(state => '22004', rows => []) ],
	[ 'a function the role may not execute ran, or failed otherwise', 'force_release run by an ordinary role',
		acquire(fn => 'force_release', args => ['fz-a'], lits => [ text_lit('fz-a') ], rows => [ ['t'] ]) ],
	[ 'a function the role may not execute ran, or failed otherwise', 'force_release refused otherwise (22023)',
		acquire(fn => 'force_release', args => ['fz-a'], lits => [ text_lit('fz-a') ], state => '22023', rows => []) ],
	[ 'a lease returned does not match the call', 'a lease of another name',
		acquire(rows => [ [ 'fz-b', 'o1', 7, 'h2:1:7' ] ]) ],
	[ 'a lease returned does not match the call', 'a lease of another owner',
		acquire(rows => [ [ 'fz-a', 'o2', 7, 'h2:1:7' ] ]) ],
	[ 'a lease returned does not match the call', 'a lease of generation 0',
		acquire(rows => [ [ 'fz-a', 'o1', 0, 'h2:1:0' ] ]) ],
	[ 'a lease returned does not match the call', 'a handoff to a named candidate that returns another',
		acquire(fn => 'handoff', args => [ 'fz-a', 'o1', '7', 'cand' ],
			lits => [ text_lit('fz-a'), text_lit('o1'), gen_lit(7), text_lit('cand') ],
			rows => [ [ 'fz-a', 'other', 8, 'h2:2:8' ] ]) ],
	[ 'a renewal returned does not match the call', 'renew_all returning a term twice',
		acquire(fn => 'renew_all', args => [ 'o1', '1 h' ], lits => [ text_lit('o1'), ival_lit(3_600_000_000) ],
			rows => [ [ 'fz-a', 1, 7 ], [ 'fz-a', 1, 7 ] ]) ],
	[ 'a renewal returned does not match the call', 'renew_all returning generation 0',
		acquire(fn => 'renew_all', args => [ 'o1', '1 h' ], lits => [ text_lit('o1'), ival_lit(3_600_000_000) ],
			rows => [ [ 'fz-a', 1, 0 ] ]) ],
	[ 'a bad argument not refused as the contract says', 'renew_all taking an empty owner',
		acquire(fn => 'renew_all', args => [ '', '1 h' ], lits => [ text_lit(''), ival_lit(3_600_000_000) ],
			rows => []) ],
	[ 'a bad argument not refused as the contract says', 'a 257-byte value taken',
		acquire(fn => 'proclaim', args => [ 'fz-a', 'o1', '7', 'v' x 257 ],
			lits => [ text_lit('fz-a'), text_lit('o1'), gen_lit(7), text_lit('v' x 257) ], rows => [ ['t'] ]) ],
);
for my $b (@bad)
{
	my ($kind, $what, $r) = @$b;
	is(kinds($r), $kind, "reports $what");
}

# --- Comparisons around failing calls -------------------------------------------------
my @d = ('rows', '1/2/f/b', '1/0/0/0/0/0/0', '0', 'blind');
sub digest { my (%o) = @_; my @x = @d; $x[$_] = $o{$_} for keys %o; return \@x; }
is(Hoplock::Fuzz::Judge::digests(digest(), digest(), 1, 1), undef, 'digests: nothing changed');
is(Hoplock::Fuzz::Judge::digests(digest(), digest(0 => 'rows2', 3 => '1'), 0, 1), 'announced',
	'digests: an expiry announced meanwhile (outside one snapshot) is told apart');
for my $case (
	[ 'the rows, in the same snapshot', digest(0 => 'rows2'), 1, 0, 'the rows compared' ],
	[ 'the rows, blind to announcements too', digest(0 => 'rows2', 4 => 'blind2'), 0, 0, 'the rows compared' ],
	[ 'the floor', digest(1 => '1/2/g/b'), 0, 0, 'the row counts or the floor' ],
	[ 'the counters of a call refused for its arguments', digest(2 => '2/0/0/0/0/0/0'), 0, 1, 'the counters' ])
{
	my ($what, $after, $strict, $counters, $want) = @$case;
	my $r = Hoplock::Fuzz::Judge::digests(digest(), $after, $strict, $counters);
	ok(ref $r && grep({ /^\Q$want\E/ } @$r), "digests: a failing call changed $what");
	is((Hoplock::Fuzz::Judge::changed($r, $user, 'acquire3', '22023', 'SELECT 1', [], 'autocommit'))[0][0],
		'a failing call changed something', "digests: reported as a change ($what)") if ref $r;
}
is(Hoplock::Fuzz::Judge::digests(digest(), digest(2 => '2/0/0/0/0/0/0'), 0, 0), undef,
	'digests: the counters may move for a call that got past its arguments');

# --- The trigger -------------------------------------------------------------------------
my %row = (g8 => 7, g4 => 7, g2 => 7, gn => 7, gt => 7, payload => 'p');
sub trigger
{
	my (%o) = @_;
	my $t = { args => $o{args} // [ 'fz-a', 'g8' ], shape => $o{shape} // 'before row', ddl => 'CREATE TRIGGER ...' };
	my $s = { t => $t, op => $o{op} // 'insert', sql => 'INSERT ...', args => [ 7, 7, 7, 7, 7, 'p' ],
		row => { %row, %{ $o{row} // {} } } };
	my $r = { c => $o{c} // $user, state => $o{state} // '', msg => '', context => 'trigger',
		lits => [ map { { state => '' } } 1 .. 6 ], name_verdict => $o{verdict} // 'ok' };
	return join(', ', map { $_->[0] } @{ Hoplock::Fuzz::Judge::trigger_call($s, $r)->{problems} });
}
my $setup = 'trigger: not refused as its setup or the row calls for';
my $good_row = 'trigger: a good row refused as a bad argument';
is(trigger(), '', 'trigger, well formed: a good row written');
is(trigger(state => '55P03'), '', 'trigger, well formed: a good row refused as its term is over');
is(trigger(shape => 'before statement', state => '39P01'), '', 'trigger, well formed: FOR EACH STATEMENT refused');
is(trigger(args => ['fz-a'], state => '22023'), '', 'trigger, well formed: one argument refused');
is(trigger(args => [ 'fz-a', 'nope' ], state => '42703'), '', 'trigger, well formed: no such column');
is(trigger(args => [ 'fz-a', 'gt' ], state => '42804'), '', 'trigger, well formed: a text column');
is(trigger(row => { g8 => undef }, state => '22004'), '', 'trigger, well formed: a NULL generation');
is(trigger(row => { g8 => -1 }, state => '55P03'), '', 'trigger, well formed: a negative generation');
is(trigger(verdict => '22023', state => '22023'), '', 'trigger, well formed: a bad lease name');
is(trigger(verdict => sub { 'ok' }), '', 'trigger, well formed: the name judged when needed');
is(trigger(c => conn(settings => { max_ttl => 86400, read_only => 'on' }), state => '25006'), '',
	'trigger, well formed: a read-only session');
is(trigger(shape => 'instead of row'), '', 'trigger, well formed: an INSTEAD OF trigger on the view does not fire on the table');
is(trigger(shape => 'before statement'), $setup, 'trigger: reports FOR EACH STATEMENT that wrote a row');
is(trigger(shape => 'after row'), $setup, 'trigger: reports an AFTER trigger that wrote a row');
is(trigger(args => [ 'fz-a', 'gt' ]), $setup, 'trigger: reports a text column taken');
is(trigger(row => { g8 => 0 }), $setup, 'trigger: reports a generation of 0 taken');
is(trigger(row => { g8 => undef }), $setup, 'trigger: reports a NULL generation taken');
is(trigger(state => '22023'), $good_row, 'trigger: reports a good row refused as a bad value');
is(trigger(state => '42804'), $good_row, 'trigger: reports a good row refused as set up wrong');
is(trigger(state => 'XX000'), 'unexpected SQLSTATE', 'trigger: reports an unexpected SQLSTATE');
is(join(', ', map { $_->[0] } Hoplock::Fuzz::Judge::truncate({ shape => 'before truncate', ddl => '' }, 'fz_w1', '0A000', '')),
	'', 'TRUNCATE, well formed: refused by a BEFORE TRUNCATE trigger');
is(join(', ', map { $_->[0] } Hoplock::Fuzz::Judge::truncate({ shape => 'before truncate', ddl => '' }, 'fz_w1', '', '')),
	$setup, 'TRUNCATE: reports one a BEFORE TRUNCATE trigger let through');
is(join(', ', map { $_->[0] } Hoplock::Fuzz::Judge::truncate({ shape => 'before row', ddl => '' }, 'fz_w1', '0A000', '')),
	$setup, 'TRUNCATE: reports one refused with no TRUNCATE trigger');
is(scalar(my @ct = Hoplock::Fuzz::Judge::create_trigger('22021', '', 'CREATE TRIGGER ...')), 0,
	'CREATE TRIGGER, well formed: a literal refused');
is((Hoplock::Fuzz::Judge::create_trigger('XX000', '', 'CREATE TRIGGER ...'))[0][0], 'unexpected SQLSTATE',
	'CREATE TRIGGER: reports an unexpected SQLSTATE');

# --- Settings, transactions, connections, the server's log ------------------------------
my $settings = sub { join(', ', map { $_->[0] } Hoplock::Fuzz::Judge::setting(@_)) };
is($settings->($su, 'hoplock.max_ttl = 1', '', ''), '', 'SET, well formed: the superuser sets max_ttl');
is($settings->($user, 'hoplock.notify_renewals = on', '', ''), '', 'SET, well formed: a role sets notify_renewals');
is($settings->($user, 'hoplock.max_ttl = 2147483647', '42501', ''), '', 'SET, well formed: a role refused max_ttl');
is($settings->($user, 'hoplock.max_ttl = 2147483647', '', ''), "an ordinary role changed a setting of a superuser's",
	'SET: reports an ordinary role that changed max_ttl');
is($settings->($su, 'hoplock.max_ttl = 1', 'XX000', ''), 'unexpected SQLSTATE', 'SET: reports an unexpected SQLSTATE');
is(scalar(my @te = Hoplock::Fuzz::Judge::transaction_end('COMMIT', '40001', '', 'in BEGIN')), 0,
	'COMMIT, well formed: a serialization failure');
is((Hoplock::Fuzz::Judge::transaction_end('PREPARE TRANSACTION', '42P01', '', 'in BEGIN'))[0][0],
	'unexpected SQLSTATE', 'PREPARE TRANSACTION: reports an unexpected SQLSTATE');
ok(Hoplock::Fuzz::Judge::lost('08006', ''), 'a connection was lost: 08006');
ok(Hoplock::Fuzz::Judge::lost('', 'server closed the connection unexpectedly'), 'a connection was lost: the message');
ok(!Hoplock::Fuzz::Judge::lost('57014', 'canceling statement due to statement timeout'),
	'a statement timeout is no lost connection');
my @log = (
	'2026-01-01 00:00:00.000 UTC [1] client backend ERROR:  hoplock: invalid name',
	'2026-01-01 00:00:00.000 UTC [2] postmaster LOG:  database system is ready',
	'TRAP: failed Assert("x"), File: "lease.c", Line: 1',
	'2026-01-01 00:00:00.000 UTC [3] hoplock worker ERROR:  oops',
	'2026-01-01 00:00:00.000 UTC [4] client backend WARNING:  hoplock: something',
	'2026-01-01 00:00:00.000 UTC [5] postmaster LOG:  server process (PID 9) was terminated by signal 11');
my %found = map { $_ => 1 } Hoplock::Fuzz::Judge::bad_log_lines(join("\n", @log));
is(join(' ', map { $found{ $log[$_] } ? $_ : () } 0 .. $#log), '2 3 4 5',
	'the server log: a TRAP, a worker\'s ERROR, a WARNING and a crash found, the clients\' ERRORs left');

# --- The tally -----------------------------------------------------------------------------
my $t1 = Hoplock::Fuzz::Judge::new_tally();
my $t2 = Hoplock::Fuzz::Judge::new_tally();
Hoplock::Fuzz::Judge::add_problem($t1, 'good arguments refused', "acquire3: 22023 name \"a\" 17\ndatabase fz_utf8 (UTF8)");
Hoplock::Fuzz::Judge::add_problem($t2, 'good arguments refused', "renew3: 22023 name \"b\" 18\ndatabase fz_utf8 (UTF8)");
Hoplock::Fuzz::Judge::add_problem($t2, 'good arguments refused', "renew3: 22023 other\ndatabase fz_latin1 (LATIN1)");
Hoplock::Fuzz::Judge::merge_tally($t1, $t2);
is($t1->{problems}{'good arguments refused (count)'}, 3, 'tally: problems counted across processes');
is(Hoplock::Fuzz::Judge::report($t1, 'good arguments refused') =~ tr/\n// >= 1 ? (split /\n/, Hoplock::Fuzz::Judge::report($t1, 'good arguments refused'))[0] : '',
	'2 x 22023 name "..." N [fz_utf8] (acquire3, renew3)', 'tally: one signature for the same problem with other values');

done_testing();
