# Hoplock::Rest: a worker at rest, for the TAP tests that count what it
# reads while nothing changes (pg_stat_user_tables).  A worker started on
# a full table reads it whole (its first pass, its first sweep, its first
# trimming), and flushes its counters at the end of a round at most once
# a second, the rest at a later wake-up; one that is stopped flushes them
# as it exits.  So: stop the worker and wait for its process to be gone,
# reset the counters of the lease table and the history, start it again,
# wait until they count its first reads whole, then for one more of its
# rounds.  What they count afterwards is what it does at rest.
package Hoplock::Rest;

use strict;
use warnings;
use Exporter 'import';

our @EXPORT = qw(hold_leases restart_worker_and_settle table_reads);

# $n running terms in database postgres, 'held-1' to 'held-$n' of owner
# 'holder', for a day: a thousand acquires per transaction.
sub hold_leases
{
	my ($node, $n) = @_;
	$node->safe_psql('postgres', q{
CREATE PROCEDURE hold_leases(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM hoplock_acquire('held-' || i, 'holder', '1 day');
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
END $$;
CALL hold_leases(} . $n . q{);
DROP PROCEDURE hold_leases(int);});
	return;
}

# Rows of hoplock_internal.$table read so far (sequential and by index),
# as flushed.
sub table_reads
{
	my ($node, $table) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)
		  FROM pg_stat_user_tables WHERE relid = 'hoplock_internal.$table'::regclass});
}

# Restart the worker of database postgres, whose lease table has $leases
# rows and history $terms rows (ended terms: a running term's row is
# written when it ends), and return once it has read them whole and its
# counters say so.
sub restart_worker_and_settle
{
	my ($node, $leases, $terms) = @_;
	my $pid = $node->safe_psql('postgres',
		q{SELECT pid FROM hoplock_workers WHERE datname = 'postgres'});

	$node->safe_psql('postgres',
		q{ALTER SYSTEM SET hoplock.databases = 'no_database_here'; SELECT pg_reload_conf();});
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'hoplock worker'})
	  or die 'the worker did not stop';
	# its counters reach the shared ones before the process ends
	for (1 .. 1000)
	{
		last unless $pid && kill 0, $pid;
		select undef, undef, undef, 0.01;
	}
	die "worker $pid did not end" if $pid && kill 0, $pid;
	$node->safe_psql('postgres', q{
		SELECT pg_stat_reset_single_table_counters('hoplock_internal.lease'::regclass);
		SELECT pg_stat_reset_single_table_counters('hoplock_internal.history'::regclass);
		ALTER SYSTEM RESET hoplock.databases;
		SELECT pg_reload_conf();});
	# its first pass and its first sweep read every lease, its first
	# trimming every row of the history
	$node->poll_query_until('postgres', qq{
		SELECT coalesce(l.seq_tup_read, 0) + coalesce(l.idx_tup_fetch, 0) >= 2 * $leases
		   AND coalesce(h.seq_tup_read, 0) + coalesce(h.idx_tup_fetch, 0) >= $terms
		  FROM pg_stat_user_tables AS l, pg_stat_user_tables AS h
		 WHERE l.relid = 'hoplock_internal.lease'::regclass
		   AND h.relid = 'hoplock_internal.history'::regclass})
	  or die 'the worker did not read its tables';
	$node->poll_query_until('postgres',
		q{SELECT state = 'sleeping' FROM hoplock_workers WHERE datname = 'postgres'})
	  or die 'the worker did not settle';
	# what it read last may still wait for its flush, at the end of its
	# first round a second or more after its last (pgstat's interval):
	# wait for that round (at rest, it wakes every 10 s)
	my $settled = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
	$node->poll_query_until('postgres', qq{
		SELECT last_wakeup > '$settled'::timestamptz + interval '1 s' AND state = 'sleeping'
		  FROM hoplock_workers WHERE datname = 'postgres'})
	  or die 'the worker did not wake';
	return;
}

1;
