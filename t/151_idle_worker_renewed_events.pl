# The expiry worker at rest while terms are renewed with
# hoplock.notify_renewals on: a "renewed" event begins and ends no term,
# so it must not make the worker read its whole tables again (the sweep
# of the lease table, the trimming of the history), as a term that began
# or ended does.  Any role may set hoplock.notify_renewals in its session.
# Measured with the tables' own counters (pg_stat_user_tables) over three
# housekeeping intervals, as t/110_idle_worker.pl does.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use Hoplock::Rest;

my $n = 5_000;

my $node = PostgreSQL::Test::Cluster->new('idle_worker_renewed');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'hoplock'
hoplock.history_size = 1000
autovacuum = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub q1 { return $node->safe_psql('postgres', $_[0]); }

hold_leases($node, $n);
q1(q{
CREATE PROCEDURE renew_for(seconds int) LANGUAGE plpgsql AS $$
DECLARE
    stop timestamptz := clock_timestamp() + make_interval(secs => seconds);
BEGIN
    WHILE clock_timestamp() < stop LOOP
        PERFORM hoplock_renew('held-1', 'holder', '1 day');
        COMMIT;
        PERFORM pg_sleep(0.2);
    END LOOP;
END $$;
});

restart_worker_and_settle($node, $n, 0);

# A session renews a term, announcing each renewal, for three intervals
my ($lease1, $history1) = (table_reads($node, 'lease'), table_reads($node, 'history'));
my $before = q1(q{SELECT count(*) FROM hoplock_internal.event WHERE event = 'renewed'});
$node->safe_psql('postgres', 'SET hoplock.notify_renewals = on; CALL renew_for(32)');
my ($lease2, $history2) = (table_reads($node, 'lease'), table_reads($node, 'history'));
cmp_ok(q1(q{SELECT count(*) FROM hoplock_internal.event WHERE event = 'renewed'}) - $before,
	'>', 50, 'the renewals were announced');
cmp_ok($lease2 - $lease1, '<', $n / 10,
	"renewals announced, the worker reads no more than a few rows of the lease table ($n held)");
cmp_ok($history2 - $history1, '<', $n / 10,
	"renewals announced, the worker reads no more than a few rows of the history ($n running terms)");

$node->stop;
done_testing();
