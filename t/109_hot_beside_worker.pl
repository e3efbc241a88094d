# Renewals stay HOT beside the expiry worker.  A renewal is a heap-only
# update only if its page has room, which pruning makes by removing the
# versions no snapshot can see any more; a snapshot held meanwhile, by
# any backend of the database, stops that.  The worker's rounds at rest
# must hold none for long: with 200,000 leases held (200,000 running
# terms, which the history counts) and 200 of them renewed in a loop over three of
# its housekeeping intervals, every renewal is HOT and the table keeps
# its size.  (The worker used to read the whole history and the whole
# lease table every 10 s, holding a snapshot for as long: the renewals
# of those instants went to other pages.)
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use Hoplock::Rest;

my $n = 200_000;
my $hot = 200;

my $node = PostgreSQL::Test::Cluster->new('hot_beside_worker');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'hoplock'
# nothing but the worker beside the renewals
autovacuum = off
max_locks_per_transaction = 256
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub q1 { return $node->safe_psql('postgres', $_[0]); }

hold_leases($node, $n);
$node->safe_psql('postgres', q{
-- renewals of the first "leases" names, one per transaction, for "secs"
CREATE PROCEDURE renew_for(secs float8, leases int) LANGUAGE plpgsql AS $$
DECLARE
    stop timestamptz := clock_timestamp() + make_interval(secs => secs);
    i int := 0;
BEGIN
    WHILE clock_timestamp() < stop LOOP
        PERFORM hoplock_renew('held-' || (i % leases + 1), 'holder', '1 day');
        COMMIT;
        i := i + 1;
    END LOOP;
END $$;
VACUUM hoplock_internal.lease;
});

# The worker at rest, its first reads of the full tables counted
# (Hoplock::Rest), so that the renewals below run beside a worker with
# nothing left to do.
restart_worker_and_settle($node, $n, 0);

# The hot rows' pages, after a first round of renewals; then the counters
# of the renewals over three housekeeping intervals (10 s each), all in one
# session, whose counters reach the shared ones at the end of each
# statement after pg_stat_force_next_flush().
my $out = q1(qq{
	CALL renew_for(1, $hot);
	SELECT pg_stat_force_next_flush();
	SELECT 'size ' || pg_relation_size('hoplock_internal.lease');
	SELECT pg_stat_reset_single_table_counters('hoplock_internal.lease'::regclass);
	CALL renew_for(32, $hot);
	SELECT pg_stat_force_next_flush();
	SELECT 'updates ' || n_tup_upd || ' ' || n_tup_hot_upd FROM pg_stat_user_tables
	 WHERE relid = 'hoplock_internal.lease'::regclass;});
my ($size0) = $out =~ /^size (\d+)$/m or die "no size in: $out";
my ($upd, $hotupd) = $out =~ /^updates (\d+) (\d+)$/m or die "no counters in: $out";
note("$upd renewals, $hotupd of them HOT");
cmp_ok($upd, '>', 1000, 'renewals were made');
is($upd - $hotupd, 0, 'every renewal beside the worker at rest was HOT');
is(q1(q{SELECT pg_relation_size('hoplock_internal.lease')}), $size0,
	'the lease table kept its size');

$node->stop;
done_testing();
