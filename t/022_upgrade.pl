# ALTER EXTENSION hoplock UPDATE from 1.0.0 to 1.2.0 (through 1.1.0) with leases held
# across it: running terms carry over (the same owner renews in the same
# generation, others are contended, fences hold), so do the roles that began
# them (bound to their OIDs now) and the generations (a name's next term
# is above its last 1.0.0 generation, above every one 1.0.0 granted: the
# first value minted after the update begins a branch, reason 'upgrade',
# whose floor rests above the data and the clock); the expiry worker, which waits
# while the SQL objects are 1.0.0's, takes over afterwards and announces the
# terms that lapse -- those that lapsed before the update too, once. Then
# the upgraded extension is the same, object for object, as 1.2.0 installed
# afresh in another database: members, definitions, privileges, comments,
# dependencies, the tables' columns, constraints, indexes and options, the
# extension's configuration tables, and what pg_dump makes of them.
#
# The library refuses to work on 1.0.0's SQL objects, so the 1.0.0
# state is written into hoplock_internal.lease directly, as 1.0.0 wrote it:
# a fresh cluster is on timeline 1, era 0, so a name's generations are 1,
# 2, 3, ...; terms are bound to role names; a session-bound term records
# the backend's pid and start time. (The library leaves a SQL write of its
# tables alone while the extension is not at its version: no branch is
# marked stale by these rows.)
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use Hoplock::Listener;
use Hoplock::Schema;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'hoplock'
});
$node->start;

$node->safe_psql('postgres', q{
	CREATE ROLE leader LOGIN;
	CREATE ROLE bystander LOGIN;
	CREATE DATABASE legacy;
	CREATE DATABASE fresh;
});

# A call's SQLSTATE and message, or 'ok' and its output.
sub call
{
	my ($db, $sql, $role) = @_;
	my ($out, $err) = ('', '');
	my @as = defined $role ? ('-U', $role) : ();
	my $ret = $node->psql($db, "\\set VERBOSITY verbose\n$sql",
		stdout => \$out, stderr => \$err, extra_params => \@as);
	return $ret == 0 ? "ok $out" : ($err =~ /ERROR:\s+([0-9A-Z]{5}): ([^\n]*)/ ? "$1 $2" : $err);
}

sub as_role
{
	my ($db, $role, $sql) = @_;
	return $node->safe_psql($db, $sql, extra_params => [ '-U', $role ]);
}

# --- 1.0.0 ---------------------------------------------------------------------
my $log_offset = -s $node->logfile;
$node->safe_psql('legacy', q{
	CREATE SCHEMA hoplock;
	CREATE EXTENSION hoplock SCHEMA hoplock VERSION '1.0.0';
	GRANT USAGE ON SCHEMA hoplock TO PUBLIC;
});
is($node->safe_psql('legacy', q{SELECT extversion FROM pg_extension WHERE extname = 'hoplock'}),
	'1.0.0', 'hoplock 1.0.0 is installed');
like(call('legacy', q{SELECT hoplock.hoplock_acquire('x', 'y', '1 h')}),
	qr/^55000 extension "hoplock" must be updated/,
	'the library refuses 1.0.0\'s objects with 55000');

# The server restarts (with the new library, as after installing it).
# Until the update the worker waits (README, "Upgrading"): it is not started
# over and over, and the launcher does not report, falsely, that no worker
# could be started for want of background worker slots. The wait lasts long
# enough for a worker that backs off between tries to be backing off for
# seconds: once the update commits it must take over at once all the same.
$node->restart;
sleep 15;
my $log = slurp_file($node->logfile, $log_offset);
my $exits = () = $log =~ /hoplock worker for database "legacy" stopped/g;
cmp_ok($exits, '<=', 2, 'while the objects are 1.0.0\'s, the worker waits instead of exiting and being started again')
  or diag("the worker for database \"legacy\" exited $exits times");
ok($log !~ /could not start a worker for database "legacy"/,
	'... and the launcher does not report the database as left without a worker')
  or diag(join("\n", grep { /WARNING|DETAIL.*worker/ } split /\n/, $log));

# The state 1.0.0 left: one row per name, bound to role names. (Written just
# before the update, so that one term lapses seconds after it: as if its
# last renewal under 1.0.0 had outlasted the restart and the update by that
# much. Nothing can change the rows meanwhile.)
#   scheduler     running, generation 3 (two terms before it)
#   lapsing       running, lapses 6 s from now
#   lapsed        lapsed an hour ago, expiry never announced (no worker then)
#   announced     lapsed and announced, generation 6
#   released      released, generation 5
#   orphan        running, begun by a role since dropped
#   bound         session-bound to a backend that is gone
my $inserted = $node->safe_psql('legacy', q{
	WITH t(now, backend) AS (
		SELECT clock_timestamp(), (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid())
	)
	INSERT INTO hoplock_internal.lease
	     (name, state, owner, owner_role, generation, acquired_at, renewed_at, expires_at, session_pid, session_start)
	SELECT v.* FROM t, LATERAL (VALUES
		('scheduler', 'h'::"char", 'host-a:4242', 'leader'::name, 3::bigint, now - interval '10 min', now - interval '5 s', now + interval '1 h', NULL::int, NULL::timestamptz),
		('lapsing',   'h', 'host-b:4343', 'leader', 2, now - interval '1 min', now, now + interval '6 s', NULL, NULL),
		('lapsed',    'h', 'host-c:1',    'leader', 4, now - interval '2 h', now - interval '90 min', now - interval '1 h', NULL, NULL),
		('announced', 'x', 'host-d:1',    'leader', 6, now - interval '2 h', now - interval '90 min', now - interval '1 h', NULL, NULL),
		('released',  'r', 'host-e:1',    'leader', 5, now - interval '2 h', now - interval '90 min', now - interval '90 min', NULL, NULL),
		('orphan',    'h', 'host-f:1',    'ghost',  1, now - interval '1 min', now, now + interval '1 h', NULL, NULL),
		('bound',     'h', 'host-g:1',    'leader', 8, now - interval '1 min', now, now + interval '1 h', pg_backend_pid(), backend)
	) AS v
	RETURNING name, extract(epoch FROM expires_at);
});
my %expires = map { split /\|/ } split /\n/, $inserted;
is(scalar keys %expires, 7, '1.0.0 state written');

# --- the update ------------------------------------------------------------------
my $listener = Hoplock::Listener->new($node, 'legacy');
my ($ret, $out, $err) = $node->psql('legacy', 'ALTER EXTENSION hoplock UPDATE');
ok($ret == 0 && $err eq '', 'ALTER EXTENSION hoplock UPDATE succeeds, without notices')
  or diag("exit code $ret:\n$err");
if ($ret != 0)
{
	# nothing below can be checked without the update
	$node->stop;
	done_testing();
	exit 0;
}
is($node->safe_psql('legacy', q{SELECT extversion FROM pg_extension WHERE extname = 'hoplock'}),
	'1.2.0', 'the extension is at 1.2.0');

# --- terms held across it --------------------------------------------------------
is($node->safe_psql('legacy', q{SELECT owner || '/' || generation FROM hoplock.hoplock_holder('lapsing')}),
	'host-b:4343/2', 'a term lapsing soon still holds after the update');
is( $node->safe_psql('legacy', q{
		SELECT string_agg(name || ':' || CASE WHEN owner_roleid = 0 THEN '0'
		                                      ELSE owner_roleid::regrole::text END, ' ' ORDER BY name)
		  FROM hoplock_internal.lease}),
	'announced:leader bound:leader lapsed:leader lapsing:leader orphan:0 released:leader scheduler:leader',
	'terms are bound to the OID of the role named, 0 for a role that no longer exists');
is( $node->safe_psql('legacy', q{
		SELECT string_agg(name || '/' || owner || '/' || generation || '/' || role, ' ' ORDER BY name)
		  FROM hoplock.hoplock_leases WHERE NOT expired AND name <> 'bound'}),
	'lapsing/host-b:4343/2/leader orphan/host-f:1/1/ghost scheduler/host-a:4242/3/leader',
	'hoplock_leases lists the running terms, with their owners, generations and roles');

my $old_expiry = $node->safe_psql('legacy',
	q{SELECT expires_at FROM hoplock.hoplock_holder('scheduler')});
is( as_role('legacy', 'leader', qq{
		SELECT owner || '/' || generation || '/' || (expires_at > '$old_expiry'::timestamptz)
		  FROM hoplock.hoplock_renew('scheduler', 'host-a:4242', '2 h', 3)}),
	'host-a:4242/3/true',
	'the holder renews its term, by generation, in the same generation, past its old expiry');
is( as_role('legacy', 'leader', q{
		SELECT generation FROM hoplock.hoplock_acquire('scheduler', 'host-a:4242', '2 h')}),
	'3', 'an acquire by the holder extends its term: same generation');
is( as_role('legacy', 'bystander', q{
		SELECT hoplock.hoplock_acquire('scheduler', 'host-z:1', '1 h') IS NULL}),
	't', 'another owner is contended: NULL');
is( as_role('legacy', 'leader', q{
		SELECT hoplock.hoplock_acquire('scheduler', 'host-z:1', '1 h') IS NULL}),
	't', 'so is another owner of the same role');
like(call('legacy', q{SELECT hoplock.hoplock_renew('scheduler', 'host-a:4242', '1 h', 3)}, 'bystander'),
	qr/^42501 /, 'a role that did not begin the term may not renew it (42501)');
is(call('legacy', q{BEGIN; SELECT hoplock.hoplock_fence('scheduler', 3); COMMIT;}, 'leader'),
	'ok ', 'the held term fences');
like(call('legacy', q{SELECT hoplock.hoplock_fence('scheduler', 2)}, 'leader'),
	qr/^55P03 /, 'an earlier generation is fenced off (55P03)');
like(call('legacy', q{SELECT hoplock.hoplock_renew('orphan', 'host-f:1', '1 h')}, 'leader'),
	qr/^42501 /, 'a term of a role that no longer exists: not renewable by another role');
is($node->safe_psql('legacy', q{SELECT generation FROM hoplock.hoplock_renew('orphan', 'host-f:1', '1 h', 1)}),
	'1', '... but by a superuser, in its generation');

# --- generations -----------------------------------------------------------------
# The greatest generation 1.0.0 granted here: bound's 8.
my $legacy_max = 8;

# Is generation $g a 1.2 value above $above (and above every 1.0.0
# generation), minted on a branch begun by the update: its tag, c at or
# above its floor?
sub after_update
{
	my ($g, $above) = @_;
	return 'not a generation: ' . ($g // 'undef') unless defined $g && $g =~ /^\d+$/;
	return $node->safe_psql('legacy', qq{
		SELECT $g > $above AND $g > $legacy_max AND EXISTS (
			SELECT FROM hoplock_internal.branch AS b
			 WHERE b.reason IN ('upgrade', 'start') AND b.tag = ($g & 2047) AND ($g >> 11) >= b.floor)});
}

my %next;
$next{released} = as_role('legacy', 'leader', q{SELECT generation FROM hoplock.hoplock_acquire('released', 'host-n:1', '1 h')});
is(after_update($next{released}, 5), 't',
	"a released name's next term ($next{released}): above its last 1.0.0 generation (5), on the update's branch");
$next{announced} = as_role('legacy', 'leader', q{SELECT generation FROM hoplock.hoplock_acquire('announced', 'host-n:1', '1 h')});
is(after_update($next{announced}, 6), 't',
	"so is a lapsed one's ($next{announced} > 6)");
$next{'new-name'} = as_role('legacy', 'leader', q{SELECT generation FROM hoplock.hoplock_acquire('new-name', 'host-n:1', '1 h')});
is(after_update($next{'new-name'}, 0), 't',
	"a name never used starts above every generation 1.0.0 granted ($next{'new-name'} > $legacy_max)");
# The first value minted after the update (the renewal's row version above)
# began a branch: reason 'upgrade' (a sibling begun at once by the worker
# is one too), no parent, on this cluster, database and timeline; its fork
# point is the greatest event number in the data (1.0.0 kept none: 0), its
# floor above every 1.0.0 value. No other branch: nothing wrote the tables.
is( $node->safe_psql('legacy', qq{
		SELECT string_agg(DISTINCT b.reason, ',') || '|'
		       || bool_and(b.parent_tag IS NULL AND b.system_identifier = s.system_identifier
		                   AND b.database = d.oid AND b.timeline = 1) || '|'
		       || bool_and(b.fork_point = 0 AND b.floor > $legacy_max)
		  FROM hoplock_internal.branch AS b, pg_control_system() AS s, pg_database AS d
		 WHERE d.datname = current_database()}),
	'upgrade|true|true',
	'the first term after the update began a branch: reason upgrade, this cluster, database and timeline 1, above 1.0.0\'s values');

# --- the expiry worker takes over ------------------------------------------------
ok( $node->poll_query_until('legacy', q{
		SELECT pid IS NOT NULL AND state IN ('sleeping', 'announcing', 'scanning')
		  FROM hoplock.hoplock_workers WHERE datname = 'legacy'}),
	'the database has a running expiry worker after the update')
  or diag($node->safe_psql('legacy', q{SELECT * FROM hoplock.hoplock_workers}));

my $events = $listener->collect($expires{lapsing} - time() + 10,
	sub { grep { $_->{event} eq 'expired' && $_->{name} eq 'lapsing' } @{ $_[0] } });
# the ends of terms (the acquires above announced 'acquired' besides)
my @ends = map { "$_->{event} $_->{name} $_->{generation}" }
  grep { $_->{event} ne 'acquired' } @$events;
is_deeply([ sort @ends ],
	[ 'expired lapsed 4', 'expired lapsing 2', 'released bound 8' ],
	'the worker announces the term that lapsed before the update, the one that lapsed after it, and ends the term of the session that is gone')
  or diag(explain $events);
my ($lapsing) = grep { $_->{event} eq 'expired' && $_->{name} eq 'lapsing' } @$events;
SKIP:
{
	skip 'no expired event for "lapsing"', 2 unless $lapsing;
	my $lag = $lapsing->{received_at} - Hoplock::Listener::epoch($lapsing->{expires_at});
	cmp_ok($lag, '>=', -0.05, 'not announced before its expires_at');
	cmp_ok($lag, '<', 2, 'announced promptly after its expires_at')
	  or diag("lag $lag s");
}

$listener->reset;
$next{lapsing} = as_role('legacy', 'bystander', q{SELECT generation FROM hoplock.hoplock_acquire('lapsing', 'host-y:1', '1 h')});
is(after_update($next{lapsing}, 2), 't',
	"the lapsed term is taken over, above its generation ($next{lapsing} > 2)");
$next{lapsed} = as_role('legacy', 'bystander', q{SELECT generation FROM hoplock.hoplock_acquire('lapsed', 'host-y:1', '1 h')});
is(after_update($next{lapsed}, 4), 't',
	"so is the one that lapsed before the update ($next{lapsed} > 4)");
$next{bound} = as_role('legacy', 'bystander', q{SELECT generation FROM hoplock.hoplock_acquire('bound', 'host-y:1', '1 h')});
is(after_update($next{bound}, 8), 't',
	"and the ended session-bound one ($next{bound} > 8)");
$events = $listener->collect(3, sub { @{ $_[0] } >= 3 });
$events = $listener->collect(0.5);
# the payload's generation as JSON decodes it (DBD::Pg's listener: Perl's
# 64-bit integers, exact)
is_deeply([ sort map { "$_->{event} $_->{name} $_->{generation}" } @$events ],
	[ "acquired bound $next{bound}", "acquired lapsed $next{lapsed}", "acquired lapsing $next{lapsing}" ],
	'the takeovers announce no second end of the terms the worker ended');
like(call('legacy', q{SELECT hoplock.hoplock_fence('lapsing', 2)}, 'bystander'),
	qr/^55P03 /, 'a fence of the 1.0.0 term of a name taken over since is refused (55P03)');

is( $node->safe_psql('legacy', q{
		SELECT string_agg(name || '/' || generation || '/' || how, ' ' ORDER BY name)
		  FROM hoplock.hoplock_history WHERE ended_at IS NOT NULL}),
	'bound/8/session ended lapsed/4/expired lapsing/2/expired',
	'the history records how the terms held across the update ended');
# The running terms are the lease rows in state h: each shown once, with
# ended_at NULL, those begun before the update too.
my ($shown, $running, $twice) = split /\|/, $node->safe_psql('legacy', q{
	SELECT (SELECT count(*) FROM hoplock.hoplock_history WHERE ended_at IS NULL),
	       (SELECT count(*) FROM hoplock_internal.lease WHERE state = 'h'),
	       (SELECT count(*) FROM (SELECT name, generation FROM hoplock.hoplock_history
	                               GROUP BY name, generation HAVING count(*) > 1) AS d)});
cmp_ok($running, '>', 0, "terms run across the update ($running)");
is($shown, $running, 'the history shows each running term as running');
is($twice, '0', 'and no term twice');
my $seq = $node->safe_psql('legacy', q{
	SELECT string_agg(event || ' ' || name || ' ' || generation, ', ' ORDER BY seq)
	  FROM hoplock.hoplock_events(0) WHERE name = 'lapsing'});
is($seq, "expired lapsing 2, acquired lapsing $next{lapsing}",
	'hoplock_events: the end of the term held across the update, then the next term');

is($node->safe_psql('legacy', q{SELECT owner || '/' || generation FROM hoplock.hoplock_holder('scheduler')}),
	'host-a:4242/3', 'the renewed term still holds');

# --- the upgraded extension is 1.2.0 as installed afresh -------------------------
$node->safe_psql('fresh', q{
	CREATE SCHEMA hoplock;
	CREATE EXTENSION hoplock SCHEMA hoplock;
	GRANT USAGE ON SCHEMA hoplock TO PUBLIC;
});
my $fresh = Hoplock::Schema::fingerprint($node, 'fresh');
my $upgraded = Hoplock::Schema::fingerprint($node, 'legacy');
like($fresh, qr/^== member table hoplock_internal\.lease$/m, 'the description lists the extension\'s members');
my $diff = Hoplock::Schema::diff($fresh, $upgraded, 'installed-1.2.0', 'upgraded-from-1.0.0');
ok($diff eq '', 'the upgraded extension is identical to a fresh install of 1.2.0')
  or diag($diff);

# The comparison sees each kind of difference (every change below is rolled
# back): a mutation of the fresh install must show in its description.
my @mutations = (
	[ 'a member fewer',            q{ALTER EXTENSION hoplock DROP FUNCTION hoplock.hoplock_forget(text)} ],
	[ 'an object outside the extension', q{CREATE FUNCTION hoplock_internal.extra() RETURNS int LANGUAGE sql AS 'SELECT 1'} ],
	[ 'a function\'s definition',  q{ALTER FUNCTION hoplock.hoplock_holder(text) PARALLEL SAFE} ],
	[ 'a function\'s privileges',  q{GRANT EXECUTE ON FUNCTION hoplock.hoplock_forget(text) TO PUBLIC} ],
	[ 'the schema\'s privileges',  q{GRANT USAGE ON SCHEMA hoplock_internal TO PUBLIC} ],
	[ 'a table\'s privileges',     q{GRANT SELECT ON hoplock_internal.floor TO PUBLIC} ],
	[ 'a view\'s definition',      q{CREATE OR REPLACE VIEW hoplock.hoplock_history WITH (security_barrier) AS SELECT h.name, h.owner, h.role, h.generation, h.acquired_at, h.ended_at, h.how, 0::bigint AS refused_writes, NULL::integer AS slot FROM hoplock_internal.history AS h WHERE h.how IS DISTINCT FROM 'x'} ],
	[ 'a view\'s options',         q{ALTER VIEW hoplock.hoplock_leases RESET (security_barrier)} ],
	[ 'a table\'s options',        q{ALTER TABLE hoplock_internal.lease RESET (vacuum_truncate)} ],
	[ 'a column',                  q{ALTER TABLE hoplock_internal.history ALTER COLUMN how SET NOT NULL} ],
	[ 'a column\'s type',          q{ALTER TABLE hoplock_internal.history ALTER COLUMN end_seq TYPE numeric} ],
	[ 'a column\'s default',       q{ALTER TABLE hoplock_internal.history ALTER COLUMN end_seq SET DEFAULT 0} ],
	[ 'a constraint',              q{ALTER TABLE hoplock_internal.floor ADD CHECK (forgotten < 10)} ],
	[ 'an index',                  q{CREATE INDEX ON hoplock_internal.lease (expires_at)} ],
	[ 'a trigger',                 q{CREATE TRIGGER t AFTER UPDATE ON hoplock_internal.history FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()} ],
	[ 'a sequence',                q{ALTER SEQUENCE hoplock_internal.event_seq CACHE 10} ],
	[ 'a type',                    q{ALTER TYPE hoplock.hoplock_lease ADD ATTRIBUTE extra int} ],
	[ 'a comment',                 q{COMMENT ON FUNCTION hoplock.hoplock_acquire(text, text, interval, boolean, text, interval, integer) IS NULL} ],
	[ 'a column comment',          q{COMMENT ON COLUMN hoplock_internal.lease.owner_roleid IS NULL} ],
	[ 'the schema comment',        q{COMMENT ON SCHEMA hoplock_internal IS 'x'} ],
	[ 'a configuration table\'s condition', q{UPDATE pg_extension SET extcondition[1] = 'WHERE true' WHERE extname = 'hoplock'} ],
	[ 'a configuration table fewer', q{UPDATE pg_extension SET extconfig = extconfig[2:], extcondition = extcondition[2:] WHERE extname = 'hoplock'} ],
	[ 'the extension\'s version',  q{UPDATE pg_extension SET extversion = '1.0.9' WHERE extname = 'hoplock'} ],
	[ 'initial privileges',        q{DELETE FROM pg_init_privs WHERE classoid = 'pg_namespace'::regclass AND objoid = 'hoplock_internal'::regnamespace} ],
);
foreach my $m (@mutations)
{
	my ($what, $sql) = @$m;
	my $mutated = Hoplock::Schema::fingerprint($node, 'fresh', $sql);
	isnt($mutated, $fresh, "the comparison would see $what");
}
is(Hoplock::Schema::fingerprint($node, 'fresh'), $fresh, 'the mutations were rolled back');

# What pg_dump makes of the two: the same.
my %schema_dump;
foreach my $db ('fresh', 'legacy')
{
	my ($stdout, $stderr) = ('', '');
	IPC::Run::run([ 'pg_dump', '--schema-only', '-d', $node->connstr($db) ],
		'>', \$stdout, '2>', \$stderr)
	  or die "pg_dump $db: $stderr";
	$stdout =~ s/^--.*\n//mg;
	$stdout =~ s/^\\(un)?restrict .*\n//mg;    # a random key per run
	$schema_dump{$db} = $stdout;
}
$diff = Hoplock::Schema::diff($schema_dump{fresh}, $schema_dump{legacy},
	'pg_dump-installed', 'pg_dump-upgraded');
ok($diff eq '', 'pg_dump --schema-only prints the same for both')
  or diag($diff);

$listener->disconnect;
$node->stop;
done_testing();
