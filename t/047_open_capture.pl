# What the install check, hoplock_fenced and the worker still let a
# database owner, a CREATEDB role and an ordinary role do (review of
# issue 18's changes).  Each part failed when it was written; the
# partition TRUNCATE is documented (README, Declarative fencing), the
# others are open.  Run with HOPLOCK_OPEN_FINDINGS=1 (make test skips it:
# it fails until they are fixed).
#
# - A schema a database owner made, with an overload planted in it, that a
#   superuser then takes over (ALTER SCHEMA ... OWNER TO, as the refusal's
#   detail invites) passes the check: the planted hoplock_fence(text,
#   integer) stays, and captures a superuser's
#   hoplock.hoplock_fence('job', 2).
# - hoplock installed in "public" (owned by pg_database_owner) of a
#   database a superuser owns passes the check, but pg_database_owner is
#   whoever owns the database later: in a copy a CREATEDB role makes of
#   it, or after ALTER DATABASE ... OWNER TO, that role owns hoplock's
#   schema, plants beside hoplock's functions, or renames the schema and
#   puts another in its place.
# - hoplock_fenced's BEFORE TRUNCATE trigger on a partitioned table is not
#   cloned to its partitions: a stale leader's TRUNCATE of a partition
#   commits.
# - 65 renewals a transaction that move their expiry earlier make the
#   worker read the whole lease table again each time: with 200,000
#   released names it spends many times the CPU of the role that does it.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => 'open findings of issue 18: set HOPLOCK_OPEN_FINDINGS=1'
  unless $ENV{HOPLOCK_OPEN_FINDINGS};

my $node = PostgreSQL::Test::Cluster->new('review');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
max_worker_processes = 16
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE ROLE dbo LOGIN CREATEDB;
	CREATE ROLE mallory LOGIN;
	CREATE DATABASE app OWNER dbo;
});

# Does a superuser's qualified call run a planted function?  The planted
# one records that it ran in a table the planter owns.
my $planted_body = q{
	LANGUAGE plpgsql AS $$BEGIN
	    INSERT INTO public.captured VALUES (current_user);
	END$$};

# --- A planted overload survives a takeover of the schema ---------------------
$node->safe_psql('app', qq{
	CREATE TABLE public.captured (by name);
	GRANT INSERT ON public.captured TO PUBLIC;
	CREATE SCHEMA hoplock;
	GRANT USAGE ON SCHEMA hoplock TO PUBLIC;
	CREATE FUNCTION hoplock.hoplock_fence(text, integer) RETURNS void $planted_body;
}, extra_params => [ '-U', 'dbo' ]);
my ($ret, $out, $err) = $node->psql('app', q{
	ALTER SCHEMA hoplock OWNER TO CURRENT_USER;
	CREATE EXTENSION hoplock SCHEMA hoplock;
});
if ($ret == 0)
{
	$node->psql('app', q{SELECT hoplock.hoplock_fence('job', 2)});
	is($node->safe_psql('app', 'SELECT count(*) FROM public.captured'),
		'0',
		'a function planted in the schema before a superuser took it over captures no call');
}
else
{
	like($err, qr/hoplock_fence|not owned|owned by/,
		'CREATE EXTENSION refuses a schema holding another role\'s functions');
}

# --- pg_database_owner: a copy of a template with hoplock in public -----------
$node->safe_psql('postgres', q{
	CREATE DATABASE tmpl;
	ALTER DATABASE tmpl IS_TEMPLATE true;
});
($ret, $out, $err) = $node->psql('tmpl', 'CREATE EXTENSION hoplock');
if ($ret != 0)
{
	pass('CREATE EXTENSION refuses a schema pg_database_owner owns');
	pass('(nothing to hand over)');
}
else
{
	$node->safe_psql('postgres', 'CREATE DATABASE mine TEMPLATE tmpl',
		extra_params => [ '-U', 'dbo' ]);
	$node->psql('mine', qq{
		CREATE TABLE public.captured (by name);
		GRANT INSERT ON public.captured TO PUBLIC;
		CREATE FUNCTION public.hoplock_fence(text, integer) RETURNS void $planted_body;
	}, extra_params => [ '-U', 'dbo' ]);
	$node->psql('mine', q{SELECT public.hoplock_fence('job', 2)});
	is($node->safe_psql('mine', 'SELECT count(*) FROM public.captured'),
		'0',
		'the owner of a copy of a hoplock template captures no superuser\'s call');

	# handed over after the install
	$node->safe_psql('postgres', 'CREATE DATABASE handed');
	($ret, $out, $err) = $node->psql('handed', 'CREATE EXTENSION hoplock');
	$node->safe_psql('postgres', 'ALTER DATABASE handed OWNER TO dbo');
	$node->psql('handed', qq{
		ALTER SCHEMA public RENAME TO hoplock_real;
		CREATE SCHEMA public;
		GRANT USAGE ON SCHEMA public TO PUBLIC;
		CREATE TABLE public.captured (by name);
		GRANT INSERT ON public.captured TO PUBLIC;
		CREATE FUNCTION public.hoplock_fence(text, bigint) RETURNS void $planted_body;
	}, extra_params => [ '-U', 'dbo' ]);
	$node->psql('handed', q{SELECT public.hoplock_fence('job'::text, 2::bigint)});
	my $captured = $ret != 0 ? '0'
	  : $node->safe_psql('handed', 'SELECT count(*) FROM public.captured');
	is($captured, '0',
		'a database handed over after the install: its new owner cannot rename hoplock\'s schema and capture an exactly typed call');
}

# --- hoplock_fenced: TRUNCATE of a partition ---------------------------------
$node->safe_psql('postgres', 'CREATE SCHEMA hoplock; CREATE EXTENSION hoplock SCHEMA hoplock');
$node->safe_psql('postgres', q{
	CREATE TABLE inv (id int, at date, generation bigint NOT NULL) PARTITION BY RANGE (at);
	CREATE TABLE inv_2026 PARTITION OF inv FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
	CREATE TRIGGER inv_fenced BEFORE INSERT OR UPDATE OR DELETE ON inv
	    FOR EACH ROW EXECUTE FUNCTION hoplock.hoplock_fenced('billing', 'generation');
	CREATE TRIGGER inv_no_truncate BEFORE TRUNCATE ON inv
	    FOR EACH STATEMENT EXECUTE FUNCTION hoplock.hoplock_fenced('billing', 'generation');
});
my $g = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock.hoplock_acquire('billing', 'a', '1 h')});
$node->safe_psql('postgres', "INSERT INTO inv VALUES (1, '2026-06-01', $g)");
$node->safe_psql('postgres', q{
	SELECT hoplock.hoplock_force_release('billing');
	SELECT hoplock.hoplock_acquire('billing', 'b', '1 h');
});
($ret, $out, $err) = $node->psql('postgres', 'TRUNCATE inv');
isnt($ret, 0, 'the stale leader\'s TRUNCATE of the fenced table is refused');
($ret, $out, $err) = $node->psql('postgres', 'TRUNCATE inv_2026');
isnt($ret, 0, 'the stale leader\'s TRUNCATE of one of its partitions is refused too');
is($node->safe_psql('postgres', 'SELECT count(*) FROM inv'), '1',
	'the current term\'s table keeps its rows');

# --- The worker's CPU against the role's: renewals moving expiries earlier ----
$node->safe_psql('postgres', 'GRANT USAGE ON SCHEMA hoplock TO mallory');
$node->safe_psql('postgres', q{
	DO $$BEGIN
	    FOR b IN 0..39 LOOP
	        PERFORM hoplock.hoplock_acquire('n' || i, 'o', '1 min')
	           FROM generate_series(b * 5000 + 1, b * 5000 + 5000) AS i;
	        COMMIT;
	        PERFORM hoplock.hoplock_release('n' || i, 'o')
	           FROM generate_series(b * 5000 + 1, b * 5000 + 5000) AS i;
	        COMMIT;
	    END LOOP;
	END$$;
	SELECT count(hoplock.hoplock_acquire('y' || i, 'o', '86000 s'))
	  FROM generate_series(1, 65) AS i;
}, extra_params => [ '-U', 'mallory' ]);
$node->poll_query_until('postgres',
	q{SELECT state = 'sleeping' FROM hoplock.hoplock_workers WHERE datname = 'postgres'})
  or die 'no worker';
sleep 10;    # the released names' events are dropped meanwhile
my $wpid = $node->safe_psql('postgres',
	q{SELECT pid FROM hoplock.hoplock_workers WHERE datname = 'postgres'});

sub cpu_ticks
{
	my ($pid) = @_;
	my @f = split ' ', slurp_file("/proc/$pid/stat") =~ s/^.*\) //sr;
	return $f[11] + $f[12];
}

my $session = $node->background_psql('postgres',
	extra_params => [ '-U', 'mallory' ]);
my $spid = $session->query_safe('SELECT pg_backend_pid()');
my ($w0, $s0) = (cpu_ticks($wpid), cpu_ticks($spid));
my $start = time();
my $k = 0;
while (time() - $start < 15)
{
	# each round moves the 65 expiries 2 s earlier than the round before
	$k++;
	$session->query_safe(
		"SELECT count(hoplock.hoplock_renew('y' || i, 'o', make_interval(secs => 86000 - 2 * $k))) FROM generate_series(1, 65) AS i"
	);
	select(undef, undef, undef, 0.025);
}
my ($wused, $sused) = (cpu_ticks($wpid) - $w0, cpu_ticks($spid) - $s0);
$session->quit;
note "worker $wused ticks, the renewing session $sused ticks, $k rounds";
cmp_ok($wused, '<=', 3 * ($sused + 10),
	"the worker spends at most a small multiple of the renewing role's CPU ($wused ticks against $sused)"
);

done_testing();
