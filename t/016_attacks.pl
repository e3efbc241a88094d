# What an ordinary role (sometimes owning a database, never a superuser)
# cannot do to hoplock or to another role's leases: crash the server with a
# planted table, disturb a victim's fences and terms with calls that fail
# for lack of rights, make the worker spin, or delay expiries by
# overflowing the worker's mailbox; and names in SQL_ASCII and LATIN1
# databases are checked as Unicode.
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use Hoplock::Listener;

my $node = PostgreSQL::Test::Cluster->new('attacks');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
restart_after_crash = on
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE victim LOGIN;
	CREATE ROLE mallory LOGIN;
	CREATE DATABASE mallorydb OWNER mallory;
});
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = 'postgres' AND state = 'sleeping'})
  or die 'no worker';

sub cpu_ticks
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or return 0;
	my @f = split / /, <$fh>;
	return $f[13] + $f[14];
}

# --- A planted table in a database without hoplock ------------------------------
$node->safe_psql('mallorydb', q{
	CREATE SCHEMA hoplock_internal;
	CREATE TABLE hoplock_internal.lease (
	    name text, state "char", owner text, owner_role name, generation bigint,
	    acquired_at timestamptz, renewed_at timestamptz, expires_at timestamptz,
	    session_pid integer, session_start timestamptz, owner_roleid oid);
	INSERT INTO hoplock_internal.lease VALUES
	    ('x', 'h', NULL, NULL, NULL, NULL, NULL, now(), 1, NULL, NULL),
	    (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
}, extra_params => [ '-U', 'mallory' ]);
my $log_offset = -s $node->logfile;
# every way of making the launcher look at databases again
$node->safe_psql('postgres', 'CREATE DATABASE woken');
$node->reload;
$node->restart;
sleep 3;
my $log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/terminated by signal|all server processes terminated/,
	'a planted table in a database without the extension crashes nothing');
is($node->safe_psql('postgres', q{SELECT count(*) FROM hoplock_workers WHERE datname = 'mallorydb'}),
	'0', 'and that database is not served');
my ($ret, $out, $err) = $node->psql('mallorydb', q{SELECT 1 FROM pg_proc WHERE proname = 'hoplock_acquire'});
is($out, '', 'nothing was installed there');

# --- Calls that fail for lack of rights take no lock ------------------------------
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = 'postgres' AND state = 'sleeping'})
  or die 'no worker';
$node->safe_psql('postgres', q{
	CREATE TABLE outcomes (who text, what text, ok int, failed int);
	GRANT INSERT ON outcomes TO victim, mallory;
	CREATE PROCEDURE fence_loop(lease text, seconds float) LANGUAGE plpgsql AS $$
	DECLARE
		g bigint;
		ok int := 0;
		failed int := 0;
		stop timestamptz := clock_timestamp() + seconds * interval '1 s';
	BEGIN
		SELECT generation INTO g FROM hoplock_read(lease);
		WHILE clock_timestamp() < stop LOOP
			BEGIN
				PERFORM hoplock_fence(lease, g);
				ok := ok + 1;
			EXCEPTION WHEN lock_not_available THEN
				failed := failed + 1;
			END;
			COMMIT;
		END LOOP;
		INSERT INTO outcomes VALUES (current_user, 'fence', ok, failed);
		COMMIT;
	END $$;
	CREATE PROCEDURE cycle_loop(lease text, seconds float) LANGUAGE plpgsql AS $$
	DECLARE
		ok int := 0;
		failed int := 0;
		stop timestamptz := clock_timestamp() + seconds * interval '1 s';
	BEGIN
		WHILE clock_timestamp() < stop LOOP
			IF hoplock_acquire(lease, 'v', '1 h') IS NOT NULL
			   AND hoplock_release(lease, 'v') THEN
				ok := ok + 1;
			ELSE
				failed := failed + 1;
			END IF;
			COMMIT;
		END LOOP;
		INSERT INTO outcomes VALUES (current_user, 'cycle', ok, failed);
		COMMIT;
	END $$;
	CREATE PROCEDURE attack_loop(lease text, owner text, seconds float) LANGUAGE plpgsql AS $$
	DECLARE
		denied int := 0;
		stop timestamptz := clock_timestamp() + seconds * interval '1 s';
	BEGIN
		WHILE clock_timestamp() < stop LOOP
			BEGIN
				PERFORM hoplock_release(lease, owner);
			EXCEPTION WHEN insufficient_privilege THEN
				denied := denied + 1;
			END;
			BEGIN
				PERFORM hoplock_fence(lease, coalesce((SELECT generation FROM hoplock_read(lease)), 1));
			EXCEPTION WHEN insufficient_privilege OR lock_not_available THEN
				denied := denied + 1;
			END;
			COMMIT;
		END LOOP;
		INSERT INTO outcomes VALUES (current_user, 'attack', 0, denied);
		COMMIT;
	END $$;
	GRANT EXECUTE ON PROCEDURE fence_loop(text, float), cycle_loop(text, float),
	      attack_loop(text, text, float) TO victim, mallory;
});
$node->safe_psql('postgres', q{SELECT hoplock_acquire('fenced', 'v', '1 h')},
	extra_params => [ '-U', 'victim' ]);
my @attackers = map { $node->background_psql('postgres', extra_params => [ '-U', 'mallory' ]) } 1 .. 2;
$_->query_until(qr/started/, "\\echo started\nCALL attack_loop('fenced', 'v', 4);\nCALL attack_loop('cycled', 'v', 4);\n")
  foreach @attackers;
my $fencer = $node->background_psql('postgres', extra_params => [ '-U', 'victim' ]);
$fencer->query_safe(q{CALL fence_loop('fenced', 3)});
my $cycler = $node->background_psql('postgres', extra_params => [ '-U', 'victim' ]);
$cycler->query_safe(q{CALL cycle_loop('cycled', 3)});
$_->quit foreach (@attackers, $fencer, $cycler);
my %r = map { my @c = split /\|/; ("$c[0]/$c[1]" => [ $c[2], $c[3] ]) }
  split /\n/, $node->safe_psql('postgres',
	q{SELECT who, what, sum(ok), sum(failed) FROM outcomes GROUP BY who, what});
cmp_ok($r{'mallory/attack'}[1], '>', 100, "the attackers' calls were refused ($r{'mallory/attack'}[1] times)");
is($r{'victim/fence'}[1], 0, "none of the victim's $r{'victim/fence'}[0] fences failed meanwhile");
is($r{'victim/cycle'}[1], 0, "none of the victim's $r{'victim/cycle'}[0] acquire/release cycles failed");

# --- Session-bound terms of a dead session, held busy: no spin -------------------
$node->safe_psql('postgres', q{SELECT hoplock_force_release(name) FROM hoplock_leases});
my $holder = $node->background_psql('postgres');
$holder->query_safe(q{SELECT count(hoplock_acquire('bound-' || i, 'b', '1 h', session_bound => true)) FROM generate_series(1, 600) AS i});
my $blocker = $node->background_psql('postgres');
$blocker->query_safe('BEGIN');
$blocker->query_safe(q{SELECT count(hoplock_renew('bound-' || i, 'b', '1 h')) FROM generate_series(1, 600) AS i});
$holder->quit;    # its exit cannot end the terms: they are being renewed
sleep 1;
my $wpid = $node->safe_psql('postgres', q{SELECT pid FROM hoplock_workers WHERE datname = 'postgres'});
my $before = cpu_ticks($wpid);
sleep 5;
my $used = cpu_ticks($wpid) - $before;
cmp_ok($used, '<', 50, "the worker keeps trying, without spinning ($used CPU ticks in 5 s)");
$blocker->query_safe('ROLLBACK');
$blocker->quit;
$node->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM hoplock_leases WHERE name LIKE 'bound-%'})
  or die 'the terms of the dead session were never ended';
pass('once the renewals roll back, the worker ends the dead session\'s terms');

# --- Transactions that each begin more terms than the mailbox holds -------------
# (the announcement lag is measured in the server, from the lease row: a
# listener would itself be slowed down by the flood of "acquired" events)
$node->safe_psql('postgres', q{
	CREATE FUNCTION announced_after(n text) RETURNS float LANGUAGE plpgsql AS $$
	BEGIN
		LOOP
			IF (SELECT state FROM hoplock_internal.lease WHERE name = n) = 'x' THEN
				RETURN extract(epoch FROM clock_timestamp()
				               - (SELECT expires_at FROM hoplock_internal.lease WHERE name = n));
			END IF;
			PERFORM pg_sleep(0.002);
		END LOOP;
	END $$;
});
my $flooder = $node->background_psql('postgres', extra_params => [ '-U', 'mallory' ]);
$flooder->query_until(qr/flooding/, q{
	\echo flooding
	DO $$
	BEGIN
		FOR round IN 1..15 LOOP
			PERFORM hoplock_acquire('flood-' || round || '-' || i, 'm', '1 h')
			  FROM generate_series(1, 1100) AS i;
			COMMIT;
		END LOOP;
	END $$;
});
my @lags;
for my $i (1 .. 10)
{
	push @lags, $node->safe_psql('postgres', qq{
		SELECT hoplock_acquire('probe-$i', 'p', '200 ms') IS NOT NULL;
		SELECT announced_after('probe-$i');
	}) =~ /([-\d.e]+)$/;
}
my $worst = (sort { $b <=> $a } @lags)[0] // 99;
is(scalar(@lags), 10, 'every probe lease was announced while the mailbox overflowed');
cmp_ok($worst, '<', 0.25, sprintf('within %.0f ms of its expiry at worst', $worst * 1000));
$flooder->quit;

# --- Names are judged as Unicode whatever the database encoding ------------------
$node->safe_psql('postgres', q{
	CREATE DATABASE latin1db ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
	CREATE DATABASE asciidb ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
});
$node->safe_psql($_, 'CREATE EXTENSION hoplock') foreach ('latin1db', 'asciidb');
($ret, $out, $err) = $node->psql('latin1db',
	q{SET client_encoding = 'LATIN1'; SELECT hoplock_acquire(E'a\x85b', 'o', '1 h')});
like($err, qr/must not contain control characters/, 'LATIN1: a C1 control character (0x85) is refused');
($ret, $out, $err) = $node->psql('latin1db',
	q{SET client_encoding = 'LATIN1'; SELECT generation FROM hoplock_acquire(E'caf\xe9', 'o', '1 h')});
like($out, qr/^\d+$/, 'LATIN1: an accented letter is a name like any other');
is( $node->safe_psql('latin1db',
		q{SET client_encoding = 'LATIN1'; SELECT owner || '/' || generation FROM hoplock_holder(E'caf\xe9')}),
	"o/$out", 'LATIN1: and holds the term it was granted');
($ret, $out, $err) = $node->psql('asciidb', q{SELECT hoplock_acquire(E'a\xffb', 'o', '1 h')});
like($err, qr/must be valid UTF-8/, 'SQL_ASCII: a name that is not valid UTF-8 is refused');
($ret, $out, $err) = $node->psql('asciidb', q{SELECT hoplock_acquire(E'a\xc2\x9bb', 'o', '1 h')});
like($err, qr/must not contain control characters/, 'SQL_ASCII: a C1 control character in UTF-8 is refused');

# The owner of the schema hoplock was installed in cannot drop it with the
# schema (DROP SCHEMA ... CASCADE, DROP OWNED): that would forget every
# lease, and the branch history with it.  (CREATE EXTENSION refuses a
# schema another role owns; a superuser can still hand it over later.)
$node->safe_psql('postgres', q{
	CREATE DATABASE ownerdb;
	CREATE ROLE schema_owner LOGIN;
});
$node->safe_psql('ownerdb', q{
	CREATE SCHEMA owned;
	CREATE EXTENSION hoplock SCHEMA owned;
	ALTER SCHEMA owned OWNER TO schema_owner;
});
my $kept = $node->safe_psql('ownerdb',
	q{SELECT generation FROM owned.hoplock_acquire('kept', 'o', '1 h')});
($ret, $out, $err) = $node->psql('ownerdb', 'DROP SCHEMA owned CASCADE',
	extra_params => [ '-U', 'schema_owner' ]);
like($err, qr/permission denied to drop extension "hoplock"/,
	'the schema owner cannot drop the extension with its schema');
($ret, $out, $err) = $node->psql('ownerdb', 'DROP OWNED BY schema_owner CASCADE',
	extra_params => [ '-U', 'schema_owner' ]);
like($err, qr/permission denied to drop extension "hoplock"/,
	'nor with DROP OWNED');
is($node->safe_psql('ownerdb', q{SELECT generation FROM owned.hoplock_holder('kept')}),
	$kept, 'the lease is still there, with the generation it was granted');

# --- A database owner's stream of ALTER DATABASE --------------------------------
# Each one makes the launcher read pg_database again, no more: it must not
# start a worker to look into every database each time (a stream of them
# took every background worker slot from parallel queries).
# (The postmaster says at DEBUG1 when it starts a background worker; a
# worker looking into a database without hoplock leaves without a word.)
$node->safe_psql('postgres', 'ALTER SYSTEM SET log_min_messages = debug1');
$node->reload;
sleep 2;
$log_offset = -s $node->logfile;
$node->safe_psql('mallorydb',
	join('', map { "ALTER DATABASE mallorydb CONNECTION LIMIT -1;\nALTER DATABASE mallorydb ALLOW_CONNECTIONS true;\n" } 1 .. 100),
	extra_params => [ '-U', 'mallory' ]);
sleep 2;
my @started = (slurp_file($node->logfile, $log_offset) =~ /starting background worker process "hoplock worker/g);
cmp_ok(scalar @started, '<=', 1,
	'200 ALTER DATABASE by a database owner start no stream of workers');

# Statements that need the database alone stop its worker, which is started
# again once the statement is over, whether it worked or not.  A database
# owner running a stream of them, each failing at once, must not make the
# launcher start a stream of workers: for its own database no more than one
# a second, and no worker anywhere else to look into every database again.
$node->safe_psql('postgres', q{
	CREATE DATABASE malloryserved OWNER mallory;
	CREATE TABLE starts (what text, tries int);
	GRANT INSERT ON starts TO mallory;
	CREATE PROCEDURE alone_loop(what text, stmt text, seconds float) LANGUAGE plpgsql AS $$
	DECLARE
		tries int := 0;
		stop timestamptz := clock_timestamp() + seconds * interval '1 s';
	BEGIN
		WHILE clock_timestamp() < stop LOOP
			BEGIN
				EXECUTE stmt;
			EXCEPTION WHEN OTHERS THEN
				NULL;
			END;
			tries := tries + 1;
		END LOOP;
		INSERT INTO starts VALUES (what, tries);
	END $$;
	GRANT EXECUTE ON PROCEDURE alone_loop(text, text, float) TO mallory;
});
$node->safe_psql('malloryserved', 'CREATE SCHEMA hoplock; CREATE EXTENSION hoplock SCHEMA hoplock');
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = 'malloryserved' AND state = 'sleeping'})
  or die 'malloryserved not served';
sleep 1;

# the hoplock workers the postmaster started since log offset $from
sub workers_started
{
	my ($from) = @_;
	my @s = (slurp_file($node->logfile, $from) =~ /starting background worker process "hoplock worker/g);
	return scalar @s;
}

# 4 sessions of a failing ALTER DATABASE ... SET TABLESPACE, for 3 s
$log_offset = -s $node->logfile;
my @movers = map { $node->background_psql('postgres', extra_params => [ '-U', 'mallory' ]) } 1 .. 4;
$_->query_until(qr/started/, "\\echo started\nCALL alone_loop('move', 'ALTER DATABASE malloryserved SET TABLESPACE pg_default', 3);\n")
  foreach @movers;
$_->quit foreach @movers;
my $tries = $node->safe_psql('postgres', q{SELECT sum(tries) FROM starts WHERE what = 'move'});
my $n = workers_started($log_offset);
cmp_ok($n, '<=', 6,
	"$tries failing ALTER DATABASE SET TABLESPACE in 4 sessions for 3 s started $n workers");
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = 'malloryserved' AND state = 'sleeping'})
  or die 'malloryserved not served again';
pass('and its worker is back afterwards');

# a CREATEDB role renaming its database to its own name, for 5 s
$node->safe_psql('postgres', 'ALTER ROLE mallory CREATEDB');
$log_offset = -s $node->logfile;
$node->safe_psql('postgres',
	q{CALL alone_loop('rename', 'ALTER DATABASE malloryserved RENAME TO malloryserved', 5)},
	extra_params => [ '-U', 'mallory' ]);
$tries = $node->safe_psql('postgres', q{SELECT sum(tries) FROM starts WHERE what = 'rename'});
$n = workers_started($log_offset);
cmp_ok($n, '<=', 8, "$tries ALTER DATABASE RENAME by a CREATEDB role in 5 s started $n workers");
$node->safe_psql('postgres', 'ALTER ROLE mallory NOCREATEDB');
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = 'malloryserved' AND state = 'sleeping'})
  or die 'malloryserved not served again';
pass('and its worker is back afterwards');

$node->safe_psql('postgres', 'ALTER SYSTEM RESET log_min_messages');
$node->reload;

# --- Many names kept, and a stream of transactions beginning many terms ---------
# Names released are kept for hoplock.released_retention, against no quota.
# With 200,000 of them, a role that begins 65 terms in one transaction every
# 50 ms must not make the worker read the whole table each time: the
# worker's CPU stays within a small multiple of what the role spends, and
# what its housekeeping costs anyway every 10 s (reading the names kept for
# forgetting, trimming the history: 0.6 s allowed).
$node->safe_psql('postgres', q{
	CREATE PROCEDURE names_kept(n int) LANGUAGE plpgsql AS $$
	BEGIN
		FOR b IN 0 .. n / 1000 - 1 LOOP
			PERFORM hoplock_acquire('kept-' || i, 'm', '1 h')
			  FROM generate_series(b * 1000 + 1, b * 1000 + 1000) AS i;
			PERFORM hoplock_release('kept-' || i, 'm')
			  FROM generate_series(b * 1000 + 1, b * 1000 + 1000) AS i;
			COMMIT;
		END LOOP;
	END $$;
	CREATE PROCEDURE many_terms(seconds float) LANGUAGE plpgsql AS $$
	DECLARE
		stop timestamptz := clock_timestamp() + seconds * interval '1 s';
	BEGIN
		WHILE clock_timestamp() < stop LOOP
			PERFORM hoplock_acquire('many-' || i, 'm', '1 h') FROM generate_series(1, 65) AS i;
			PERFORM hoplock_release('many-' || i, 'm') FROM generate_series(1, 65) AS i;
			COMMIT;
			PERFORM pg_sleep(0.05);
		END LOOP;
	END $$;
	GRANT EXECUTE ON PROCEDURE names_kept(int), many_terms(float) TO mallory;
});
$node->safe_psql('postgres', 'CALL names_kept(200000)', extra_params => [ '-U', 'mallory' ]);
$node->safe_psql('postgres', 'VACUUM hoplock_internal.lease');
# what the names cost the worker (their events, the reading they asked for)
# is done once it has three quiet seconds in a row
$wpid = $node->safe_psql('postgres', q{SELECT pid FROM hoplock_workers WHERE datname = 'postgres'});
my $quiet = 0;
for (1 .. 60)
{
	my $t = cpu_ticks($wpid);
	sleep 1;
	$quiet = cpu_ticks($wpid) - $t <= 2 ? $quiet + 1 : 0;
	last if $quiet == 3;
}
my $many = $node->background_psql('postgres', extra_params => [ '-U', 'mallory' ]);
my $apid = $many->query_safe('SELECT pg_backend_pid()');
$many->query_until(qr/started/, "\\echo started\nCALL many_terms(11);\n");
sleep 1;
my ($w0, $a0) = (cpu_ticks($wpid), cpu_ticks($apid));
sleep 9;
my ($w1, $a1) = (cpu_ticks($wpid), cpu_ticks($apid));
$many->quit;
my ($wused, $aused) = ($w1 - $w0, $a1 - $a0);
cmp_ok($wused, '<=', 3 * $aused + 60,
	"65 terms every 50 ms with 200,000 names kept: the worker used $wused CPU ticks in 9 s, the role $aused");
$node->safe_psql('postgres', q{SELECT hoplock_acquire('after-many', 'p', '200 ms')});
$node->poll_query_until('postgres',
	q{SELECT state = 'x' FROM hoplock_internal.lease WHERE name = 'after-many'})
  or die 'not announced';
pass('and it still announces expiries');

$node->stop;

# --- Copies of a database, each holding a transaction open ----------------------
# Every database that numbers events takes an entry in shared memory.  A
# role with CREATEDB that owns a hoplock database can copy it many times
# and leave, in each copy, a transaction that took an event number: if the
# entries could all be held that way, every other database's term changes
# (and its worker's announcements) would fail.  Entries held so are never
# given away, so there must be more of them than sessions can hold.
my $crowd = PostgreSQL::Test::Cluster->new('crowd');
$crowd->init;
$crowd->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
hoplock.max_databases = 1
max_connections = 20
});
$crowd->start;
$crowd->safe_psql('postgres', q{
	CREATE ROLE victim LOGIN;
	CREATE ROLE mallory LOGIN CREATEDB;
	CREATE DATABASE victimdb;
	CREATE DATABASE mallorydb OWNER mallory;
});
$crowd->safe_psql('victimdb', 'CREATE EXTENSION hoplock');
# (mallory owns public there: a schema of the superuser's)
$crowd->safe_psql('mallorydb', 'CREATE SCHEMA hoplock; CREATE EXTENSION hoplock SCHEMA hoplock');
is($crowd->safe_psql('victimdb', q{SELECT hoplock_acquire('job', 'v', '1 h') IS NOT NULL},
		extra_params => [ '-U', 'victim' ]),
	't', 'the victim database numbers an event');
my @held;
for my $i (1 .. 12)
{
	$crowd->safe_psql('postgres', "CREATE DATABASE copy$i TEMPLATE mallorydb",
		extra_params => [ '-U', 'mallory' ]);
	my $s = $crowd->background_psql("copy$i", on_error_stop => 0,
		extra_params => [ '-U', 'mallory' ]);
	$s->query(q{BEGIN; SELECT hoplock_acquire('x', 'm', '1 h')});
	push @held, $s;
}
($ret, $out, $err) = $crowd->psql('victimdb',
	q{SELECT hoplock_release('job', 'v'), hoplock_acquire('job2', 'v', '1 h') IS NOT NULL},
	extra_params => [ '-U', 'victim' ]);
is($out, 't|t', 'twelve copies holding transactions open do not stop the victim database\'s term changes');
is($err, '', 'and raise nothing there');
$_->quit for @held;
$crowd->stop;
done_testing();
