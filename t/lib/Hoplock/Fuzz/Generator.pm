# Hoplock::Fuzz::Generator: the values and calls of the fuzz run of
# t/018_fuzz.pl -- names, owners, intervals, generations, handles, booleans
# and event numbers, good ones and hostile ones, in the encoding of the
# client that sends them; the functions called and the share of each; the
# trigger set-ups and the rows written through them.
#
# It talks to no server: a "connection" here is the hash Hoplock::Fuzz
# keeps for each (its client encoding cenc, settings, its pool of names,
# its database's cache of leases d->{cache} and last event number
# d->{last_seq}).  Every choice is made with perl's rand(), so that one
# seed (srand) makes the same calls, in the same order.
package Hoplock::Fuzz::Generator;

use strict;
use warnings;
use Encode ();
use Exporter 'import';
use Hoplock::Fuzz::Judge qw(cmp_int);

our @EXPORT_OK = qw(pick chance gen_name gen_generation gen_args pick_function pick_db
  make_pool trigger_setup trigger_statement %TYPE_OF @FUNCS $N_TABLES);

# the tables (fz_w1 .. fz_wN, and their views) the trigger is put on
our $N_TABLES = 4;

# --- Values ---------------------------------------------------------------------
# A random element of the list; true with probability $_[0]
sub pick { return $_[ int(rand(@_)) ] }
sub chance { return rand() < $_[0] }

# Pieces of names, as bytes in the client's encoding
my @UTF8_PRINTABLE = map { Encode::encode('UTF-8', chr($_)) }
  (0xe9, 0xdf, 0x65e5, 0x672c, 0x1f600, 0x2028, 0xfeff, 0x202e, 0xffff, 0x10ffff, 0xa0, 0x301, 0x20ac, 0x400);
my @UTF8_C1 = map { "\xc2" . chr($_) } 0x80 .. 0x9f;
my @UTF8_INVALID = ("\x80", "\xbf", "\xc0\xaf", "\xc1\x81", "\xe0\x80\x80", "\xed\xa0\x80",
	"\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xfe", "\xff", "\xe6\x97", "\xc3");
my @C0 = ((map { chr($_) } 1 .. 0x1f), "\x7f");

sub alphabet
{
	my ($cenc) = @_;
	my @ascii = (('a' .. 'z'), ('A' .. 'Z'), (0 .. 9), '-', '_', '.', ':', '/', "'", '"', '\\', '%',
		'{', '}', '[', ']', ' ', '$', '@', '#', ',', ';');
	my %a = (ascii => \@ascii, c0 => \@C0, printable => [], c1 => [], invalid => []);
	if ($cenc eq 'UTF8' || $cenc eq 'SQL_ASCII')
	{
		$a{printable} = [@UTF8_PRINTABLE];
		$a{c1} = [@UTF8_C1];
		$a{invalid} = [@UTF8_INVALID];
		# a SQL_ASCII client can also send bytes that are no character at all
		push @{ $a{c1} }, map { chr($_) } 0x80 .. 0x9f if $cenc eq 'SQL_ASCII';
	}
	elsif ($cenc eq 'LATIN1')
	{
		$a{printable} = [ map { chr($_) } 0xa0 .. 0xff ];
		$a{c1} = [ map { chr($_) } 0x80 .. 0x9f ];
	}
	elsif ($cenc eq 'WIN1252')
	{
		# 0x80-0x9f are characters there (the euro sign, ...), five of them
		# map to nothing in Unicode
		$a{printable} = [ map { chr($_) } 0x80, 0x85, 0x8a, 0x99, 0x9f, 0xa0 .. 0xff ];
		$a{invalid} = [ map { chr($_) } 0x81, 0x8d, 0x8f, 0x90, 0x9d ];
	}
	else
	{
		# MULE_INTERNAL: ASCII, and bytes that are not a character
		$a{invalid} = [ map { chr($_) } 0x80, 0x81, 0x9f, 0xff ];
	}
	return \%a;
}

sub random_string
{
	my ($c, $pieces, $bad) = @_;
	my $a = $c->{alphabet} //= alphabet($c->{cenc});
	my $s = '';
	for (1 .. $pieces)
	{
		my $kind = 'ascii';
		if (chance($bad))
		{
			$kind = pick('c0', 'c1', 'invalid');
		}
		elsif (chance(0.3))
		{
			$kind = 'printable';
		}
		$kind = 'ascii' unless @{ $a->{$kind} };
		$s .= pick(@{ $a->{$kind} });
	}
	return $s;
}

# Names in the client's encoding that are good ones (most of them)
sub make_pool
{
	my ($c) = @_;
	my @pool = map { "fz-$_" } ('a' .. 'x');
	my $a = alphabet($c->{cenc});
	if (@{ $a->{printable} })
	{
		for my $i (1 .. 8)
		{
			push @pool, 'x' . join('', map { $a->{printable}[ ($i * 7 + $_) % @{ $a->{printable} } ] } 1 .. $i);
		}
		push @pool, $a->{printable}[0] x 128;    # 256 bytes in UTF-8, LATIN1 x 2 on a UTF8 server
	}
	push @pool, 'n' x 256, 'n' x 255, 'k';
	return \@pool;
}

sub gen_name
{
	my ($c, $good_share) = @_;
	$good_share //= 0.6;
	return pick(@{ $c->{pool} }) if chance($good_share);
	my $r = rand();
	return undef if $r < 0.06;
	return '' if $r < 0.12;
	if ($r < 0.35)
	{
		my $len = pick(1, 2, 254, 255, 256, 257, 258, 300, 1000, 10000);
		return substr(('fz-len-' . ('n' x $len)), 0, $len);
	}
	if ($r < 0.45)
	{
		# a two-byte character across the 256-byte edge
		my $a = $c->{alphabet} //= alphabet($c->{cenc});
		my $mb = @{ $a->{printable} } ? $a->{printable}[0] : 'e';
		return ('m' x pick(253, 254, 255)) . $mb if chance(0.5);
		return $mb x pick(127, 128, 129, 200, 256, 257);
	}
	if ($r < 0.55)
	{
		return pick(' ', '  x  ', "'", '"', '\\', '%s%n%x', '{"a":1}', '</script>', 'NULL', 'null',
			'0', '-1', '1:2', 'x:y', "a'b", 'a\\"b', "\\u0000", 'fz-a ');
	}
	return random_string($c, 1 + int(rand(pick(4, 20, 60))), pick(0, 0.05, 0.3));
}

sub gen_owner
{
	my ($c) = @_;
	return pick(@{ $c->{owners} }) if chance(0.75);
	return gen_name($c, 0);
}

my @TTL_EDGES = (
	'1 h', '15 s', '1 s', '0.5 s', '1 us', '1 microsecond', '00:00:01', '1 day', '24:00:00',
	'86400 s', '86399.999999 s', '86400.000001 s', '10', '1.5', 'PT15S', 'P1D', '@ 2 mins',
	'1 day -1 s', '1 min -59 s', '2 h -1 h', '0', '0 s', '-1 s', '-0', '1 mon', '1 year',
	'1 mon -30 days', '-1 mon 31 days', '1 year -12 mons', '25 h', '2 days', '100000000 hours',
	'2562047788 hours', '2562047789 hours', '178956970 years', '1000000000 years', '2147483647 days',
	'-2147483648 days', '2147483647 days -2562047788 hours', '-2147483648 days 2562047788 hours',
	'9223372036854775807 us', '-9223372036854775808 us', 'infinity', '-infinity', 'nan', '',
	'garbage', '1 fortnight', '1e308 s', '0.0000001 s', '00:00:00.0000005', '1 week',
	'@ 1 hour ago', '68 years', '24855 days', '2147483647 s', '2147483648 s', undef);
my @UNITS = ('us', 'ms', 's', 'min', 'h', 'd', 'mon', 'y');

sub gen_ttl
{
	my ($c) = @_;
	my $r = rand();
	return pick('1 h', '30 s', '5 min', '2 s', '100 ms', '1 ms') if $r < 0.35;
	return pick(@TTL_EDGES) if $r < 0.75;
	if ($r < 0.85)
	{
		# at the session's max_ttl, and a microsecond either side
		my $max = $c->{settings}{max_ttl} // 86400;
		return pick("$max s", sprintf('%d.999999 s', $max - 1), "$max.000001 s",
			sprintf('%d us', $max * 1_000_000 + pick(-1, 0, 1)));
	}
	my $n = int(rand(pick(10, 1000, 1_000_000, 4_000_000_000))) * (chance(0.15) ? -1 : 1);
	my $s = "$n " . pick(@UNITS);
	$s .= ' ' . int(rand(1000)) * (chance(0.5) ? -1 : 1) . ' ' . pick(@UNITS) if chance(0.3);
	return $s;
}

sub gen_timeout
{
	return pick('0', '1 us', '1 ms', '2 ms', '0 s', '1 ms', '0', '1 us') if chance(0.7);
	return pick('-1 us', '-1 s', '1 mon', '1 year -12 mons', '20 ms', '1000 h', '2147483647 days',
		undef, 'garbage', '@ 1 ms ago', '-0', '1 day -86400 s', '00:00:00.003');
}

sub gen_generation
{
	my ($c, $name) = @_;
	my $known = defined $name ? $c->{d}{cache}{$name} : undef;
	if ($known && chance(0.6))
	{
		my $g = $known->{gen};
		# c << 11 | tag: +-1 is the same microsecond on another branch,
		# +-2048 the next or previous microsecond on the same branch
		return chance(0.7) ? "$g" : $g + pick(-1, 1, -2048, 2048, -(2**40), 2**40);
	}
	# 1.1's generations (era * 2^40 + n), the legacy limit 2^58 and 2^60
	# (below every 1.2 value), and the edges of bigint
	return pick('0', '-1', '1', '2', '3', '9223372036854775807', '-9223372036854775808',
		'9223372036854775808', '-9223372036854775809', '1099511627776', '1099511627777',
		'288230376151711743', '288230376151711744', '1152921504606846976', 'x', '',
		' 7 ', '1.0', '0x10', '1e3', '+5', '00012', undef, '4294967296', '2147483648', '32768');
}

sub gen_handle
{
	my ($c, $name) = @_;
	my $cache = $c->{d}{cache};
	my $known = defined $name ? $cache->{$name} : undef;
	my $r = rand();
	return $known->{handle} if $known && $r < 0.45;
	if ($known && $r < 0.55)
	{
		my $h = $known->{handle};
		substr($h, -1, 1, substr($h, -1, 1) eq '1' ? '2' : '1');
		return $h;
	}
	if ($known && $r < 0.6 && $known->{handle} =~ /^h2:(\d+):(\d+)$/)
	{
		# the version of the term a step away: another branch's (+-1),
		# the row's previous or next change (+-2048)
		return 'h2:' . ($1 + pick(-1, 1, -2048, 2048)) . ":$2";
	}
	if ($r < 0.65 && %$cache)
	{
		my @names = keys %$cache;
		return $cache->{ pick(@names) }{handle};
	}
	# 1.1's handles (epoch:xid) and 1.2's shape (h2:version:generation),
	# broken
	return pick('', undef, '1:2', 'x:y', '0:0', '-1:-1', '1:', ':', '.', '99999999999999999999:1',
		'1:99999999999999999999', '18446744073709551616:1', 'A' x 10000, random_string($c, 12, 0.2),
		'1:2:3', ' 1:2', "1:2\n", 'h2:', 'h2:1:1', 'h2:x:y', 'h2:-1:-1', 'h2::', 'H2:1:1',
		'h2:9223372036854775808:1', 'h2:1:9223372036854775808', 'h2:1:2:3', 'h3:1:1');
}

sub gen_bool
{
	return pick('true', 'false') if chance(0.8);
	return pick('t', 'f', 'on', 'off', 'yes', 'no', '1', '0', undef, 'maybe', '2', '');
}

# a candidate's priority: small ones mostly, the extremes, and bad literals
sub gen_priority
{
	return int(rand(11)) - 5 if chance(0.8);
	return pick('2147483647', '-2147483648', '2147483648', undef, 'x', '1.5', '');
}

sub gen_slots
{
	return 1 + int(rand(4)) if chance(0.8);
	return pick('0', '-1', '1000', '1001', '2147483647', '2147483648', undef, 'x', '');
}

# A call with slots => N, N > 1, on a good name: the name of N's own
# (fz-slots-N), now and then at the length edge of a name with slots
# (251 bytes)
sub gen_slots_name
{
	my ($kinds, $args) = @_;
	my %at = map { $kinds->[$_] => $_ } 0 .. $#$kinds;
	return unless exists $at{slots} && exists $at{name};
	my $n = $args->[ $at{slots} ];
	return unless defined $n && $n =~ /^\d+$/ && $n > 1 && $n <= 1000;
	my $name = "fz-slots-$n";
	$name .= '-' . ('n' x (pick(250, 251, 252, 256) - length($name) - 1)) if chance(0.15);
	$args->[ $at{name} ] = $name;
}

sub gen_since
{
	my ($c) = @_;
	my $last = $c->{d}{last_seq} // 0;
	return $last - int(rand(5)) if chance(0.7);
	return pick('0', '-1', '9223372036854775807', '-9223372036854775808', undef, 'x', '1e3',
		'9223372036854775808');
}

# --- The functions ------------------------------------------------------------------
# name, SQL, the arguments' kinds in order, what it returns, the weight of
# its share of calls, and whether PUBLIC may not execute it
my $LEASE = 'SELECT l.name, l.owner, l.generation, l.handle FROM %s AS l';
our @FUNCS = (
	[ acquire3 => sprintf($LEASE, 'hoplock_acquire($1::text, $2::text, $3::interval)'),
		[qw(name owner ttl)], 'lease', 14 ],
	[ acquire4 => sprintf($LEASE, 'hoplock_acquire($1::text, $2::text, $3::interval, session_bound => $4::boolean)'),
		[qw(name owner ttl bool)], 'lease', 6 ],
	[ renew3 => sprintf($LEASE, 'hoplock_renew($1::text, $2::text, $3::interval)'),
		[qw(name owner ttl)], 'lease', 8 ],
	[ renew4 => sprintf($LEASE, 'hoplock_renew($1::text, $2::text, $3::interval, $4::bigint)'),
		[qw(name owner ttl gen)], 'lease', 8 ],
	[ release2 => 'SELECT hoplock_release($1::text, $2::text)', [qw(name owner)], 'bool', 6 ],
	[ release3 => 'SELECT hoplock_release($1::text, $2::text, $3::bigint)', [qw(name owner gen)], 'bool', 6 ],
	[ fence => 'SELECT hoplock_fence($1::text, $2::bigint)', [qw(name gen)], 'void', 6 ],
	[ wait4 => sprintf($LEASE, 'hoplock_wait($1::text, $2::text, $3::interval, $4::interval)'),
		[qw(name owner ttl timeout)], 'lease', 3 ],
	[ wait5 => sprintf($LEASE, 'hoplock_wait($1::text, $2::text, $3::interval, $4::interval, session_bound => $5::boolean)'),
		[qw(name owner ttl timeout bool)], 'lease', 1 ],
	[ wait_candidate => sprintf($LEASE, 'hoplock_wait($1::text, $2::text, $3::interval, $4::interval, priority => $5::integer, value => $6::text, preempt => $7::boolean)'),
		[qw(name owner ttl timeout priority value bool)], 'lease', 1.5 ],
	[ acquire_value => sprintf($LEASE, 'hoplock_acquire($1::text, $2::text, $3::interval, value => $4::text)'),
		[qw(name owner ttl value)], 'lease', 2 ],
	[ acquire_hold => sprintf($LEASE, 'hoplock_acquire($1::text, $2::text, $3::interval, min_hold => $4::interval)'),
		[qw(name owner ttl min_hold)], 'lease', 2 ],
	[ wait_hold => sprintf($LEASE, 'hoplock_wait($1::text, $2::text, $3::interval, $4::interval, min_hold => $5::interval)'),
		[qw(name owner ttl timeout min_hold)], 'lease', 0.5 ],
	[ renew_all => 'SELECT r.name, r.slot, r.generation FROM hoplock_renew_all($1::text, $2::interval) AS r',
		[qw(owner ttl)], 'renewed', 3 ],
	# slots => N: a name of its own per N (fz-slots-N), so that no call
	# gives a name another N than its others (a 22023 the judge could not
	# tell from a refused argument); see gen_slots_args
	[ acquire_slots => sprintf($LEASE, 'hoplock_acquire($1::text, $2::text, $3::interval, slots => $4::integer)'),
		[qw(name owner ttl slots)], 'lease', 2 ],
	[ wait_slots => sprintf($LEASE, 'hoplock_wait($1::text, $2::text, $3::interval, $4::interval, slots => $5::integer)'),
		[qw(name owner ttl timeout slots)], 'lease', 0.5 ],
	[ handoff => sprintf($LEASE, 'hoplock_handoff($1::text, $2::text, $3::bigint, $4::text)'),
		[qw(name owner gen to_owner)], 'lease', 3 ],
	[ proclaim => 'SELECT hoplock_proclaim($1::text, $2::text, $3::bigint, $4::text)',
		[qw(name owner gen value)], 'bool', 3 ],
	[ step_down => 'SELECT hoplock_request_step_down($1::text, $2::text)',
		[qw(name to_owner)], 'bool', 1.5, 'privileged' ],
	[ write => sprintf($LEASE, 'hoplock_write($1::text, $2::text, $3::text, $4::interval)'),
		[qw(name prev_handle owner ttl)], 'lease', 6 ],
	[ delete => 'SELECT hoplock_delete($1::text, $2::text)', [qw(name handle)], 'bool', 4 ],
	[ read => sprintf($LEASE, 'hoplock_read($1::text)'), [qw(name)], 'lease', 5 ],
	[ holder => sprintf($LEASE, 'hoplock_holder($1::text)'), [qw(name)], 'lease', 5 ],
	[ force_release => 'SELECT hoplock_force_release($1::text)', [qw(name)], 'bool', 3, 'privileged' ],
	[ forget => 'SELECT hoplock_forget($1::text)', [qw(name)], 'bool', 1.5, 'privileged' ],
	[ events => 'SELECT count(*), max(seq) FROM hoplock_events($1::bigint)', [qw(since)], 'events', 0.6 ],
	[ stats_reset => 'SELECT hoplock_stats_reset()', [], 'void', 0.3, 'privileged' ],
	[ trigger => undef, [], 'trigger', 12 ],
);
our %TYPE_OF = (
	name => 'text', owner => 'text', ttl => 'interval', timeout => 'interval', gen => 'bigint',
	bool => 'boolean', prev_handle => 'text', handle => 'text', since => 'bigint',
	priority => 'integer', value => 'text', to_owner => 'text', min_hold => 'interval',
	slots => 'integer');

sub gen_args
{
	my ($c, $f) = @_;
	my @kinds = @{ $f->[2] };
	my @args;
	my $name;
	for my $k (@kinds)
	{
		my $v;
		if ($k eq 'name') { $v = $name = gen_name($c) }
		elsif ($k eq 'owner') { $v = gen_owner($c) }
		elsif ($k eq 'to_owner' || $k eq 'value') { $v = chance(0.3) ? undef : gen_owner($c) }
		elsif ($k eq 'priority') { $v = gen_priority() }
		elsif ($k eq 'ttl') { $v = gen_ttl($c) }
		elsif ($k eq 'min_hold') { $v = chance(0.2) ? undef : gen_ttl($c) }
		elsif ($k eq 'timeout') { $v = gen_timeout($c) }
		elsif ($k eq 'gen') { $v = gen_generation($c, $name) }
		elsif ($k eq 'bool') { $v = gen_bool() }
		elsif ($k eq 'prev_handle') { $v = chance(0.3) ? undef : gen_handle($c, $name) }
		elsif ($k eq 'handle') { $v = gen_handle($c, $name) }
		elsif ($k eq 'since') { $v = gen_since($c) }
		elsif ($k eq 'slots') { $v = gen_slots() }
		push @args, $v;
	}
	gen_slots_name(\@kinds, \@args);
	# the owner that holds a known lease, now and then
	if (defined $name && $c->{d}{cache}{$name} && chance(0.4))
	{
		for my $i (0 .. $#kinds)
		{
			$args[$i] = $c->{d}{cache}{$name}{owner} if $kinds[$i] eq 'owner';
		}
	}
	return \@args;
}

# A function of @FUNCS, by their weights ($in_block: no trigger, which
# takes a statement of its own)
sub pick_function
{
	my ($c, $in_block) = @_;
	my $total = 0;
	$total += $_->[4] for @FUNCS;
	while (1)
	{
		my $r = rand($total);
		for my $f (@FUNCS)
		{
			$r -= $f->[4];
			next if $r >= 0;
			last if $in_block && $f->[0] eq 'trigger';
			return $f;
		}
	}
}

# A database, by the weights of its share of the calls
sub pick_db
{
	my ($dbs) = @_;
	my $total = 0;
	$total += $_->{weight} for @$dbs;
	my $r = rand($total);
	for my $d (@$dbs)
	{
		$r -= $d->{weight};
		return $d if $r < 0;
	}
	return $dbs->[-1];
}

# --- The trigger ------------------------------------------------------------------------
# the columns the trigger's second argument names: good ones (of each
# type), none, system columns, and names that only look alike
my @COLUMNS = (qw(g8 g8 g8 g4 g2 gn gt id payload), 'nope', 'ctid', 'tableoid', 'xmin', '', 'G8', ' g8');

# A trigger set-up: hoplock_fenced's arguments (mostly a lease name and a
# column, sometimes too few or too many) and the trigger's shape.
sub trigger_setup
{
	my ($c) = @_;
	my @args;
	my $nargs = pick(2, 2, 2, 2, 2, 2, 2, 0, 1, 3);
	my $name = gen_name($c, 0.8);
	$name = 'fz-a' unless defined $name;
	my $column = pick(@COLUMNS);
	@args = ($name, $column, 'extra')[ 0 .. $nargs - 1 ];
	my $shape = pick('before row', 'before row', 'before row', 'before row', 'after row',
		'before statement', 'instead of row', 'before truncate');
	return { args => \@args, shape => $shape };
}

# A statement through the trigger of one of the tables: an INSERT into the
# table or its view, an UPDATE or a DELETE, its row's generation columns
# from one value (a known lease's generation, now and then), each column
# NULL where the value does not fit its type.  Returns the table k, its
# trigger t (as Hoplock::Fuzz made it, or undef), the lease the trigger
# names, the row, op, sql, and the arguments and their types.
sub trigger_statement
{
	my ($c) = @_;
	my $d = $c->{d};
	my $k = 1 + int(rand($N_TABLES));
	my $t = $d->{trigger}[$k];
	my $lease = $t ? $t->{args}[0] : undef;
	my $v = gen_generation($c, $lease);
	$v = $d->{cache}{$lease}{gen} if $lease && $d->{cache}{$lease} && chance(0.3);
	my $fits = sub {
		my ($bits) = @_;
		return undef unless defined $v && $v =~ /^\s*[-+]?\d+\s*$/;
		(my $n = $v) =~ s/\s//g;
		return cmp_int($n, 2**($bits - 1) - 1) <= 0 && cmp_int($n, -(2**($bits - 1))) >= 0 ? $v : undef;
	};
	my %row = (g8 => $v, g4 => $fits->(32), g2 => $fits->(16), gn => $v, gt => $v,
		payload => chance(0.8) ? 'p' : gen_name($c, 0));
	my $op = pick('insert', 'insert', 'insert', 'insert view', 'update', 'delete');
	my ($sql, @args);
	if ($op =~ /^insert/)
	{
		my $target = $op eq 'insert view' ? "fz_v$k" : "fz_w$k";
		$sql = "INSERT INTO $target (g8, g4, g2, gn, gt, payload) "
		  . 'VALUES ($1::bigint, $2::integer, $3::smallint, $4::numeric, $5::text, $6::text)';
		@args = @row{qw(g8 g4 g2 gn gt payload)};
	}
	elsif ($op eq 'update')
	{
		$sql = "UPDATE fz_w$k SET g8 = \$1::bigint, g4 = \$2::integer, g2 = \$3::smallint "
		  . "WHERE id = (SELECT max(id) FROM fz_w$k)";
		@args = @row{qw(g8 g4 g2)};
	}
	else
	{
		$sql = "DELETE FROM fz_w$k WHERE id = (SELECT min(id) FROM fz_w$k)";
	}
	my @types = (qw(bigint integer smallint numeric text text))[ 0 .. $#args ];
	return {
		k => $k, t => $t, lease => $lease, row => \%row, op => $op, sql => $sql,
		args => \@args, types => \@types };
}

1;
