-- Renewals are HOT updates, and a table renewed many times stays small.

SELECT show(hoplock_acquire('hot', 'a', '1 h'));

-- Make this session's table statistics visible.  PostgreSQL 15 and later
-- flush them on request; before 15 a backend sends them to the statistics
-- collector when it goes idle, if 500 ms have passed since it last did, so
-- wait that long here and let the statement end.
CREATE FUNCTION flush_stats() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('server_version_num')::int >= 150000 THEN
        EXECUTE 'SELECT pg_stat_force_next_flush()';
    ELSE
        PERFORM pg_sleep(0.6);
    END IF;
END $$;

SELECT flush_stats();
SELECT n_tup_upd AS upd0, n_tup_hot_upd AS hot0
  FROM pg_stat_user_tables
 WHERE relid = 'hoplock_internal.lease'::regclass \gset

-- 3000 renewals, each its own transaction, so pruning can reclaim space.
CREATE PROCEDURE renew_many(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM hoplock_renew('hot', 'a', '1 h');
        COMMIT;
    END LOOP;
END $$;
CALL renew_many(3000);

-- (The table's counts are everyone's: before PostgreSQL 15 an update
-- the expiry worker made earlier may be counted only now.)
SELECT flush_stats();
SELECT n_tup_upd - :upd0 >= 3000 AS all_counted,
       (n_tup_upd - :upd0) - (n_tup_hot_upd - :hot0) AS not_hot
  FROM pg_stat_user_tables
 WHERE relid = 'hoplock_internal.lease'::regclass;

-- Every renewal was HOT, so the index did not grow, and pruning kept the
-- heap to a few pages.
SELECT pg_relation_size('hoplock_internal.lease_pkey') <= 2 * current_setting('block_size')::int AS index_small,
       pg_relation_size('hoplock_internal.lease') <= 8 * current_setting('block_size')::int AS heap_small;
