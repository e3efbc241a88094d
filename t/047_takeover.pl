# What a database owner who made a schema, then saw a superuser take it
# over, can still do; the documented fence of a partitioned table against
# TRUNCATE; and the worker's CPU against a role's renewals (issue 18's
# second review).
#
# - A schema a database owner made, with an overload planted in it, that a
#   superuser then takes over (ALTER SCHEMA ... OWNER TO): CREATE
#   EXTENSION refuses it, naming the planted function, so the planted
#   hoplock_fence(text, integer) never captures a superuser's
#   hoplock.hoplock_fence('job', 2).
# - hoplock_fenced's BEFORE TRUNCATE trigger on a partitioned table is not
#   cloned to its partitions (PostgreSQL clones row triggers only): the
#   README says to give each partition its own, and with it a stale
#   leader's TRUNCATE of a partition is refused.
# - 65 renewals a transaction that move their expiry earlier, with 200,000
#   released names in the table: the worker spends at most a small multiple
#   of the renewing role's CPU.  It takes a minute: HOPLOCK_LONG_TESTS=1.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

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

# A planted function records that it ran in a table the planter owns.
my $planted_body = q{
	LANGUAGE plpgsql AS $$BEGIN
	    INSERT INTO public.captured VALUES (current_user);
	END$$};

# --- A schema taken over with an overload planted in it ---------------------
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
isnt($ret, 0, 'CREATE EXTENSION refuses a schema a superuser took over with another role\'s function in it');
like($err, qr/\(42501\)|cannot be installed in schema "hoplock"/,
	'... as unsafe');
like($err, qr/Role "dbo", which is not a superuser, owns function "hoplock_fence" in the schema/,
	'... naming the planted function and its owner');
is($node->safe_psql('app', q{SELECT count(*) FROM pg_extension WHERE extname = 'hoplock'}),
	'0', 'and nothing is installed');

# --- hoplock_fenced: TRUNCATE of a partition ---------------------------------
$node->safe_psql('postgres', 'CREATE SCHEMA hoplock; CREATE EXTENSION hoplock SCHEMA hoplock');
$node->safe_psql('postgres', q{
	CREATE TABLE inv (id int, at date, generation bigint NOT NULL) PARTITION BY RANGE (at);
	CREATE TABLE inv_2026 PARTITION OF inv FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
	CREATE TRIGGER inv_fenced BEFORE INSERT OR UPDATE OR DELETE ON inv
	    FOR EACH ROW EXECUTE FUNCTION hoplock.hoplock_fenced('billing', 'generation');
	CREATE TRIGGER inv_no_truncate BEFORE TRUNCATE ON inv
	    FOR EACH STATEMENT EXECUTE FUNCTION hoplock.hoplock_fenced('billing', 'generation');
	-- as the README says: each partition its own
	CREATE TRIGGER inv_2026_no_truncate BEFORE TRUNCATE ON inv_2026
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
if (!$ENV{HOPLOCK_LONG_TESTS})
{
	note 'the worker\'s CPU against renewals: set HOPLOCK_LONG_TESTS=1';
	done_testing();
	exit 0;
}
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
