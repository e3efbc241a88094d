# Debian's prometheus-postgres-exporter with the queries file shipped in
# examples/prometheus: started against a scratch server, scraped over the
# loopback, it exports the leases by state, the terms of the last hour,
# hoplock_stats' counters and the workers; and for the names the operator
# lists (hoplock_exporter.names), who leads each, the generation, the
# seconds left and its terms of the last hour.  A role that makes 50,000
# names with 200-byte owners does not make a scrape any bigger: it stays a
# bounded number of series, none naming its leases or owners.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use HTTP::Tiny;
use IPC::Run;
use Time::HiRes qw(time);
use Cwd qw(abs_path);

my $exporter = '/usr/bin/prometheus-postgres-exporter';
plan skip_all => "$exporter is not installed" unless -x $exporter;

my $node = PostgreSQL::Test::Cluster->new('prometheus');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
max_locks_per_transaction = 256
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE SCHEMA hoplock;
	CREATE EXTENSION hoplock SCHEMA hoplock;
});
# the counters live in the database's worker slot: calls made before the
# launcher has given the database one are not counted
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock.hoplock_workers
	   WHERE datname = 'postgres' AND state <> 'unserved'})
  or die 'no worker';
$node->safe_psql('postgres', q{
	SELECT hoplock.hoplock_acquire('billing-scheduler', 'host-a:4242', '1 h');
	SELECT hoplock.hoplock_acquire('billing-scheduler', 'host-b:4343', '1 h');
	SELECT hoplock.hoplock_acquire('mailer', 'host-b:4343', '10 min');
	SELECT hoplock.hoplock_release('mailer', 'host-b:4343');
	SELECT hoplock.hoplock_acquire('mailer', 'host-c:4444', '10 min');
	SELECT hoplock.hoplock_acquire('unlisted', 'host-d:4545', '10 min');
	SELECT hoplock.hoplock_acquire('listed-free', 'host-d:4545', '10 min');
	SELECT hoplock.hoplock_release('listed-free', 'host-d:4545');
	-- a zombie write: a fence by mailer's first term, refused
	DO $$
	BEGIN
		PERFORM hoplock.hoplock_fence('mailer', (SELECT min(generation) FROM hoplock.hoplock_history WHERE name = 'mailer'));
	EXCEPTION WHEN lock_not_available THEN NULL;
	END $$;
});
# the names with series of their own, as an operator lists them (the
# exporter's role, in its database)
$node->safe_psql('postgres', q{
	ALTER ROLE CURRENT_USER IN DATABASE postgres
	  SET hoplock_exporter.names = 'billing-scheduler, mailer,listed-free,,never-used';
});
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock.hoplock_stats})
  or die 'no counters';

my $port = PostgreSQL::Test::Cluster::get_free_port();
my $dsn = sprintf('postgresql://%s@:%d/postgres?host=%s&sslmode=disable',
	scalar(getpwuid($<)), $node->port, $node->host);
my ($out, $err) = ('', '');
my $h = IPC::Run::start(
	[ $exporter, "--web.listen-address=127.0.0.1:$port",
	  '--extend.query-path=' . abs_path('examples/prometheus/queries.yaml'),
	  '--disable-settings-metrics' ],
	'>', \$out, '2>', \$err,
	init => sub { $ENV{DATA_SOURCE_NAME} = $dsn });

# One scrape: its body, and the seconds it took.
sub scrape
{
	my $t0 = time();
	my $r = HTTP::Tiny->new(timeout => 300)->get("http://127.0.0.1:$port/metrics");
	return ($r->{success} ? $r->{content} : '', time() - $t0);
}

my $metrics = '';
for (1 .. 100)
{
	my ($content) = scrape();
	if ($content =~ /hoplock_lease_held/)
	{
		$metrics = $content;
		last;
	}
	select(undef, undef, undef, 0.2);
}
ok($metrics ne '', 'the exporter serves hoplock metrics') or diag($err);

like($metrics, qr/^hoplock_lease_held\{[^}]*name="billing-scheduler"[^}]*\} 1$/m,
	'billing-scheduler is held');
like($metrics, qr/^hoplock_lease_owner_info\{[^}]*name="billing-scheduler"[^}]*owner="host-a:4242"[^}]*\} 1$/m,
	'who leads billing-scheduler');
like($metrics, qr/^hoplock_lease_held\{[^}]*name="listed-free"[^}]*\} 0$/m,
	'a listed name that is free');
like($metrics, qr/^hoplock_lease_held\{[^}]*name="never-used"[^}]*\} 0$/m,
	'a listed name that never was');
unlike($metrics, qr/^hoplock_lease_owner_info\{[^}]*name="(?:listed-free|never-used)"/m,
	'no owner for a free name');
unlike($metrics, qr/^hoplock_(?!lease_owner_info\{)\w+\{[^}]*owner=/m,
	'no owner label but on the owner series');
unlike($metrics, qr/unlisted|host-d:4545/, 'no series for an unlisted name');
like($metrics, qr/^hoplock_leases_count\{[^}]*state="held"[^}]*\} 3$/m,
	'the leases held');
like($metrics, qr/^hoplock_leases_count\{[^}]*state="expired"[^}]*\} 0$/m,
	'the leases lapsed, not yet announced');
like($metrics, qr/^hoplock_terms_last_hour(?:\{[^}]*\})? 5$/m, 'terms begun in the last hour');
like($metrics, qr/^hoplock_terms_max_per_name_last_hour(?:\{[^}]*\})? 2$/m,
	'the most by one name');
# A gauge is a float64: the generation (about 1.7e18) comes out rounded to
# 53 bits, 256 apart at most, while one name's generations on one branch
# are at least 2048 apart. It is the float of mailer's running term, the
# second (above the first, which was released), as the server rounds it.
my ($gauge) = $metrics =~ /^hoplock_lease_generation\{[^}]*name="mailer"[^}]*\} (\S+)$/m;
is( defined $gauge && $gauge =~ /^[0-9.e+]+$/ && $node->safe_psql('postgres', qq{
		SELECT l.generation::float8 = '$gauge'::float8
		       AND '$gauge'::float8 > (SELECT max(generation)::float8 FROM hoplock.hoplock_history
		                                WHERE name = 'mailer' AND generation < l.generation)
		  FROM hoplock.hoplock_leases AS l WHERE l.name = 'mailer' AND l.owner = 'host-c:4444'}),
	't', 'the generation of mailer\'s term')
  or diag($gauge // 'none');
my ($left) = $metrics =~ /^hoplock_lease_seconds_left\{[^}]*name="billing-scheduler"[^}]*\} (\S+)$/m;
ok(defined $left && $left > 3500 && $left <= 3600, 'seconds left of a 1 h term')
  or diag($left // 'none');
unlike($metrics, qr/owner="host-b:4343"/, 'no row for a contender or a released term');
like($metrics, qr/^hoplock_stats_terms_begun\{[^}]*datname="postgres"[^}]*\} 5$/m,
	'terms begun, from hoplock_stats');
like($metrics, qr/^hoplock_stats_contended\{[^}]*datname="postgres"[^}]*\} 1$/m,
	'contended calls');
like($metrics, qr/^hoplock_stats_releases\{[^}]*datname="postgres"[^}]*\} 2$/m,
	'releases');
like($metrics, qr/^hoplock_worker_running\{[^}]*datname="postgres"[^}]*\} 1$/m,
	'the worker runs');
like($metrics, qr/^hoplock_stats_fences_refused\{[^}]*datname="postgres"[^}]*\} 1$/m,
	'zombie writes: the fence refused to a term that no longer held its lease');
like($metrics, qr/^hoplock_stats_writes_refused\{[^}]*datname="postgres"[^}]*\} 0$/m,
	'... and no fenced row');
like($metrics, qr/^hoplock_lease_refused_writes\{[^}]*name="mailer"[^}]*\} 1$/m,
	'... counted for the listed name');
like($metrics, qr/^hoplock_lease_refused_writes\{[^}]*name="billing-scheduler"[^}]*\} 0$/m,
	'... and not for another');
like($metrics, qr/^hoplock_lease_terms_last_hour\{[^}]*name="mailer"[^}]*\} 2$/m,
	'terms of a name in the last hour, from the history');
unlike($metrics, qr/^pg_exporter_user_queries_load_error\{[^}]*\} 1$/m,
	'the queries file loads without error');

# --- 50,000 names of one role, with 200-byte owners ----------------------------

# hoplock.max_names_per_role is 0 (no limit) by default: an ordinary role
# may hold as many names as it likes, each with an owner of its choosing.
sub series
{
	my ($body) = @_;
	return scalar(() = $body =~ /^hoplock_/mg);
}
my ($quiet, $quiet_secs) = scrape();
my $series_before = series($quiet);
$node->safe_psql('postgres', q{CREATE ROLE mallory LOGIN; GRANT USAGE ON SCHEMA hoplock TO mallory});
my $flood = '';
$flood .= "SELECT count(hoplock.hoplock_acquire('flood-' || i, repeat('o', 194) || lpad(i::text, 6, '0'), '1 h'))"
  . " FROM generate_series($_ * 1000 + 1, ($_ + 1) * 1000) AS i;\n"
  for 0 .. 49;
my ($fout, $ferr) = ('', '');
IPC::Run::run(
	[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-U', 'mallory',
	  '-d', $node->connstr('postgres') ],
	'<', \$flood, '>', \$fout, '2>', \$ferr)
  or die "the flood failed: $ferr";
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM hoplock.hoplock_leases WHERE role = 'mallory' AND length(owner) = 200}),
	50000, 'one role holds 50,000 names with 200-byte owners');

my ($flooded, $secs) = scrape();
my $nseries = series($flooded);
note(sprintf('a scrape: %d hoplock series, %d bytes, %.2f s; before the names: %d, %d bytes, %.2f s',
	$nseries, length($flooded), $secs, $series_before, length($quiet), $quiet_secs));
ok($flooded =~ /^hoplock_stats_terms_begun/m, 'the exporter still serves hoplock metrics')
  or diag($err);
cmp_ok($nseries, '<', 1000, 'the hoplock series stay bounded');
cmp_ok(length($flooded), '<', 1024 * 1024, 'the scrape stays small');
ok($flooded !~ /flood-|o{194}/, 'no series names a lease or an owner of that role');

$h->kill_kill;
$h->finish;
# The alert rules: valid, and firing on zombie writes (promtool's unit
# test, examples/prometheus/alerts_test.yaml)
SKIP:
{
	skip 'promtool is not installed', 2 unless -x '/usr/bin/promtool';
	my ($pout, $perr) = ('', '');
	ok(IPC::Run::run([ '/usr/bin/promtool', 'check', 'rules', 'examples/prometheus/alerts.yaml' ],
			'>', \$pout, '2>', \$perr), 'promtool: the alert rules are valid')
	  or diag("$pout$perr");
	ok(IPC::Run::run([ '/usr/bin/promtool', 'test', 'rules', 'alerts_test.yaml' ],
			'>', \$pout, '2>', \$perr, init => sub { chdir 'examples/prometheus' }),
		'promtool: they fire on zombie writes and leadership flapping, and only then')
	  or diag("$pout$perr");
}

$node->stop;
done_testing();
