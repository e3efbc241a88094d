# The expiry worker: announces each lapsed term once, within milliseconds,
# leaves renewed terms alone, sleeps without CPU when nothing is due, and
# survives SIGTERM, errors and reloads.
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use Hoplock::Listener;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'hoplock'
hoplock.naptime = 1
hoplock.log_events = on
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

# --- Started, with a log line naming the database ---------------------------
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = 'postgres' AND pid IS NOT NULL})
  or die 'no worker';
ok($node->log_contains('hoplock launcher started'), 'the launcher logged its start');
ok($node->log_contains('hoplock worker for database "postgres" started'),
	'the worker logged its start, with the database name');
is($node->safe_psql('postgres', q{SELECT backend_type FROM pg_stat_activity WHERE pid = (SELECT pid FROM hoplock_workers)}),
	'hoplock worker', 'pg_stat_activity names it');

# --- One lease: expired once, by the worker ---------------------------------
my $listener = Hoplock::Listener->new($node, 'postgres');
$node->safe_psql('postgres', q{SELECT hoplock_acquire('one', 'a', '200 ms')});
my $events = $listener->collect(5, sub { grep { $_->{event} eq 'expired' } @{ $_[0] } });
my $one1 = $node->safe_psql('postgres', q{SELECT generation FROM hoplock_read('one')});
is_deeply([ map { "$_->{event} $_->{name} $_->{generation}" } @$events ],
	[ "acquired one $one1", "expired one $one1" ], 'acquired, then expired, with nobody calling');
$listener->reset;
$listener->collect(1);
is(scalar @{ $listener->{events} }, 0, 'expired only once');
is($node->safe_psql('postgres', q{SELECT state FROM hoplock_internal.lease WHERE name = 'one'}),
	'x', 'the row says the expiry was announced');
# a new acquire does not announce it again
$node->safe_psql('postgres', q{SELECT hoplock_acquire('one', 'b', '1 h')});
$events = $listener->collect(2, sub { @{ $_[0] } >= 1 });
my $one2 = $node->safe_psql('postgres', q{SELECT generation FROM hoplock_read('one')});
cmp_ok($one2, '>', $one1, 'the next term of "one" has a greater generation');
is_deeply([ map { "$_->{event} $_->{generation}" } @$events ], [ "acquired $one2" ],
	'the next acquire sends no second expired');
$listener->reset;

# --- Renewed terms are not announced ----------------------------------------
# (renewed every 100 ms with a 1 s ttl, so that a loaded machine starting
# each psql late still renews in time; every renewal must succeed)
$node->safe_psql('postgres', q{SELECT hoplock_acquire('renewed', 'a', '1 s')});
my $renewed = 0;
for (1 .. 15)
{
	usleep(100_000);
	$renewed++ if $node->safe_psql('postgres',
		q{SELECT hoplock_renew('renewed', 'a', '1 s') IS NOT NULL}) eq 't';
}
is($renewed, 15, 'every renewal in time succeeded');
$events = $listener->collect(0.1);
is(scalar(grep { $_->{event} eq 'expired' } @$events), 0,
	'a term renewed in time is never announced');
$events = $listener->collect(3, sub { grep { $_->{event} eq 'expired' } @{ $_[0] } });
is(scalar(grep { $_->{event} eq 'expired' && $_->{name} eq 'renewed' } @$events), 1,
	'once the renewals stop, it is announced');
$listener->reset;

# --- A renewal with a shorter ttl wakes the worker earlier ------------------
$node->safe_psql('postgres', q{SELECT hoplock_acquire('shortened', 'a', '1 h')});
my $t0 = time();
$node->safe_psql('postgres', q{SELECT hoplock_renew('shortened', 'a', '200 ms')});
$events = $listener->collect(5, sub { grep { $_->{event} eq 'expired' } @{ $_[0] } });
ok((grep { $_->{event} eq 'expired' && $_->{name} eq 'shortened' } @$events) && time() - $t0 < 2,
	'a renewal to an earlier expiry is announced at the new expiry');
$listener->reset;

# --- Latency with 1,000 leases held (a sanity bound; bench/ measures) --------
$node->safe_psql('postgres', q{
	SELECT count(hoplock_acquire('held-' || i, 'a', '1 h')) FROM generate_series(1, 1000) AS i;
});
$node->safe_psql('postgres', q{
	SELECT count(hoplock_acquire('lat-' || i, 'a', (i * 20 || ' ms')::interval))
	  FROM generate_series(1, 50) AS i;
});
$events = $listener->collect(10,
	sub { (grep { $_->{event} eq 'expired' } @{ $_[0] }) >= 50 });
my @lags = map { ($_->{received_at} - Hoplock::Listener::epoch($_->{expires_at})) * 1000 }
  grep { $_->{event} eq 'expired' } @$events;
is(scalar @lags, 50, 'all 50 expiries announced among 1,000 held leases');
diag(sprintf('expired latency over %d events: p50 %.2f ms, p99 %.2f ms, max %.2f ms',
	scalar @lags, Hoplock::Listener::percentile(50, @lags),
	Hoplock::Listener::percentile(99, @lags), Hoplock::Listener::percentile(100, @lags)));
cmp_ok(Hoplock::Listener::percentile(99, @lags), '<', 1000,
	'sanity: p99 of the expired latency is under a second');
cmp_ok((sort { $a <=> $b } @lags)[0], '>=', -1, 'never announced before expires_at');
$listener->reset;

# --- More running terms than the schedule holds ------------------------------
# It keeps the earliest: later ones make room for a new earlier one, and
# those left out are found again when the schedule reaches them.
$node->safe_psql('postgres', q{ALTER SYSTEM SET hoplock.max_tracked_leases = 100; SELECT pg_reload_conf()});
$node->poll_query_until('postgres', q{SELECT leases_tracked <= 100 FROM hoplock_workers})
  or die 'capacity not applied';
$node->safe_psql('postgres', q{
	SELECT count(hoplock_acquire('cap-late-' || i, 'a', '1 h')) FROM generate_series(1, 300) AS i;
	SELECT count(hoplock_acquire('cap-soon-' || i, 'a', (2000 + 10 * i || ' ms')::interval)) FROM generate_series(1, 150) AS i;
	SELECT count(hoplock_acquire('cap-first-' || i, 'a', (300 + 10 * i || ' ms')::interval)) FROM generate_series(1, 20) AS i;
});
$events = $listener->collect(15,
	sub { (grep { $_->{event} eq 'expired' && $_->{name} =~ /^cap-/ } @{ $_[0] }) >= 170 });
my @cap = grep { $_->{event} eq 'expired' && $_->{name} =~ /^cap-/ } @$events;
is(scalar @cap, 170, 'with a schedule of 100, all 170 lapsing terms among 1,470 are announced');
my @first_lags = map { ($_->{received_at} - Hoplock::Listener::epoch($_->{expires_at})) * 1000 }
  grep { $_->{name} =~ /^cap-first-/ } @cap;
cmp_ok((sort { $a <=> $b } @first_lags)[-1], '<', 500,
	'the earliest were announced on time: they pushed later ones out of the schedule');
cmp_ok($node->safe_psql('postgres', 'SELECT leases_tracked FROM hoplock_workers'), '<=', 100,
	'and it never tracked more than its capacity');
$listener->reset;

# More terms than the schedule holds, all with the same deadline (written
# straight into the table, which no call can do): those it keeps are done
# before it reads the table again for the rest, and each is announced once.
$node->safe_psql('postgres', q{
	SELECT count(hoplock_acquire('tie-' || i, 'a', '1 h')) FROM generate_series(1, 250) AS i;
	UPDATE hoplock_internal.lease SET expires_at = now() + '1 s' WHERE name LIKE 'tie-%';
	SELECT pg_terminate_backend(pid) FROM hoplock_workers;
});
$events = $listener->collect(15,
	sub { (grep { $_->{event} eq 'expired' && $_->{name} =~ /^tie-/ } @{ $_[0] }) >= 250 });
my %ties;
$ties{ $_->{name} }++ for grep { $_->{event} eq 'expired' && $_->{name} =~ /^tie-/ } @$events;
is(scalar(keys %ties), 250, 'with a schedule of 100, 250 terms sharing one deadline are all announced');
is(scalar(grep { $_ != 1 } values %ties), 0, 'each of them once');
$node->safe_psql('postgres', q{ALTER SYSTEM RESET hoplock.max_tracked_leases; SELECT pg_reload_conf()});
$listener->reset;

# --- Idle: no CPU ------------------------------------------------------------
my $wpid = $node->safe_psql('postgres', 'SELECT pid FROM hoplock_workers');
$node->safe_psql('postgres', q{ALTER SYSTEM SET hoplock.naptime = '60s'; SELECT pg_reload_conf()});
sleep 1;
sub cpu_ticks
{
	my @f = split ' ', slurp_file("/proc/$_[0]/stat") =~ s/^.*\) //sr;
	return $f[11] + $f[12];    # utime + stime
}
my $ticks = cpu_ticks($wpid);
sleep 3;
cmp_ok(cpu_ticks($wpid) - $ticks, '<=', 1,
	'with 1,000 leases held and none due, the worker used no CPU for 3 s');

# --- SIGTERM: stops cleanly; the launcher starts a new one -------------------
$node->safe_psql('postgres', q{ALTER SYSTEM SET hoplock.naptime = '1s'; SELECT pg_reload_conf()});
$node->safe_psql('postgres', "SELECT pg_terminate_backend($wpid)");
$node->poll_query_until('postgres',
	"SELECT pid IS NOT NULL AND pid <> $wpid FROM hoplock_workers")
  or die 'worker not replaced';
pass('after SIGTERM the launcher started a new worker');
ok($node->log_contains('hoplock worker for database "postgres" stopped'),
	'the worker logged its stop');

# --- Database defaults do not get in its way -------------------------------
$node->safe_psql('postgres', q{ALTER SYSTEM SET default_transaction_read_only = on; ALTER SYSTEM SET default_transaction_isolation = 'serializable'; SELECT pg_reload_conf()});
$node->safe_psql('postgres', q{BEGIN READ WRITE; SELECT hoplock_acquire('read-only-default', 'a', '100 ms'); COMMIT});
$events = $listener->collect(5,
	sub { grep { $_->{event} eq 'expired' && $_->{name} eq 'read-only-default' } @{ $_[0] } });
ok((grep { $_->{event} eq 'expired' && $_->{name} eq 'read-only-default' } @$events),
	'a read-only, serializable default does not stop the worker (as it does not stop autovacuum)');
$node->safe_psql('postgres', q{ALTER SYSTEM RESET default_transaction_read_only; ALTER SYSTEM RESET default_transaction_isolation; SELECT pg_reload_conf()});
$listener->reset;

# --- An error: the worker logs it, waits, and catches up --------------------
# A column without its NOT NULL makes every worker transaction fail; putting
# it back repairs it.  The worker does not exit (no restart loop): it logs
# the error and tries again after a pause.
$node->safe_psql('postgres', q{SELECT hoplock_acquire('during-error', 'a', '1 s')});
my $worker_pid = $node->safe_psql('postgres', q{SELECT pid FROM hoplock_workers});
$node->safe_psql('postgres', q{ALTER TABLE hoplock_internal.lease ALTER COLUMN acquired_at DROP NOT NULL});
sleep 3;
ok($node->log_contains('column "acquired_at" of table "hoplock_internal.lease" must be NOT NULL'),
	'the worker raised an error');
is($node->safe_psql('postgres', q{SELECT pid || ' ' || state FROM hoplock_workers}),
	"$worker_pid failing", 'and waits to try again, without exiting');
$node->safe_psql('postgres', q{ALTER TABLE hoplock_internal.lease ALTER COLUMN acquired_at SET NOT NULL});
$events = $listener->collect(10,
	sub { grep { $_->{event} eq 'expired' && $_->{name} eq 'during-error' } @{ $_[0] } });
ok((grep { $_->{event} eq 'expired' && $_->{name} eq 'during-error' } @$events),
	'once repaired it caught up with the term that lapsed meanwhile');
$listener->reset;

# --- SIGHUP: hoplock.databases can leave a database out ----------------------
$node->safe_psql('postgres', q{ALTER SYSTEM SET hoplock.databases = 'elsewhere'; SELECT pg_reload_conf()});
$node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM hoplock_workers WHERE pid IS NOT NULL})
  or die 'worker not stopped';
pass('a reload that leaves the database out stops its worker');
$node->safe_psql('postgres', q{ALTER SYSTEM RESET hoplock.databases; SELECT pg_reload_conf()});
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM hoplock_workers WHERE pid IS NOT NULL})
  or die 'worker not restarted';
pass('and one that puts it back starts it again');

my $log = slurp_file($node->logfile);
like($log, qr/LOG:  hoplock: lease "one" expired, generation $one1, owner "a"/,
	'with hoplock.log_events the worker\'s expiries are logged');

$listener->disconnect;
$node->stop;
done_testing();
