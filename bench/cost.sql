-- bench/cost.sql: loops that run one call per transaction, n times, inside
-- the server (so the network is not measured), for bench/bench.pl.  Each
-- is a procedure with static SQL, so PL/pgSQL plans every statement once.

-- The backend's own CPU time, in nanoseconds (Linux schedstat: time spent
-- on a CPU, which other processes' load does not inflate).
CREATE FUNCTION bench_cpu_ns() RETURNS bigint LANGUAGE sql AS $$
    SELECT split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint
$$;

CREATE TABLE bench_bare (id int PRIMARY KEY, v timestamptz) WITH (fillfactor = 50);
-- the same, keyed like the lease table (text names), for pgbench
CREATE TABLE bench_bare_text (name text PRIMARY KEY, v timestamptz) WITH (fillfactor = 50);

CREATE PROCEDURE cost_empty(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        COMMIT;
    END LOOP;
END $$;

-- the database's own single-row write, and its own lock
CREATE PROCEDURE cost_update(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        UPDATE bench_bare SET v = clock_timestamp() WHERE id = 1;
        COMMIT;
    END LOOP;
END $$;

CREATE PROCEDURE cost_advisory(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM pg_try_advisory_xact_lock(42);
        COMMIT;
    END LOOP;
END $$;

-- hoplock
CREATE PROCEDURE cost_hoplock_acquire(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM hoplock_acquire('lapsed-' || i, 'taker', '1 h');
        COMMIT;
    END LOOP;
END $$;

CREATE PROCEDURE cost_hoplock_renew(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM hoplock_renew('held', 'holder', '1 h');
        COMMIT;
    END LOOP;
END $$;

CREATE PROCEDURE cost_hoplock_release(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM hoplock_release('held-' || i, 'holder');
        COMMIT;
    END LOOP;
END $$;

-- a fence protects the writes of its transaction (alone, hoplock refuses
-- it): each fence loop writes the row cost_update writes, and bench.pl
-- reports it net of cost_update
CREATE PROCEDURE cost_hoplock_fence(n int) LANGUAGE plpgsql AS $$
DECLARE
    g bigint := (SELECT generation FROM hoplock_holder('held'));
BEGIN
    FOR i IN 1..n LOOP
        PERFORM hoplock_fence('held', g);
        UPDATE bench_bare SET v = clock_timestamp() WHERE id = 1;
        COMMIT;
    END LOOP;
END $$;

CREATE PROCEDURE cost_hoplock_holder(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM hoplock_holder('held');
        COMMIT;
    END LOOP;
END $$;

-- the PL/pgSQL implementation (bench/plpgsql_lease.sql)
CREATE PROCEDURE cost_plpg_acquire(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM plpg.acquire('lapsed-' || i, 'taker', '1 h');
        COMMIT;
    END LOOP;
END $$;

CREATE PROCEDURE cost_plpg_renew(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM plpg.renew('held', 'holder', '1 h');
        COMMIT;
    END LOOP;
END $$;

CREATE PROCEDURE cost_plpg_release(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM plpg.release('held-' || i, 'holder');
        COMMIT;
    END LOOP;
END $$;

CREATE PROCEDURE cost_plpg_fence(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM plpg.fence('held', 1);
        UPDATE bench_bare SET v = clock_timestamp() WHERE id = 1;
        COMMIT;
    END LOOP;
END $$;

CREATE PROCEDURE cost_plpg_holder(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM plpg.holder('held');
        COMMIT;
    END LOOP;
END $$;

-- the same, writing events and history as rows (bench/plpgsql_lease_logged.sql)
CREATE PROCEDURE cost_plpg_log_acquire(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM plpg_log.acquire('lapsed-' || i, 'taker', '1 h');
        COMMIT;
    END LOOP;
END $$;

CREATE PROCEDURE cost_plpg_log_release(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM plpg_log.release('held-' || i, 'holder');
        COMMIT;
    END LOOP;
END $$;

-- set-up: n lapsed terms to take over, n held ones to release
CREATE PROCEDURE setup_hoplock(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM hoplock_force_release('lapsed-' || i);
        PERFORM hoplock_acquire('lapsed-' || i, 'old', '1 ms');
        PERFORM hoplock_acquire('held-' || i, 'holder', '1 h');
        IF i % 500 = 0 THEN COMMIT; END IF;
    END LOOP;
    PERFORM hoplock_acquire('held', 'holder', '1 h');
    COMMIT;
END $$;

CREATE PROCEDURE setup_plpg(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM plpg.acquire('lapsed-' || i, 'old', '1 ms');
        PERFORM plpg.acquire('held-' || i, 'holder', '1 h');
        IF i % 500 = 0 THEN COMMIT; END IF;
    END LOOP;
    PERFORM plpg.acquire('held', 'holder', '1 h');
    COMMIT;
END $$;

CREATE PROCEDURE setup_plpg_log(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM plpg_log.acquire('lapsed-' || i, 'old', '1 ms');
        PERFORM plpg_log.acquire('held-' || i, 'holder', '1 h');
        IF i % 500 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

-- many leases, for the scale figures
CREATE PROCEDURE fill_hoplock(n int, ttl interval) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM hoplock_acquire('filler-' || i, 'filler', ttl);
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

-- renewals spread over many leases, one transaction each
CREATE PROCEDURE renew_spread(n int, leases int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM hoplock_renew('filler-' || (i % leases + 1), 'filler', '1 h');
        COMMIT;
    END LOOP;
END $$;
