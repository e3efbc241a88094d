# Hoplock::Fuzz::Judge: the judge of the fuzz run of t/018_fuzz.pl.  It
# takes what one call was and what came of it, and says what is wrong with
# it, as a list of problems [ kind, text ] (empty when nothing is).  It
# reads nothing else -- no server, no clock, no rand() -- so it can be
# handed made-up calls (t/048_fuzz_judge.pl does).
#
# A call, as a hash (what Hoplock::Fuzz records):
#   c        the connection: { d => { db, enc }, user, role (su or a role's
#            name), set_role, su (a superuser now), cenc (client
#            encoding), output_may_fail, settings => { max_ttl (seconds),
#            read_only (on|off), ... } }
#   f        the function, a row of Hoplock::Fuzz::Generator's @FUNCS:
#            [ fn, sql, [ kinds of its arguments ], returns (lease|bool|
#            void|events), weight, privileged ]
#   args     the arguments, as sent (undef for NULL)
#   lits     what the server makes of each argument alone (see literal
#            info below): an array, or a sub given the argument's index
#   state, rows, msg     the outcome: SQLSTATE ('' for success), the rows,
#            the message
#   context  autocommit, or the transaction block it ran in
#   server_version       server_version_num
#
# Literal info: { state => SQLSTATE of casting the literal alone ('' when
# it is taken in), null => 1 for NULL; text: bytes (octet_length), utf8
# (the name as the server has it, in UTF-8) or utf8_error (why it has no
# UTF-8 form); interval: months, usecs (the microseconds hoplock reads);
# bigint: value }.
package Hoplock::Fuzz::Judge;

use strict;
use warnings;
use Exporter 'import';

our @EXPORT_OK = qw(cmp_int);

# --- SQLSTATEs ---------------------------------------------------------------
# hoplock's, from the README's Errors table
our %CONTRACT = map { $_ => 1 }
  qw(22004 22023 22P05 25006 42501 55P03 40001 25P01 0A000 53400 55000 23502 23514 XX001 57014 HL001);
# PostgreSQL's, for a literal it cannot take in as the parameter's type (or
# convert from the client's encoding)
our %PARSE = map { $_ => 1 } qw(22P02 22007 22008 22015 22003 22021 22P05);
# the trigger set up wrong (sql/fenced.sql)
our %TRIGGER_SETUP = map { $_ => 1 } qw(42703 42804 39P01);
# SET of a setting
our %SETTING = map { $_ => 1 } qw(22023 42501 55P02 42602 42704);
# a lost connection
our $LOST = qr/^(08|57P0)/;

# The type of the columns the trigger may be pointed at
our %COLUMN_TYPE = (g8 => 'int', g4 => 'int', g2 => 'int', id => 'int', gn => 'numeric', gt => 'text', payload => 'text');

# Every kind of problem the run looks for, as t/018_fuzz.pl reports them
our @KINDS = (
	'unexpected SQLSTATE',
	'an argument PostgreSQL refuses, but the call did otherwise',
	'a bad argument not refused as the contract says',
	'good arguments refused',
	'a function the role may not execute ran, or failed otherwise',
	'a failing call changed something',
	'a lease returned does not match the call',
	'a renewal returned does not match the call',
	'trigger: not refused as its setup or the row calls for',
	'trigger: a good row refused as a bad argument',
	"an ordinary role changed a setting of a superuser's",
	'a connection was lost');

# --- Helpers ---------------------------------------------------------------------

# The order of two integers given as decimal strings (of any length)
sub cmp_int
{
	my ($a, $b) = @_;
	my ($sa, $sb) = ($a =~ /^-/ ? -1 : 1, $b =~ /^-/ ? -1 : 1);
	(my $ma = $a) =~ s/^[-+]?0*//;
	(my $mb = $b) =~ s/^[-+]?0*//;
	$sa = 1 if $ma eq '';
	$sb = 1 if $mb eq '';
	return $sa <=> $sb if $sa != $sb;
	my $r = length($ma) <=> length($mb) || $ma cmp $mb;
	return $sa * $r;
}

# A value, or what a sub returns when it is one (things fetched only when
# they are needed)
sub force { my ($x) = @_; return ref $x eq 'CODE' ? $x->() : $x; }

# The literal info of a call's argument $i
sub lit_of
{
	my ($r, $i) = @_;
	return ref $r->{lits} eq 'CODE' ? $r->{lits}->($i) : $r->{lits}[$i];
}

# Is this a lost connection (the SQLSTATE, or the message of a client
# that has none)?
sub lost
{
	my ($state, $msg) = @_;
	return $state =~ $LOST
	  || $msg =~ /server closed the connection|no connection to the server|terminating connection/;
}

# Is this UTF-8 as PostgreSQL judges it (pg_utf8_islegal)?  Returns the code
# points, or undef.
sub utf8_code_points
{
	my ($b) = @_;
	my @cp;
	my $i = 0;
	my $n = length($b);
	while ($i < $n)
	{
		my $c0 = ord(substr($b, $i, 1));
		my ($len, $cp);
		if ($c0 < 0x80) { push @cp, $c0; $i++; next }
		elsif ($c0 >= 0xc2 && $c0 <= 0xdf) { $len = 2; $cp = $c0 & 0x1f }
		elsif ($c0 >= 0xe0 && $c0 <= 0xef) { $len = 3; $cp = $c0 & 0x0f }
		elsif ($c0 >= 0xf0 && $c0 <= 0xf4) { $len = 4; $cp = $c0 & 0x07 }
		else { return undef }
		return undef if $i + $len > $n;
		for my $j (1 .. $len - 1)
		{
			my $cj = ord(substr($b, $i + $j, 1));
			return undef if $cj < 0x80 || $cj > 0xbf;
			if ($j == 1)
			{
				return undef if $c0 == 0xe0 && $cj < 0xa0;
				return undef if $c0 == 0xed && $cj > 0x9f;
				return undef if $c0 == 0xf0 && $cj < 0x90;
				return undef if $c0 == 0xf4 && $cj > 0x8f;
			}
			$cp = ($cp << 6) | ($cj & 0x3f);
		}
		push @cp, $cp;
		$i += $len;
	}
	return \@cp;
}

# Printable form of a value, for reports
sub show_value
{
	my ($v) = @_;
	return 'NULL' unless defined $v;
	my $s = $v;
	$s = substr($s, 0, 60) . sprintf('...(%d bytes)', length($v)) if length($s) > 80;
	$s =~ s/([^\x20-\x7e])/sprintf('\\x%02x', ord($1))/ge;
	return "'$s'";
}

# How to run a call again by hand
sub repro
{
	my ($c, $sql, $args, $context) = @_;
	my $printable = !grep { defined $_ && /[^\x20-\x7e]/ } @$args;
	my $s = sprintf("database %s (%s), connected as %s%s, client_encoding %s, settings %s%s\n",
		$c->{d}{db}, $c->{d}{enc}, $c->{user},
		$c->{set_role} ? ", SET ROLE $c->{set_role}" : '', $c->{cenc},
		join(', ', map { "$_=$c->{settings}{$_}" } sort keys %{ $c->{settings} }),
		$context ? ", $context" : '');
	if ($printable)
	{
		my $i = 0;
		(my $lit = $sql) =~ s/\$(\d+)/
		  my $v = $args->[$1 - 1];
		  defined $v ? do { (my $q = $v) =~ s!'!''!g; "'$q'" } : 'NULL'/ge;
		$s .= "  psql: $lit";
	}
	else
	{
		$s .= sprintf("  prepared: %s\n  with: (%s)", $sql, join(', ', map { show_value($_) } @$args));
	}
	return $s;
}

# --- Arguments -----------------------------------------------------------------------

# What an argument of kind $kind calls for: 'ok', an SQLSTATE, or 'unknown'.
# $lit: its literal info; $c: the connection (its max_ttl).
sub argument
{
	my ($c, $kind, $lit, $server_version) = @_;
	return 'ok' if $kind eq 'prev_handle' || $kind eq 'since';
	# a handoff to the first candidate, no value, no hold: NULL is an answer
	return 'ok' if ($kind eq 'to_owner' || $kind eq 'value' || $kind eq 'min_hold') && $lit->{null};
	return '22004' if $lit->{null};
	if ($kind eq 'name' || $kind eq 'owner' || $kind eq 'to_owner' || $kind eq 'value')
	{
		return '22023' if $lit->{bytes} == 0 || $lit->{bytes} > 256;
		my $utf8 = $lit->{utf8};
		if (!defined $utf8)
		{
			# SQL_ASCII: not UTF-8; elsewhere: no Unicode for it
			return '22023' if $lit->{utf8_error} eq '22021';
			return '22P05' if $lit->{utf8_error} eq '22P05';
			return 'unknown';
		}
		my $cps = utf8_code_points($utf8);
		return '22023' unless $cps;
		return '22023' if grep { $_ < 0x20 || $_ == 0x7f || ($_ >= 0x80 && $_ <= 0x9f) } @$cps;
		return 'ok';
	}
	if ($kind eq 'ttl' || $kind eq 'timeout' || $kind eq 'min_hold')
	{
		# (extract gives a double before PostgreSQL 14: not exact enough)
		return 'unknown' if $server_version < 140000;
		# (an infinite interval, from PostgreSQL 17 on, has no fields)
		my $us = $lit->{usecs};
		return 'unknown' unless defined $us && $us =~ /^-?\d+$/ && defined $lit->{months} && $lit->{months} =~ /^-?\d+$/;
		return '22023' if $lit->{months} != 0;
		if ($kind eq 'ttl')
		{
			my $max = $c->{settings}{max_ttl} * 1_000_000;
			# exact comparisons of integers that may not fit a double
			return '22023' if cmp_int($us, $max) > 0 || cmp_int($us, 0) <= 0;
		}
		elsif ($kind eq 'min_hold')
		{
			return '22023' if cmp_int($us, 0) <= 0;
		}
		else
		{
			return '22023' if cmp_int($us, 0) < 0;
		}
		return 'ok';
	}
	if ($kind eq 'gen')
	{
		return '22023' if cmp_int($lit->{value}, 0) <= 0;
		return 'ok';
	}
	if ($kind eq 'slots')
	{
		return '22023' if cmp_int($lit->{value}, 1) < 0 || cmp_int($lit->{value}, 1000) > 0;
		return 'ok';
	}
	return 'ok';    # bool, handle
}

# Does $msg say that the lease has another number of slots than the call
# gives (slots => N, or 1 without it)?
sub slots_disagree
{
	my ($kinds, $r, $msg) = @_;
	return 0 unless $msg =~ /lease ".*" has (\d+) slots?, not (\d+)/s;
	my ($has, $given) = ($1, $2);
	my ($at) = grep { $kinds->[$_] eq 'slots' } 0 .. $#$kinds;
	my $want = defined $at ? lit_of($r, $at)->{value} : 1;
	return defined $want && $given eq $want && $has ne $given;
}

# --- One call ---------------------------------------------------------------------------

# Judge a call of a function of @FUNCS (see the head).  Returns { class:
# argument (a literal PostgreSQL refused), output (a result the client's
# encoding cannot show) or hoplock; arguments: good, bad or undecided
# (undef when a literal was refused); problems: [ [ kind, text ] ] }.
sub call
{
	my ($r) = @_;
	my ($c, $args, $state, $rows, $msg, $context) = @$r{qw(c args state rows msg context)};
	my ($fn, $sql, $kinds, $returns, undef, $privileged) = @{ $r->{f} };
	my @problems;
	my $out = { class => 'hoplock', problems => \@problems };

	# arguments PostgreSQL cannot take in, in the order it reads them
	my $parse_state = '';
	for my $i (0 .. $#$kinds)
	{
		my $lit = lit_of($r, $i);
		if ($lit->{state} ne '') { $parse_state = $lit->{state}; last }
	}
	# a result (or message) the client's encoding cannot show
	if ($state eq '22P05' && $c->{output_may_fail})
	{
		$out->{class} = 'output';
		return $out;
	}
	if ($parse_state ne '')
	{
		if ($state ne $parse_state)
		{
			push @problems, [ 'an argument PostgreSQL refuses, but the call did otherwise',
				"$fn: expected $parse_state (the literal alone), got " . ($state || 'success')
				  . " $msg\n" . repro($c, $sql, $args, $context) ];
		}
		elsif (!$PARSE{$state})
		{
			push @problems, [ 'unexpected SQLSTATE', "$fn: $state $msg\n" . repro($c, $sql, $args, $context) ];
		}
		$out->{class} = 'argument';
		return $out;
	}

	# then the function's own checks
	my @bad;
	my $unknown = 0;
	for my $i (0 .. $#$kinds)
	{
		my $j = argument($c, $kinds->[$i], lit_of($r, $i), $r->{server_version});
		if ($j eq 'unknown') { $unknown = 1 }
		elsif ($j ne 'ok') { push @bad, "$kinds->[$i]:$j" }
	}
	# a min_hold longer than the ttl it comes with, the others good
	my %at = map { $kinds->[$_] => $_ } 0 .. $#$kinds;
	if (!$unknown && !@bad && exists $at{min_hold} && defined $args->[ $at{min_hold} ])
	{
		my ($hold, $ttl) = map { lit_of($r, $at{$_})->{usecs} } qw(min_hold ttl);
		push @bad, 'min_hold:22023' if cmp_int($hold, $ttl) > 0;
	}
	# a name too long for a lease with slots (more than 251 bytes)
	if (!$unknown && !@bad && exists $at{slots} && exists $at{name})
	{
		push @bad, 'name:22023'
		  if cmp_int(lit_of($r, $at{slots})->{value}, 1) > 0 && lit_of($r, $at{name})->{bytes} > 251;
	}
	$out->{arguments} = $unknown ? 'undecided' : @bad ? 'bad' : 'good';
	my $may_execute = !$privileged || $c->{su}
	  || ($c->{role} eq 'fuzz_other' && !$c->{set_role} && $c->{d}{db} eq 'fz_utf8');

	if ($state ne '' && !$CONTRACT{$state})
	{
		push @problems, [ 'unexpected SQLSTATE', "$fn: $state $msg\n" . repro($c, $sql, $args, $context) ];
	}
	elsif (!$may_execute)
	{
		push @problems, [ 'a function the role may not execute ran, or failed otherwise',
			"$fn: expected 42501, got " . ($state || 'success') . " $msg\n" . repro($c, $sql, $args, $context) ]
		  if $state ne '42501';
	}
	elsif (!$unknown && @bad)
	{
		my %want = map { (split /:/)[1] => 1 } @bad;
		push @problems, [ 'a bad argument not refused as the contract says',
			"$fn: bad " . join(', ', @bad) . '; got ' . ($state || 'success') . " $msg\n"
			  . repro($c, $sql, $args, $context) ]
		  unless $want{$state};
	}
	elsif (!$unknown && $state eq '22023' && slots_disagree($kinds, $r, $msg))
	{
		# the name has another number of slots than the call gives: the
		# lease's state, not the arguments (a message that names the
		# call's number, and another)
	}
	elsif (!$unknown && ($state eq '22004' || $state eq '22023'))
	{
		push @problems, [ 'good arguments refused', "$fn: $state $msg\n" . repro($c, $sql, $args, $context) ];
	}

	if ($state eq '' && $returns eq 'lease' && @$rows && defined $rows->[0][2])
	{
		my ($name, $owner, $gen) = @{ $rows->[0] };
		my %given = map { $kinds->[$_] => $args->[$_] } 0 .. $#$kinds;
		push @problems, [ 'a lease returned does not match the call',
			"$fn: returned " . join(', ', map { show_value($_) } @{ $rows->[0] }) . "\n"
			  . repro($c, $sql, $args, $context) ]
		  unless $name eq $given{name}
		  && (!exists $given{owner} || $fn eq 'read' || $fn eq 'holder' || $owner eq $given{owner}
			  || ($fn eq 'handoff' && (!defined $given{to_owner} || $owner eq $given{to_owner})))
		  && $gen > 0;
	}
	# hoplock_renew_all: each term once (an owner holds one slot of a
	# name), its slot NULL or a slot number, with a generation
	if ($state eq '' && $returns eq 'renewed')
	{
		my %seen;
		my @wrong = grep {
			!defined $_->[0] || $seen{ $_->[0] }++ || (defined $_->[1] && $_->[1] !~ /^[1-9][0-9]*$/)
			  || !defined $_->[2] || $_->[2] !~ /^\d+$/ || $_->[2] <= 0
		} @$rows;
		push @problems, [ 'a renewal returned does not match the call',
			"$fn: returned " . join(', ', map { show_value($_) } @{ $wrong[0] }) . "\n"
			  . repro($c, $sql, $args, $context) ]
		  if @wrong;
	}
	return $out;
}

# Compare two digests of hoplock's tables (fz_digest: [ rows, row counts
# and floor and branches, counters, expiries, rows blind to announcements
# of expiries ]) around a failing call.  $strict: in the same snapshot;
# $counters_too: the counters must not move either.  Returns undef when
# nothing changed, 'announced' when only what the expiry worker changes
# when it announces an expiry did (outside one snapshot), else the list of
# what changed.
sub digests
{
	my ($before, $after, $strict, $counters_too) = @_;
	return undef unless $before && $after;
	my $tables_differ = $before->[0] ne $after->[0] || $before->[1] ne $after->[1];
	my $counters_differ = $counters_too && ($before->[2] // '') ne ($after->[2] // '');
	return undef unless $tables_differ || $counters_differ;
	return 'announced'
	  if !$strict && !$counters_differ && $before->[1] eq $after->[1] && $before->[4] eq $after->[4];
	my @what;
	push @what, 'the rows compared' if $before->[0] ne $after->[0];
	push @what, "the row counts or the floor ($before->[1] -> $after->[1])" if $before->[1] ne $after->[1];
	push @what, 'the counters (terms begun, contended, renewals, releases, force-releases, waits, wake-ups: '
	  . ($before->[2] // '-') . ' -> ' . ($after->[2] // '-') . ')' if $counters_differ;
	return \@what;
}

# The problem of a failing call that changed something (digests' list)
sub changed
{
	my ($what, $c, $fn, $state, $sql, $args, $context) = @_;
	return [ 'a failing call changed something',
		sprintf("%s: %s; changed: %s\n%s", $fn, $state, join('; ', @$what), repro($c, $sql, $args, $context)) ];
}

# The end of a transaction block ($what: COMMIT, ROLLBACK, PREPARE
# TRANSACTION): its problems
sub transaction_end
{
	my ($what, $state, $msg, $context) = @_;
	return () if $state eq '' || $CONTRACT{$state};
	return [ 'unexpected SQLSTATE', "$what: $state $msg ($context)" ];
}

# --- The trigger ------------------------------------------------------------------------

# CREATE TRIGGER ... hoplock_fenced(...): only the literals may be refused,
# as PostgreSQL takes them in
sub create_trigger
{
	my ($state, $msg, $ddl) = @_;
	return () if $state eq '' || $PARSE{$state};
	return [ 'unexpected SQLSTATE', "CREATE TRIGGER: $state $msg\n  $ddl" ];
}

# What an INSERT through a trigger $t ({ args, shape }) calls for, given
# the row (column => value): '' (success), an SQLSTATE, 'state' (it depends
# on the lease: 55P03 or success), or undef (cannot tell).  $name_verdict:
# argument()'s verdict on the trigger's lease name, or a sub that gives it.
sub trigger_expectation
{
	my ($t, $value_of, $name_verdict) = @_;
	return undef unless $t;
	return '' if $t->{shape} eq 'before truncate';    # does not fire
	return '39P01' if $t->{shape} eq 'before statement';
	# a trigger that does not fire before the row is written: refused first
	return '39P01' if $t->{shape} eq 'after row' || $t->{shape} eq 'instead of row';
	return '22023' if @{ $t->{args} } != 2;
	my ($name, $column) = @{ $t->{args} };
	my $type = $COLUMN_TYPE{$column};
	return '42703' unless $type;
	return '42804' unless $type eq 'int';
	# the lease name, judged as the server has it (through the same client
	# encoding the trigger was created with)
	my $j = force($name_verdict);
	return undef if $j eq 'unknown';
	return $j if $j ne 'ok';
	my $v = $value_of->{$column};
	return undef if $column eq 'id';
	return '22004' unless defined $v;
	return '55P03' if cmp_int($v, 0) <= 0;
	return 'state';
}

# Judge a statement through a trigger (Hoplock::Fuzz::Generator's
# trigger_statement $s, run on $r->{c}: state, msg, lits, context, and
# name_verdict as trigger_expectation takes it).  Returns { class,
# problems } as call() does.
sub trigger_call
{
	my ($s, $r) = @_;
	my ($c, $state, $msg, $context) = @$r{qw(c state msg context)};
	my ($t, $op, $sql, $args) = @$s{qw(t op sql args)};
	my @problems;
	my $parse_state = '';
	for my $i (0 .. $#$args)
	{
		my $lit = lit_of($r, $i);
		if ($lit->{state} ne '') { $parse_state = $lit->{state}; last }
	}
	my $class = 'hoplock';
	if ($state eq '22P05' && $c->{output_may_fail})
	{
		$class = 'output';
	}
	elsif ($parse_state ne '')
	{
		$class = 'argument';
		push @problems, [ 'an argument PostgreSQL refuses, but the call did otherwise',
			"trigger $op: expected $parse_state, got " . ($state || 'success') . " $msg\n"
			  . repro($c, $sql, $args, $context) ]
		  if $state ne $parse_state;
	}
	elsif ($state ne '' && !$CONTRACT{$state} && !$TRIGGER_SETUP{$state})
	{
		push @problems, [ 'unexpected SQLSTATE', "trigger $op: $state $msg\n" . repro($c, $sql, $args, $context) ];
	}
	elsif ($op =~ /^insert/)
	{
		# an insert into the view reaches the table's trigger too, unless
		# the view has its own (INSTEAD OF)
		my $want = !$t ? ''
		  : $t->{shape} eq 'instead of row' && $op ne 'insert view' ? ''
		  : trigger_expectation($t, $s->{row}, $r->{name_verdict});
		$want = '25006' if $c->{settings}{read_only} eq 'on';
		if (defined $want)
		{
			if ($want eq 'state')
			{
				push @problems, [ 'trigger: a good row refused as a bad argument',
					"trigger $op: $state $msg\n" . repro($c, $sql, $args, $context) ]
				  if $state eq '22004' || $state eq '22023' || $TRIGGER_SETUP{$state};
			}
			elsif ($state ne $want)
			{
				push @problems, [ 'trigger: not refused as its setup or the row calls for',
					"trigger $op: expected " . ($want || 'success') . ', got ' . ($state || 'success')
					  . " $msg\n" . repro($c, $sql, $args, $context) ];
			}
		}
	}
	return { class => $class, problems => \@problems };
}

# TRUNCATE of a table whose trigger is $t: a BEFORE TRUNCATE trigger
# refuses it (0A000), nothing else does
sub truncate
{
	my ($t, $table, $state, $msg) = @_;
	return () unless $t;
	my $want = $t->{shape} eq 'before truncate' ? '0A000' : '';
	return () if $state eq $want;
	return [ 'trigger: not refused as its setup or the row calls for', "TRUNCATE $table: expected "
		  . ($want || 'success') . ", got " . ($state || 'success') . " $msg ($t->{ddl})" ];
}

# --- Settings ---------------------------------------------------------------------------

# SET $s on connection $c: only the settings' own SQLSTATEs, and an
# ordinary role changes no setting of a superuser's (notify_renewals is
# its own to change)
sub setting
{
	my ($c, $s, $state, $msg) = @_;
	my @problems;
	push @problems, [ 'unexpected SQLSTATE', "SET $s: $state $msg (as $c->{user})" ]
	  if $state ne '' && !$SETTING{$state};
	push @problems, [ 'an ordinary role changed a setting of a superuser\'s', "SET $s (as $c->{user})" ]
	  if $state eq '' && !$c->{su} && $s !~ /notify_renewals/;
	return @problems;
}

# --- The server's log -------------------------------------------------------------------

# The lines of the server's log that tell of a crash, a WARNING, or an
# error outside the clients' sessions
sub bad_log_lines
{
	my ($log) = @_;
	return grep {
		/TRAP:|PANIC:|terminated by signal|was terminated|exited with exit code|segmentation fault|WARNING:|server process .* exited/i
		  || (/ERROR:|FATAL:/ && !/ client backend /)
	} split /\n/, $log;
}

# --- Problems, counted --------------------------------------------------------------------

# A tally of problems: { problems => { "kind (count)" => n }, signatures =>
# { kind => { signature => { n, examples, fns } } } }.  A problem's
# signature is what tells it from others of its kind: the first few
# examples of each are kept.
sub new_tally { return { problems => {}, signatures => {} }; }

sub add_problem
{
	my ($tally, $kind, $text) = @_;
	# the first line, without the function and the values in it, and the
	# database
	my ($first, $second) = split /\n/, $text;
	my $fn = $first =~ s/^((?:trigger )?[\w ]+?): // ? $1 : '';
	my $state = $first =~ s/^(\w{5})(?=[\s;])// ? $1 : '';
	$first =~ s/"[^"]*"/"..."/g;
	$first =~ s/0x[0-9a-f]+/0x../gi;
	$first =~ s/-?\d+/N/g;
	$first = $state . $first;
	my ($db) = ($second // '') =~ /^database (\S+)/;
	my $signature = $db ? "$first [$db]" : $first;
	$tally->{problems}{"$kind (count)"}++;
	my $sig = $tally->{signatures}{$kind}{$signature} //= { n => 0, examples => [], fns => {} };
	$sig->{n}++;
	$sig->{fns}{$fn}++ if $fn ne '';
	push @{ $sig->{examples} }, $text if @{ $sig->{examples} } < 2;
	return;
}

# Add a tally (of another process) to $tally
sub merge_tally
{
	my ($tally, $from) = @_;
	$tally->{problems}{$_} += $from->{problems}{$_} for keys %{ $from->{problems} };
	for my $kind (keys %{ $from->{signatures} })
	{
		for my $sig (keys %{ $from->{signatures}{$kind} })
		{
			my $f = $from->{signatures}{$kind}{$sig};
			my $to = $tally->{signatures}{$kind}{$sig} //= { n => 0, examples => [], fns => {} };
			$to->{n} += $f->{n};
			push @{ $to->{examples} }, @{ $f->{examples} };
			splice(@{ $to->{examples} }, 2) if @{ $to->{examples} } > 2;
			$to->{fns}{$_} += $f->{fns}{$_} for keys %{ $f->{fns} };
		}
	}
}

# The problems of a kind, most frequent signature first, with examples
sub report
{
	my ($tally, $kind) = @_;
	my $sigs = $tally->{signatures}{$kind} // {};
	my @lines;
	for my $s (sort { $sigs->{$b}{n} <=> $sigs->{$a}{n} } keys %$sigs)
	{
		push @lines, "$sigs->{$s}{n} x $s" . (%{ $sigs->{$s}{fns} } ? ' (' . join(', ', sort keys %{ $sigs->{$s}{fns} }) . ')' : ''),
		  map { s/^/    /mgr } @{ $sigs->{$s}{examples} };
	}
	return join("\n", @lines);
}

1;
