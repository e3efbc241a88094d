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
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DBI;
use Encode ();
use JSON::PP;
use POSIX ();
use Time::HiRes qw(time);

sub from_env { my ($v, $default) = @_; return defined $v && $v =~ /^\d+$/ ? $v : $default }
my $seed = from_env($ENV{HOPLOCK_FUZZ_SEED}, (int(time() * 1000) ^ $$) % 2_147_483_647);
my $target_calls = from_env($ENV{HOPLOCK_FUZZ_CALLS}, 50_000);
my $max_seconds = from_env($ENV{HOPLOCK_FUZZ_SECONDS}, 300);
diag("seed $seed (set HOPLOCK_FUZZ_SEED=$seed to repeat this run)");
srand($seed);

# --- SQLSTATEs ---------------------------------------------------------------
# hoplock's, from the README's Errors table
my %CONTRACT = map { $_ => 1 }
  qw(22004 22023 22P05 25006 42501 55P03 40001 25P01 0A000 53400 55000 23502 23514 XX001 57014 HL001);
# PostgreSQL's, for a literal it cannot take in as the parameter's type (or
# convert from the client's encoding)
my %PARSE = map { $_ => 1 } qw(22P02 22007 22008 22015 22003 22021 22P05);
# the trigger set up wrong (sql/fenced.sql)
my %TRIGGER_SETUP = map { $_ => 1 } qw(42703 42804 39P01);
# SET of a setting
my %SETTING = map { $_ => 1 } qw(22023 42501 55P02 42602 42704);
# a lost connection
my $LOST = qr/^(08|57P0)/;

# --- The server -----------------------------------------------------------------
my $node = PostgreSQL::Test::Cluster->new('fuzz');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'hoplock'
max_prepared_transactions = 10
max_worker_processes = 16
log_statement = none
log_line_prefix = '%m [%p] %b '
log_min_messages = warning
log_min_error_statement = panic
# the worker changes nothing but announcements of expiries meanwhile
hoplock.history_size = 100000000
hoplock.released_retention = 0
});
$node->start;

# Databases: encoding, share of the calls, and the connections to them:
# role (su: the superuser) and client encoding.
my @DBS = (
	{
		db => 'fz_utf8', enc => 'UTF8', weight => 40,
		conns => [
			[ su => 'UTF8' ], [ fuzz_user => 'UTF8' ], [ fuzz_other => 'UTF8' ],
			[ fuzz_lim => 'UTF8' ], [ su => 'LATIN1' ], [ fuzz_user => 'SQL_ASCII' ]
		]
	},
	{
		db => 'fz_latin1', enc => 'LATIN1', weight => 22,
		conns => [ [ su => 'LATIN1' ], [ fuzz_user => 'LATIN1' ], [ fuzz_other => 'UTF8' ] ]
	},
	{
		db => 'fz_ascii', enc => 'SQL_ASCII', weight => 22,
		conns => [ [ su => 'SQL_ASCII' ], [ fuzz_user => 'SQL_ASCII' ], [ fuzz_other => 'UTF8' ] ]
	},
	{
		db => 'fz_win1252', enc => 'WIN1252', weight => 10,
		conns => [ [ su => 'WIN1252' ], [ fuzz_user => 'WIN1252' ] ]
	},
);
my $N_TABLES = 4;

$node->safe_psql('postgres', q{
	CREATE ROLE fuzz_user LOGIN;
	CREATE ROLE fuzz_other LOGIN;
	CREATE ROLE fuzz_lim LOGIN;
	-- each role's own session: ERRORs stay out of the log, WARNINGs do not
	ALTER ROLE fuzz_user SET log_min_messages = log;
	ALTER ROLE fuzz_other SET log_min_messages = log;
	ALTER ROLE fuzz_lim SET log_min_messages = log;
	-- a superuser may limit a role's names
	ALTER ROLE fuzz_lim SET hoplock.max_names_per_role = 3;
});
foreach my $d (@DBS)
{
	$node->safe_psql('postgres',
		"CREATE DATABASE $d->{db} ENCODING '$d->{enc}' LOCALE 'C' TEMPLATE template0");
	my $setup = q{
		CREATE EXTENSION hoplock;
		-- hoplock's tables, for the comparisons around failing calls: one
		-- name's row and its last terms and the floor, or the whole tables;
		-- the counters; the expiries announced; and the rows again, blind
		-- to announcements of expiries
		CREATE FUNCTION fz_digest(n text, whole boolean) RETURNS text[]
		LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
		BEGIN
			RETURN (
			WITH l AS (SELECT * FROM hoplock_internal.lease AS l WHERE whole OR l.name = n),
			     -- the name's last terms, or all
			     h AS (SELECT * FROM hoplock_internal.history AS h WHERE whole
			           UNION ALL
			           (SELECT * FROM hoplock_internal.history AS h WHERE NOT whole AND h.name = n
			             ORDER BY h.generation DESC LIMIT 8)),
			     s AS (SELECT * FROM public.hoplock_stats AS s
			            WHERE s.datid = (SELECT oid FROM pg_database WHERE datname = current_database()))
			SELECT ARRAY[
				md5(coalesce((SELECT string_agg(l::text, ',' ORDER BY l.name) FROM l), '') || '#' ||
				    coalesce((SELECT string_agg(h::text, ',' ORDER BY h.name, h.generation) FROM h), '')),
				concat_ws('/', CASE WHEN whole THEN (SELECT count(*) FROM l) END,
				               CASE WHEN whole THEN (SELECT count(*) FROM h) END,
				               (SELECT string_agg(f::text, ',') FROM hoplock_internal.floor AS f),
				               -- the branches: a failing call begins none
				               (SELECT count(*) || ':' || max(floor) FROM hoplock_internal.branch)),
				(SELECT concat_ws('/', terms_begun, contended, renewals, releases, force_releases, waits, wakeups) FROM s),
				(SELECT expiries::text FROM s),
				-- the rows again, blind to what the worker's announcement of
				-- an expiry changes: the state 'x' (and the session it
				-- clears), and the end of the term in the history
				md5(coalesce((SELECT string_agg(row(l.name, CASE WHEN l.state = 'x' THEN 'h' ELSE l.state END,
				                                    l.owner, l.owner_role, l.generation, l.acquired_at,
				                                    l.renewed_at, l.expires_at, l.owner_roleid)::text,
				                                ',' ORDER BY l.name) FROM l), '') || '#' ||
				    coalesce((SELECT string_agg(row(h.name, h.generation, h.owner, h.role, h.acquired_at, h.begin_seq,
				                                    CASE WHEN h.how = 'expired' THEN NULL ELSE h.ended_at END,
				                                    CASE WHEN h.how = 'expired' THEN NULL ELSE h.end_seq END,
				                                    nullif(h.how, 'expired'))::text,
				                                ',' ORDER BY h.name, h.generation) FROM h), ''))]);
		END
		$$;
	};
	for my $k (1 .. $N_TABLES)
	{
		$setup .= qq{
		CREATE TABLE fz_w$k (id bigserial PRIMARY KEY, g8 bigint, g4 integer, g2 smallint,
		                     gn numeric, gt text, payload text);
		CREATE VIEW fz_v$k AS SELECT * FROM fz_w$k;
		};
	}
	$setup .= q{
		GRANT ALL ON ALL TABLES IN SCHEMA public TO PUBLIC;
		GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO PUBLIC;
	};
	# one ordinary role may force-release, forget and reset the counters
	$setup .= q{
		GRANT EXECUTE ON FUNCTION hoplock_force_release(text), hoplock_forget(text),
		      hoplock_stats_reset() TO fuzz_other;
	} if $d->{db} eq 'fz_utf8';
	$node->safe_psql($d->{db}, $setup);
}
$node->poll_query_until('fz_utf8',
	'SELECT count(*) = ' . scalar(@DBS) . q{ FROM hoplock_workers WHERE datname LIKE 'fz\_%' AND state = 'sleeping'})
  or die 'no worker for every database';
my $bootstrap_su = $node->safe_psql('postgres', 'SELECT current_user');
my $server_version = $node->safe_psql('postgres', 'SHOW server_version_num');

# A library replaced under a running server (make install writes the file
# in place) crashes it: if the run crashes, say whether that happened.
my $library = $node->safe_psql('postgres', q{SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'}) . '/hoplock.so';
my $library_mtime = (stat $library)[9] // 0;

# --- Connections (opened below) -------------------------------------------------
my (@client_warnings, @perl_warnings);
$SIG{__WARN__} = sub {
	if ($_[0] =~ /^(WARNING|NOTICE|INFO|DEBUG):/) { push @client_warnings, $_[0] }
	else { push @perl_warnings, $_[0] }
};

my @CONNS;    # every connection, each a hash
my $LOST_CONNECTION;

# --- Values ---------------------------------------------------------------------
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
my @FUNCS = (
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
my %TYPE_OF = (
	name => 'text', owner => 'text', ttl => 'interval', timeout => 'interval', gen => 'bigint',
	bool => 'boolean', prev_handle => 'text', handle => 'text', since => 'bigint');

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
		elsif ($k eq 'ttl') { $v = gen_ttl($c) }
		elsif ($k eq 'timeout') { $v = gen_timeout($c) }
		elsif ($k eq 'gen') { $v = gen_generation($c, $name) }
		elsif ($k eq 'bool') { $v = gen_bool() }
		elsif ($k eq 'prev_handle') { $v = chance(0.3) ? undef : gen_handle($c, $name) }
		elsif ($k eq 'handle') { $v = gen_handle($c, $name) }
		elsif ($k eq 'since') { $v = gen_since($c) }
		push @args, $v;
	}
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

# --- Running statements ---------------------------------------------------------
sub sth
{
	my ($c, $sql) = @_;
	return $c->{sth}{$sql} //= $c->{dbh}->prepare($sql);
}

# Run a statement: (state, rows, message); state '' when it succeeded.
sub run
{
	my ($c, $sql, @args) = @_;
	my $sth = sth($c, $sql);
	my $ok = $sth->execute(@args);
	if (!defined $ok)
	{
		my $state = $c->{dbh}->state // '';
		$state = 'XXXXX' if $state eq '' || $state eq 'S1000';
		my $msg = $c->{dbh}->errstr // '';
		if ($state =~ $LOST || $msg =~ /server closed the connection|no connection to the server|terminating connection/)
		{
			$LOST_CONNECTION //= { conn => $c, sql => $sql, args => [@args], state => $state, msg => $msg };
		}
		return ($state, [], $msg);
	}
	my $rows = $sth->{NUM_OF_FIELDS} ? $sth->fetchall_arrayref : [];
	return ('', $rows, '');
}

sub run_ok
{
	my ($c, $sql, @args) = @_;
	my ($state, $rows, $msg) = run($c, $sql, @args);
	die "$c->{d}{db} as $c->{user}: $sql: $state $msg" if $state ne '';
	return $rows;
}

sub read_settings
{
	my ($c) = @_;
	my $rows = run_ok($c, q{SELECT (SELECT setting FROM pg_settings WHERE name = 'hoplock.max_ttl'),
	                               current_setting('transaction_read_only'),
	                               current_setting('hoplock.max_names_per_role'),
	                               current_setting('hoplock.notify_renewals'),
	                               current_setting('hoplock.log_events'),
	                               (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)});
	my ($max, $ro, $lim, $notify, $log, $super) = @{ $rows->[0] };
	$c->{settings} = {
		max_ttl => $max, read_only => $ro, max_names_per_role => $lim,
		notify_renewals => $notify, log_events => $log };
	$c->{su} = $super ? 1 : 0;
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

# --- Literals and what the server makes of them ----------------------------------
# Per connection and type: the SQLSTATE of casting the literal alone ('' if
# it is taken), and, for text, the name as the server has it in UTF-8 (or
# why there is none), and for intervals the microseconds hoplock reads.
my $INTERVAL_US = q{greatest(least(extract(day FROM ?::interval) * 86400000000
	+ (extract(epoch FROM ?::interval) - (extract(year FROM ?::interval) * 12 + extract(month FROM ?::interval)) * 2592000
	   - extract(day FROM ?::interval) * 86400) * 1000000, 9223372036854775807), -9223372036854775808)};
# type => [columns, expression of the literal "?"]
my %CAST = (
	text     => [ 2, q{octet_length(?::text), encode(convert_to(?::text, 'UTF8'), 'hex')} ],
	interval => [ 2, q{extract(year FROM ?::interval) * 12 + extract(month FROM ?::interval), } . $INTERVAL_US ],
	bigint   => [ 1, '?::bigint' ],
	boolean  => [ 1, '?::boolean' ],
	integer  => [ 1, '?::integer' ],
	smallint => [ 1, '?::smallint' ],
	numeric  => [ 1, '?::numeric' ],
);

sub cast_sql
{
	my (@types) = @_;
	my $i = 0;
	return 'SELECT ' . join(', ', map { $i++; $CAST{$_}[1] =~ s/\?/\$$i/gr } @types);
}

sub literal_info
{
	my ($type, $vals) = @_;
	my $info = { state => '' };
	if ($type eq 'text')
	{
		$info->{bytes} = $vals->[0];
		$info->{utf8} = pack('H*', $vals->[1]);
	}
	elsif ($type eq 'interval')
	{
		$info->{months} = $vals->[0];
		($info->{usecs} = $vals->[1]) =~ s/\.0*$//;
	}
	elsif ($type eq 'bigint')
	{
		$info->{value} = $vals->[0];
	}
	return $info;
}

sub literal
{
	my ($c, $type, $v) = @_;
	return { state => '', null => 1 } unless defined $v;
	my $key = "$type\0$v";
	my $cache = $c->{parse};
	return $cache->{$key} if exists $cache->{$key};
	%$cache = () if keys %$cache > 40_000;
	my ($state, $rows) = run($c, cast_sql($type), $v);
	my $info;
	if ($state eq '')
	{
		$info = literal_info($type, $rows->[0]);
	}
	elsif ($type eq 'text')
	{
		# the literal, or its conversion to UTF-8?
		my ($s1, $r1) = run($c, 'SELECT octet_length($1::text)', $v);
		$info = { state => $s1 };
		if ($s1 eq '')
		{
			$info->{bytes} = $r1->[0][0];
			$info->{utf8_error} = $state;
		}
	}
	else
	{
		$info = { state => $state };
	}
	$cache->{$key} = $info;
	return $info;
}

# Several literals at once, in one statement, if they are all taken in
# (the common case); else each on its own, as they are needed.
sub literals
{
	my ($c, $types, $values) = @_;
	my (@types, @values, %seen);
	for my $i (0 .. $#$types)
	{
		my ($t, $v) = ($types->[$i], $values->[$i]);
		next unless defined $v;
		next if exists $c->{parse}{"$t\0$v"} || $seen{"$t\0$v"}++;
		push @types, $t;
		push @values, $v;
	}
	if (@types > 1)
	{
		my ($state, $rows) = run($c, cast_sql(@types), @values);
		if ($state eq '')
		{
			my $col = 0;
			for my $i (0 .. $#types)
			{
				my $n = $CAST{ $types[$i] }[0];
				$c->{parse}{"$types[$i]\0$values[$i]"} =
				  literal_info($types[$i], [ @{ $rows->[0] }[ $col .. $col + $n - 1 ] ]);
				$col += $n;
			}
			return;
		}
	}
	literal($c, $types[$_], $values[$_]) for 0 .. $#types;
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

# What an argument calls for: 'ok', an SQLSTATE, or 'unknown'
sub judge
{
	my ($c, $kind, $v) = @_;
	my $type = $TYPE_OF{$kind};
	my $lit = literal($c, $type, $v);
	return 'ok' if $kind eq 'prev_handle' || $kind eq 'since';
	return '22004' if $lit->{null};
	if ($kind eq 'name' || $kind eq 'owner')
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
	if ($kind eq 'ttl' || $kind eq 'timeout')
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
	return 'ok';    # bool, handle
}

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

# --- Bookkeeping ---------------------------------------------------------------------
my %count;        # "$fn $class $state" => n
my %by_fn;        # $fn => calls
my $calls = 0;
my %problems;     # "kind (count)" => n
my %checks = (
	autocommit => 0, in_transaction => 0, same_snapshot => 0, whole_table => 0, announced_meanwhile => 0,
	arguments_bad => 0, arguments_good => 0, arguments_undecided => 0);

# A problem of a kind, and its signature (what tells it from others of the
# kind): the first few examples of each signature are kept.
my %signatures;
sub problem
{
	my ($kind, $text) = @_;
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
	$problems{"$kind (count)"}++;
	my $sig = $signatures{$kind}{$signature} //= { n => 0, examples => [], fns => {} };
	$sig->{n}++;
	$sig->{fns}{$fn}++ if $fn ne '';
	push @{ $sig->{examples} }, $text if @{ $sig->{examples} } < 2;
	return;
}

sub problem_report
{
	my ($kind) = @_;
	my $sigs = $signatures{$kind} // {};
	my @lines;
	for my $s (sort { $sigs->{$b}{n} <=> $sigs->{$a}{n} } keys %$sigs)
	{
		push @lines, "$sigs->{$s}{n} x $s" . (%{ $sigs->{$s}{fns} } ? ' (' . join(', ', sort keys %{ $sigs->{$s}{fns} }) . ')' : ''),
		  map { s/^/    /mgr } @{ $sigs->{$s}{examples} };
	}
	return join("\n", @lines);
}

sub remember_lease
{
	my ($c, $row) = @_;
	my ($name, $owner, $gen, $handle) = @$row;
	return unless defined $gen;
	$c->{d}{cache}{$name} = { gen => $gen, handle => $handle, owner => $owner };
}

# --- One call ---------------------------------------------------------------------------
# Judge a call's outcome against its arguments; returns the outcome's class.
sub judge_call
{
	my ($c, $f, $args, $state, $rows, $msg, $context) = @_;
	my ($fn, $sql, $kinds, $returns, undef, $privileged) = @$f;

	# arguments PostgreSQL cannot take in, in the order it reads them
	my $parse_state = '';
	for my $i (0 .. $#$kinds)
	{
		my $lit = literal($c, $TYPE_OF{ $kinds->[$i] }, $args->[$i]);
		if ($lit->{state} ne '') { $parse_state = $lit->{state}; last }
	}
	# a result (or message) the client's encoding cannot show
	return 'output' if $state eq '22P05' && $c->{output_may_fail};
	if ($parse_state ne '')
	{
		if ($state ne $parse_state)
		{
			problem('an argument PostgreSQL refuses, but the call did otherwise',
				"$fn: expected $parse_state (the literal alone), got " . ($state || 'success')
				  . " $msg\n" . repro($c, $sql, $args, $context));
		}
		elsif (!$PARSE{$state})
		{
			problem('unexpected SQLSTATE', "$fn: $state $msg\n" . repro($c, $sql, $args, $context));
		}
		return 'argument';
	}

	# then the function's own checks
	my @bad;
	my $unknown = 0;
	for my $i (0 .. $#$kinds)
	{
		my $j = judge($c, $kinds->[$i], $args->[$i]);
		if ($j eq 'unknown') { $unknown = 1 }
		elsif ($j ne 'ok') { push @bad, "$kinds->[$i]:$j" }
	}
	$checks{ $unknown ? 'arguments_undecided' : @bad ? 'arguments_bad' : 'arguments_good' }++;
	my $may_execute = !$privileged || $c->{su}
	  || ($c->{role} eq 'fuzz_other' && !$c->{set_role} && $c->{d}{db} eq 'fz_utf8');

	if ($state ne '' && !$CONTRACT{$state})
	{
		problem('unexpected SQLSTATE', "$fn: $state $msg\n" . repro($c, $sql, $args, $context));
	}
	elsif (!$may_execute)
	{
		problem('a function the role may not execute ran, or failed otherwise',
			"$fn: expected 42501, got " . ($state || 'success') . " $msg\n" . repro($c, $sql, $args, $context))
		  if $state ne '42501';
	}
	elsif (!$unknown && @bad)
	{
		my %want = map { (split /:/)[1] => 1 } @bad;
		problem('a bad argument not refused as the contract says',
			"$fn: bad " . join(', ', @bad) . '; got ' . ($state || 'success') . " $msg\n"
			  . repro($c, $sql, $args, $context))
		  unless $want{$state};
	}
	elsif (!$unknown && ($state eq '22004' || $state eq '22023'))
	{
		problem('good arguments refused',
			"$fn: $state $msg\n" . repro($c, $sql, $args, $context));
	}

	if ($state eq '' && $returns eq 'lease' && @$rows && defined $rows->[0][2])
	{
		my ($name, $owner, $gen) = @{ $rows->[0] };
		my %given = map { $kinds->[$_] => $args->[$_] } 0 .. $#$kinds;
		problem('a lease returned does not match the call',
			"$fn: returned " . join(', ', map { show_value($_) } @{ $rows->[0] }) . "\n"
			  . repro($c, $sql, $args, $context))
		  unless $name eq $given{name}
		  && (!exists $given{owner} || $fn eq 'read' || $fn eq 'holder' || $owner eq $given{owner})
		  && $gen > 0;
		remember_lease($c, $rows->[0]);
	}
	if ($state eq '' && $returns eq 'events' && @$rows && defined $rows->[0][1])
	{
		$c->{d}{last_seq} = $rows->[0][1] if $rows->[0][1] > ($c->{d}{last_seq} // 0);
	}
	return 'hoplock';
}

# Compare two digests around a failing call.  $strict: the same snapshot.
sub compare_digests
{
	my ($c, $before, $after, $fn, $state, $sql, $args, $context, $strict, $counters_too) = @_;
	return unless $before && $after;
	my $tables_differ = $before->[0] ne $after->[0] || $before->[1] ne $after->[1];
	my $counters_differ = $counters_too && ($before->[2] // '') ne ($after->[2] // '');
	return unless $tables_differ || $counters_differ;
	if (!$strict && !$counters_differ && $before->[1] eq $after->[1] && $before->[4] eq $after->[4])
	{
		# what changed is what the worker changes when it announces an
		# expiry, which it may have done meanwhile
		$checks{announced_meanwhile}++;
		return;
	}
	my @what;
	push @what, 'the rows compared' if $before->[0] ne $after->[0];
	push @what, "the row counts or the floor ($before->[1] -> $after->[1])" if $before->[1] ne $after->[1];
	push @what, 'the counters (terms begun, contended, renewals, releases, force-releases, waits, wake-ups: '
	  . ($before->[2] // '-') . ' -> ' . ($after->[2] // '-') . ')' if $counters_differ;
	problem('a failing call changed something',
		sprintf("%s: %s; changed: %s\n%s", $fn, $state, join('; ', @what), repro($c, $sql, $args, $context)));
}

sub run_digest
{
	my ($c, $name, $whole) = @_;
	my ($state, $rows) = run($c, 'SELECT fz_digest($1::text, $2::boolean)', $name, $whole ? 'true' : 'false');
	return undef if $state ne '';
	my $a = $rows->[0][0];
	# DBD::Pg gives arrays as array references
	return $a if ref $a eq 'ARRAY';
	return undef;
}

sub name_arg
{
	my ($c, $f, $args) = @_;
	my $kinds = $f->[2];
	for my $i (0 .. $#$kinds)
	{
		next unless $kinds->[$i] eq 'name';
		my $v = $args->[$i];
		return undef unless defined $v && literal($c, 'text', $v)->{state} eq '';
		return $v;
	}
	return undef;
}

# A call in autocommit, compared around when it fails (now and then)
sub autocommit_call
{
	my ($c, $f, $name_given) = @_;
	my $args = gen_args($c, $f);
	if (defined $name_given)
	{
		$args->[$_] = $name_given for grep { $f->[2][$_] eq 'name' } 0 .. $#{ $f->[2] };
	}
	# the literals first, so that casting them is not in the comparison
	literals($c, [ map { $TYPE_OF{$_} } @{ $f->[2] } ], $args);
	my $check = chance(0.2);
	my $whole = $check && chance(0.01);
	my $name = name_arg($c, $f, $args);
	my $before = $check ? run_digest($c, $name, $whole) : undef;
	my ($state, $rows, $msg) = run($c, $f->[1], @$args);
	$calls++;
	$by_fn{ $f->[0] }++;
	my $class = judge_call($c, $f, $args, $state, $rows, $msg, 'autocommit');
	$count{"$f->[0] " . ($state eq '' ? 'ok' : "$class $state")}++;
	if ($state ne '' && $before && !$LOST_CONNECTION)
	{
		my $after = run_digest($c, $name, $whole);
		$checks{autocommit}++;
		$checks{whole_table}++ if $whole;
		compare_digests($c, $before, $after, $f->[0], $state, $f->[1], $args, 'autocommit', 0,
			$class eq 'argument' || $state =~ /^(22004|22023|42501|25006)$/);
	}
}

# A transaction block: a few calls, each in a savepoint (mostly), compared
# around each that fails; then COMMIT, ROLLBACK or PREPARE TRANSACTION.
my $prepared_seq = 0;
sub transaction_block
{
	my ($c) = @_;
	my $iso = pick('READ COMMITTED', 'REPEATABLE READ', 'SERIALIZABLE');
	my $ro = chance(0.1) ? ' READ ONLY' : '';
	my @plan;
	for (1 .. 1 + int(rand(5)))
	{
		my $f = pick_function($c, 1);
		my $args = gen_args($c, $f);
		literals($c, [ map { $TYPE_OF{$_} } @{ $f->[2] } ], $args);
		push @plan, [ $f, $args ];
	}
	my $context = "in BEGIN ISOLATION LEVEL $iso$ro";
	my ($bs) = run($c, "BEGIN ISOLATION LEVEL $iso$ro");
	return if $bs ne '';
	my $snapshot = $iso ne 'READ COMMITTED';
	my $aborted = 0;
	my $touched = 0;        # this transaction changed or fenced a lease
	my $interfered = 0;     # another session changed one since the snapshot
	for my $p (@plan)
	{
		my ($f, $args) = @$p;
		# another session of the database changes something after this
		# transaction's snapshot, now and then
		if ($p != $plan[0] && chance(0.3))
		{
			my @others = grep { $_ != $c } @{ $c->{d}{conns_list} };
			if (@others)
			{
				my $other = pick(@others);
				autocommit_call($other, pick_function($other, 1), name_arg($c, $f, $args));
				$interfered = 1;
			}
		}
		my $name = name_arg($c, $f, $args);
		my $whole = chance(0.02);
		my $before = chance(0.5) ? run_digest($c, $name, $whole) : undef;
		my $savepoint = chance(0.85);
		run($c, 'SAVEPOINT fz') if $savepoint;
		my ($state, $rows, $msg) = run($c, $f->[1], @$args);
		$calls++;
		$by_fn{ $f->[0] }++;
		my $class = judge_call($c, $f, $args, $state, $rows, $msg, $context);
		$count{"$f->[0] " . ($state eq '' ? 'ok' : "$class $state")}++;
		last if $LOST_CONNECTION;
		if ($state eq '')
		{
			run($c, 'RELEASE SAVEPOINT fz') if $savepoint;
			$touched = 1 if $f->[0] =~ /acquire|renew|release|fence|wait|write|delete|force|forget/;
			next;
		}
		if (!$savepoint)
		{
			run($c, 'ROLLBACK');
			$aborted = 1;
			# compared with what is committed now: only if this transaction
			# changed nothing, and saw what others committed
			if ($before && !$touched && (!$snapshot || !$interfered))
			{
				my $after = run_digest($c, $name, $whole);
				$checks{in_transaction}++;
				compare_digests($c, $before, $after, $f->[0], $state, $f->[1], $args,
					"$context, no savepoint", 0, 0);
			}
			last;
		}
		run($c, 'ROLLBACK TO SAVEPOINT fz');
		next unless $before;
		my $after = run_digest($c, $name, $whole);
		$checks{in_transaction}++;
		$checks{whole_table}++ if $whole;
		$checks{same_snapshot}++ if $snapshot;
		compare_digests($c, $before, $after, $f->[0], $state, $f->[1], $args,
			"$context, ROLLBACK TO SAVEPOINT", $snapshot, 0);
	}
	return if $aborted || $LOST_CONNECTION;
	my $end = pick('COMMIT', 'COMMIT', 'COMMIT', 'ROLLBACK', 'PREPARE');
	if ($end eq 'PREPARE')
	{
		my $gid = 'fz_' . $c->{id} . '_' . ++$prepared_seq;
		my ($state, undef, $msg) = run($c, "PREPARE TRANSACTION '$gid'");
		$count{"PREPARE TRANSACTION " . ($state || 'ok')}++;
		if ($state eq '')
		{
			run($c, "ROLLBACK PREPARED '$gid'");
		}
		elsif (!$CONTRACT{$state})
		{
			problem('unexpected SQLSTATE', "PREPARE TRANSACTION: $state $msg ($context)");
		}
		# (a PREPARE TRANSACTION that fails rolls the transaction back)
		return;
	}
	my ($state, undef, $msg) = run($c, $end);
	$count{"$end " . ($state || 'ok')}++;
	problem('unexpected SQLSTATE', "$end: $state $msg ($context)") if $state ne '' && !$CONTRACT{$state};
	run($c, 'ROLLBACK') if $state ne '';
}

# --- The trigger ------------------------------------------------------------------------
my @COLUMNS = (qw(g8 g8 g8 g4 g2 gn gt id payload), 'nope', 'ctid', 'tableoid', 'xmin', '', 'G8', ' g8');
my %COLUMN_TYPE = (g8 => 'int', g4 => 'int', g2 => 'int', id => 'int', gn => 'numeric', gt => 'text', payload => 'text');

sub quote_literal
{
	my ($v) = @_;
	(my $q = $v) =~ s/'/''/g;
	return "'$q'";
}

# (Re)create table k's trigger, with random arguments; remember its setup.
sub make_trigger
{
	my ($c, $k) = @_;
	my $d = $c->{d};
	my @args;
	my $nargs = pick(2, 2, 2, 2, 2, 2, 2, 0, 1, 3);
	my $name = gen_name($c, 0.8);
	$name = 'fz-a' unless defined $name;
	my $column = pick(@COLUMNS);
	@args = ($name, $column, 'extra')[ 0 .. $nargs - 1 ];
	my $shape = pick('before row', 'before row', 'before row', 'before row', 'after row',
		'before statement', 'instead of row', 'before truncate');
	my $sql_args = join(', ', map { quote_literal($_) } @args);
	my $ddl;
	if ($shape eq 'instead of row')
	{
		$ddl = "CREATE TRIGGER fz_trig INSTEAD OF INSERT OR UPDATE OR DELETE ON fz_v$k "
		  . "FOR EACH ROW EXECUTE FUNCTION hoplock_fenced($sql_args)";
	}
	elsif ($shape eq 'before truncate')
	{
		$ddl = "CREATE TRIGGER fz_trig BEFORE TRUNCATE ON fz_w$k "
		  . "FOR EACH STATEMENT EXECUTE FUNCTION hoplock_fenced($sql_args)";
	}
	else
	{
		my ($timing, $level) = split / /, $shape;
		$ddl = "CREATE TRIGGER fz_trig " . uc($timing) . " INSERT OR UPDATE OR DELETE ON fz_w$k "
		  . "FOR EACH " . uc($level) . " EXECUTE FUNCTION hoplock_fenced($sql_args)";
	}
	my $was_role = $c->{set_role};
	run($c, 'RESET ROLE') if $was_role;
	# (in a transaction of its own: the session may be read-only)
	my $drop = "DROP TRIGGER IF EXISTS fz_trig ON fz_w$k; DROP TRIGGER IF EXISTS fz_trig ON fz_v$k";
	my ($state, $msg) = ('', '');
	$c->{dbh}->do("BEGIN READ WRITE; $drop") or die $c->{dbh}->errstr;
	if (!$c->{dbh}->do($ddl))
	{
		($state, $msg) = ($c->{dbh}->state, $c->{dbh}->errstr);
		$c->{dbh}->do('ROLLBACK');
		$c->{dbh}->do("BEGIN READ WRITE; $drop; COMMIT") or die $c->{dbh}->errstr;
	}
	else
	{
		$c->{dbh}->do('COMMIT') or die $c->{dbh}->errstr;
	}
	$count{'CREATE TRIGGER ' . ($state || 'ok')}++;
	run($c, "SET ROLE $was_role") if $was_role;
	if ($state ne '')
	{
		# only the literals may be refused, as PostgreSQL takes them in
		problem('unexpected SQLSTATE', "CREATE TRIGGER: $state $msg\n  $ddl")
		  unless $PARSE{$state};
		$d->{trigger}[$k] = undef;
		return;
	}
	$d->{trigger}[$k] = { args => \@args, shape => $shape, ddl => $ddl, by => $c };
}

# What an INSERT through table k's trigger calls for, given the row
sub trigger_expectation
{
	my ($c, $t, $value_of) = @_;
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
	my $j = judge($t->{by}, 'name', $name);
	return undef if $j eq 'unknown';
	return $j if $j ne 'ok';
	my $v = $value_of->{$column};
	return undef if $column eq 'id';
	return '22004' unless defined $v;
	return '55P03' if cmp_int($v, 0) <= 0;
	return 'state';
}

sub trigger_call
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
	literals($c, \@types, \@args);
	my $check = chance(0.3);
	my $before = $check ? run_digest($c, ($lease // '') eq '' ? undef : $lease, 0) : undef;
	my ($state, $rows, $msg) = run($c, $sql, @args);
	$calls++;
	$by_fn{trigger}++;
	my $context = $t ? "trigger: $t->{ddl}" : 'no trigger';

	my $parse_state = '';
	for my $i (0 .. $#args)
	{
		my $lit = literal($c, $types[$i], $args[$i]);
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
		problem('an argument PostgreSQL refuses, but the call did otherwise',
			"trigger $op: expected $parse_state, got " . ($state || 'success') . " $msg\n"
			  . repro($c, $sql, \@args, $context))
		  if $state ne $parse_state;
	}
	elsif ($state ne '' && !$CONTRACT{$state} && !$TRIGGER_SETUP{$state})
	{
		problem('unexpected SQLSTATE', "trigger $op: $state $msg\n" . repro($c, $sql, \@args, $context));
	}
	elsif ($op =~ /^insert/)
	{
		# an insert into the view reaches the table's trigger too, unless
		# the view has its own (INSTEAD OF)
		my $want = !$t ? ''
		  : $t->{shape} eq 'instead of row' && $op ne 'insert view' ? ''
		  : trigger_expectation($c, $t, \%row);
		$want = '25006' if $c->{settings}{read_only} eq 'on';
		if (defined $want)
		{
			if ($want eq 'state')
			{
				problem('trigger: a good row refused as a bad argument',
					"trigger $op: $state $msg\n" . repro($c, $sql, \@args, $context))
				  if $state eq '22004' || $state eq '22023' || $TRIGGER_SETUP{$state};
			}
			elsif ($state ne $want)
			{
				problem('trigger: not refused as its setup or the row calls for',
					"trigger $op: expected " . ($want || 'success') . ', got ' . ($state || 'success')
					  . " $msg\n" . repro($c, $sql, \@args, $context));
			}
		}
	}
	$count{"trigger " . ($state eq '' ? 'ok' : "$class $state")}++;
	if ($state ne '' && $before && !$LOST_CONNECTION)
	{
		my $after = run_digest($c, ($lease // '') eq '' ? undef : $lease, 0);
		$checks{autocommit}++;
		compare_digests($c, $before, $after, "trigger $op", $state, $sql, \@args, $context, 0,
			$class eq 'argument');
	}
}

# --- Settings ---------------------------------------------------------------------------
sub shuffle_settings
{
	my ($c) = @_;
	my @sets;
	if ($c->{role} eq 'su')
	{
		if ($c->{set_role}) { run_ok($c, 'RESET ROLE'); $c->{set_role} = undef; $c->{su} = 1 }
		push @sets, 'hoplock.max_ttl = ' . pick(1, "'1s'", 2147483647, "'2147483647s'", "'35791394min'",
			"'24855d'", "'24856d'", 0, -1, 2147483648, "'1d'", 86400, 3600, "'1ms'", "'1500ms'", "'abc'",
			"'1 h'", 60, 86401) if chance(0.7);
		push @sets, 'hoplock.max_names_per_role = ' . pick(0, 1, 2, 3, 100, 2147483647, -1, 2147483648, "'x'")
		  if chance(0.5);
		push @sets, 'hoplock.notify_renewals = ' . pick('on', 'off', 'maybe', "'1'") if chance(0.4);
		push @sets, 'hoplock.log_events = ' . (chance(0.08) ? 'on' : 'off') if chance(0.4);
		push @sets, 'default_transaction_read_only = ' . (chance(0.06) ? 'on' : 'off') if chance(0.4);
		push @sets, 'synchronous_commit = ' . pick('on', 'off', 'local') if chance(0.2);
		push @sets, pick('hoplock.channel = other', 'hoplock.history_size = 0', 'hoplock.no_such = 1',
			'hoplock.max_databases = 1') if chance(0.2);
	}
	else
	{
		push @sets, pick('hoplock.max_ttl = 2147483647', 'hoplock.max_names_per_role = 0',
			'hoplock.log_events = on', 'hoplock.channel = other', 'hoplock.naptime = 1');
		push @sets, 'hoplock.notify_renewals = ' . pick('on', 'off');
	}
	for my $s (@sets)
	{
		my ($state, undef, $msg) = $c->{dbh}->do("SET $s") ? ('') : ($c->{dbh}->state, undef, $c->{dbh}->errstr);
		$count{'SET ' . ($state || 'ok')}++;
		problem('unexpected SQLSTATE', "SET $s: $state $msg (as $c->{user})") if $state ne '' && !$SETTING{$state};
		problem('an ordinary role changed a setting of a superuser\'s', "SET $s (as $c->{user})")
		  if $state eq '' && !$c->{su} && $s !~ /notify_renewals/;
	}
	# the superuser's connection in a database becomes the limited role for a while
	if ($c->{role} eq 'su' && chance(0.3))
	{
		run_ok($c, 'SET ROLE fuzz_lim');
		$c->{set_role} = 'fuzz_lim';
	}
	read_settings($c);
}

# --- Connections ------------------------------------------------------------------
sub open_connections
{
	my ($d) = @_;
	$d->{cache} = {};    # name => { gen, handle, owner }
	$d->{conns_list} = [];
	foreach my $spec (@{ $d->{conns} })
	{
		my ($role, $cenc) = @$spec;
		my $user = $role eq 'su' ? $bootstrap_su : $role;
		my $dbh = DBI->connect(
			sprintf('dbi:Pg:host=%s;port=%d;dbname=%s;application_name=fuzz-%s-%s',
				$node->host, $node->port, $d->{db}, $role, $cenc),
			$user, '',
			{ AutoCommit => 1, RaiseError => 0, PrintError => 0, pg_enable_utf8 => 0 })
		  or die "connect $d->{db} as $user: $DBI::errstr";
		$dbh->do("SET client_encoding = '$cenc'") or die $dbh->errstr;
		$dbh->do("SET statement_timeout = '250ms'") or die $dbh->errstr;
		$dbh->do("SET client_min_messages = warning") or die $dbh->errstr;
		$dbh->do("SET log_min_messages = log") if $role eq 'su';
		my $c = {
			d => $d, dbh => $dbh, role => $role, cenc => $cenc, user => $user,
			su => ($role eq 'su'), set_role => undef, sth => {}, parse => {},
			id => scalar(@CONNS), settings => {},
		};
		# a name another client wrote may have no form in this client's
		# encoding: results and messages with it cannot be sent (22P05)
		$c->{output_may_fail} = $cenc ne $d->{enc} && $cenc ne 'UTF8' && $cenc ne 'SQL_ASCII'
		  && $d->{enc} ne 'SQL_ASCII';
		$c->{pool} = make_pool($c);
		$c->{owners} = [ (map { "o$_" } 1 .. 4), @{ $c->{pool} }[ -3 .. -1 ] ];
		read_settings($c);
		push @CONNS, $c;
		push @{ $d->{conns_list} }, $c;
	}
}

# --- The run ------------------------------------------------------------------------------
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

# One shard of the run: some databases, their connections, a share of the
# calls.  Two shards run side by side, each in a process of its own, on
# databases of their own, so that what one compares is not changed by the
# other.
sub run_shard
{
	my ($dbs, $my_target, $deadline) = @_;
	open_connections($_) for @$dbs;
	for my $d (@$dbs)
	{
		make_trigger($d->{conns_list}[0], $_) for 1 .. $N_TABLES;
	}
	my $t0 = time();
	while ($calls < $my_target && time() < $deadline && !$LOST_CONNECTION)
	{
		my $d = pick_db($dbs);
		my $c = pick(@{ $d->{conns_list} });
		my $r = rand();
		if ($r < 0.004)
		{
			shuffle_settings($c);
			next;
		}
		if ($r < 0.006)
		{
			my $su = $d->{conns_list}[0];
			make_trigger($su, 1 + int(rand($N_TABLES)));
			next;
		}
		if ($r < 0.0065)
		{
			# keep the users' tables small; TRUNCATE fires the TRUNCATE triggers
			my $su = $d->{conns_list}[0];
			my $k = 1 + int(rand($N_TABLES));
			run($su, 'RESET ROLE') if $su->{set_role};
			run_ok($su, 'BEGIN READ WRITE');
			my ($state, undef, $msg) = run($su, "TRUNCATE fz_w$k");
			run_ok($su, $state eq '' ? 'COMMIT' : 'ROLLBACK');
			run($su, "SET ROLE $su->{set_role}") if $su->{set_role};
			my $t = $d->{trigger}[$k];
			my $want = $t && $t->{shape} eq 'before truncate' ? '0A000' : '';
			$count{'TRUNCATE ' . ($state || 'ok')}++;
			problem('trigger: not refused as its setup or the row calls for', "TRUNCATE fz_w$k: expected "
				  . ($want || 'success') . ", got " . ($state || 'success') . " $msg ($t->{ddl})")
			  if $state ne $want && $t;
			next;
		}
		if ($r < 0.08)
		{
			transaction_block($c);
			next;
		}
		my $f = pick_function($c, 0);
		if ($f->[0] eq 'trigger') { trigger_call($c) }
		else { autocommit_call($c, $f) }
	}
	my $elapsed = time() - $t0;

	if ($LOST_CONNECTION)
	{
		my $l = $LOST_CONNECTION;
		problem('a connection was lost', "$l->{state} $l->{msg}\n" . repro($l->{conn}, $l->{sql}, $l->{args}));
	}
	my $dead = grep { !$_->{dbh}->ping } @CONNS;
	$_->{dbh}->disconnect for @CONNS;
	return {
		calls => $calls, elapsed => $elapsed, count => \%count, by_fn => \%by_fn,
		checks => \%checks, signatures => \%signatures, problems => \%problems,
		client_warnings => \@client_warnings, perl_warnings => \@perl_warnings,
		dead => $dead,
	};
}

my @SHARDS = ([ grep { $_->{db} =~ /^fz_(utf8|mule)$/ } @DBS ], [ grep { $_->{db} !~ /^fz_(utf8|mule)$/ } @DBS ]);
my $all_weight = 0;
$all_weight += $_->{weight} for @DBS;
my $tmpdir = PostgreSQL::Test::Utils::tempdir;
my @children;
for my $i (0 .. $#SHARDS)
{
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		# each shard its own sequence of values, from the one seed
		srand($seed + 7919 * ($i + 1));
		my $weight = 0;
		$weight += $_->{weight} for @{ $SHARDS[$i] };
		my $result = eval {
			run_shard($SHARDS[$i], int($target_calls * $weight / $all_weight) + 1, time() + $max_seconds);
		} // { died => "$@" };
		open(my $fh, '>', "$tmpdir/shard-$i.json") or POSIX::_exit(2);
		print $fh JSON::PP->new->utf8->canonical->encode($result);
		close $fh;
		# not through END blocks: they would stop the server
		POSIX::_exit(0);
	}
	push @children, $pid;
}
waitpid($_, 0) for @children;

# Everything the shards found, together
my $elapsed = 0;
my $dead = 0;
for my $i (0 .. $#SHARDS)
{
	my $file = "$tmpdir/shard-$i.json";
	my $r = -e $file ? JSON::PP->new->utf8->decode(slurp_file($file)) : { died => 'no result' };
	if ($r->{died})
	{
		problem('a shard of the run died', "shard $i: $r->{died}");
		next;
	}
	$calls += $r->{calls};
	$elapsed = $r->{elapsed} if $r->{elapsed} > $elapsed;
	$dead += $r->{dead};
	$count{$_} += $r->{count}{$_} for keys %{ $r->{count} };
	$by_fn{$_} += $r->{by_fn}{$_} for keys %{ $r->{by_fn} };
	$checks{$_} += $r->{checks}{$_} for keys %{ $r->{checks} };
	$problems{$_} += $r->{problems}{$_} for keys %{ $r->{problems} };
	for my $kind (keys %{ $r->{signatures} })
	{
		for my $sig (keys %{ $r->{signatures}{$kind} })
		{
			my $from = $r->{signatures}{$kind}{$sig};
			my $to = $signatures{$kind}{$sig} //= { n => 0, examples => [], fns => {} };
			$to->{n} += $from->{n};
			push @{ $to->{examples} }, @{ $from->{examples} };
			splice(@{ $to->{examples} }, 2) if @{ $to->{examples} } > 2;
			$to->{fns}{$_} += $from->{fns}{$_} for keys %{ $from->{fns} };
		}
	}
	push @client_warnings, @{ $r->{client_warnings} };
	push @perl_warnings, @{ $r->{perl_warnings} };
}

# --- Afterwards --------------------------------------------------------------------------
my $replaced = ((stat $library)[9] // 0) != $library_mtime;
my $alive = $node->safe_psql('postgres', 'SELECT 1');
is($alive, '1', 'the server answers after the run');
is($dead, 0, 'every connection of the run is still up');

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

my @kinds = sort keys %signatures;
for my $kind (
	'unexpected SQLSTATE',
	'an argument PostgreSQL refuses, but the call did otherwise',
	'a bad argument not refused as the contract says',
	'good arguments refused',
	'a function the role may not execute ran, or failed otherwise',
	'a failing call changed something',
	'a lease returned does not match the call',
	'trigger: not refused as its setup or the row calls for',
	'trigger: a good row refused as a bad argument',
	"an ordinary role changed a setting of a superuser's",
	'a connection was lost')
{
	my $n = $problems{"$kind (count)"} // 0;
	is($n, 0, "no call: $kind") or diag(problem_report($kind));
}
diag("$library was replaced during the run: a crash may come from that, not from the calls")
  if $replaced && ($problems{'a connection was lost (count)'} // 0);
my @other = grep { my $k = $_; !grep { $_ eq $k } (
	'unexpected SQLSTATE',
	'an argument PostgreSQL refuses, but the call did otherwise',
	'a bad argument not refused as the contract says',
	'good arguments refused',
	'a function the role may not execute ran, or failed otherwise',
	'a failing call changed something',
	'a lease returned does not match the call',
	'trigger: not refused as its setup or the row calls for',
	'trigger: a good row refused as a bad argument',
	"an ordinary role changed a setting of a superuser's",
	'a connection was lost') } @kinds;
is(scalar(@other), 0, 'no other problem') or diag(join("\n", map { "$_:\n" . problem_report($_) } @other));

is(scalar(@client_warnings), 0, 'no client saw a WARNING')
  or diag(join('', @client_warnings[ 0 .. ($#client_warnings < 9 ? $#client_warnings : 9) ]));
is(scalar(@perl_warnings), 0, 'the test itself ran without warnings')
  or diag(join('', @perl_warnings[ 0 .. ($#perl_warnings < 9 ? $#perl_warnings : 9) ]));

my $log = slurp_file($node->logfile);
my @bad_lines = grep {
	/TRAP:|PANIC:|terminated by signal|was terminated|exited with exit code|segmentation fault|WARNING:|server process .* exited/i
	  || (/ERROR:|FATAL:/ && !/ client backend /)
} split /\n/, $log;
is(scalar(@bad_lines), 0, 'the server log shows no crash, no WARNING, and no error outside the clients\' sessions')
  or diag(join("\n", @bad_lines[ 0 .. ($#bad_lines < 19 ? $#bad_lines : 19) ],
		$replaced ? "$library was replaced during the run: a crash may come from that, not from the calls" : ()));

$node->stop('fast');
done_testing();
