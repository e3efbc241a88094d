-- fence: succeeds only for the running term; raises 55P03 otherwise.
-- (What a fence keeps other sessions from doing is in specs/fence_takeover.)

SELECT show(hoplock_acquire('fen', 'a', '1 h'));

-- The current generation: no error, nothing returned.
BEGIN;
SELECT hoplock_fence('fen', 1);
-- a second fence of the same term in the same transaction is fine too
SELECT hoplock_fence('fen', 1);
COMMIT;

-- A stale or future generation: 55P03, naming the lease and both generations.
SELECT hoplock_fence('fen', 2);
\echo :LAST_ERROR_SQLSTATE

SELECT hoplock_release('fen', 'a');
SELECT show(hoplock_acquire('fen', 'b', '1 h'));
SELECT hoplock_fence('fen', 1);
\echo :LAST_ERROR_SQLSTATE

-- A released term.
SELECT hoplock_release('fen', 'b');
SELECT hoplock_fence('fen', 2);
\echo :LAST_ERROR_SQLSTATE

-- An expired term.
SELECT show(hoplock_acquire('fen', 'a', '50 ms'));
SELECT pg_sleep(0.1);
-- (terse: the detail names the instant it expired)
\set VERBOSITY terse
SELECT hoplock_fence('fen', 3);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default

-- A lease that was never acquired.
SELECT hoplock_fence('fen-never', 1);
\echo :LAST_ERROR_SQLSTATE

-- The point of a fence: a stale leader's write aborts with its transaction.
CREATE TABLE fenced_work (id int, by_generation bigint);
SELECT show(hoplock_acquire('fen-job', 'leader-1', '1 h'));
BEGIN;
SELECT hoplock_fence('fen-job', 1);
INSERT INTO fenced_work VALUES (1, 1);
COMMIT;
SELECT hoplock_force_release('fen-job');
SELECT show(hoplock_acquire('fen-job', 'leader-2', '1 h'));
BEGIN;
SELECT hoplock_fence('fen-job', 1);
INSERT INTO fenced_work VALUES (2, 1);
COMMIT;
SELECT * FROM fenced_work ORDER BY id;

-- A fence in the same transaction as its own term change is not blocked.
BEGIN;
SELECT show(hoplock_acquire('fen-own', 'a', '1 h'));
SELECT hoplock_fence('fen-own', 1);
SELECT hoplock_release('fen-own', 'a');
COMMIT;
SELECT show(hoplock_read('fen-own'));

-- A fence takes no row lock: it shows in pg_locks as an advisory lock of
-- its own class (objsubid 26732), shared, until the transaction ends.
SELECT show(hoplock_acquire('fen-locks', 'a', '1 h'));
BEGIN;
SELECT hoplock_fence('fen-locks', 1);
SELECT locktype, mode, objsubid, granted
  FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype = 'advisory';
COMMIT;
SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory';

-- Outside a transaction block a fence ends with its own statement: unless
-- that statement writes, it protected nothing, and it fails (25P01) rather
-- than pretend.
SELECT show(hoplock_acquire('fen-auto', 'a', '1 h'));
SELECT hoplock_fence('fen-auto', 1);
\echo :LAST_ERROR_SQLSTATE
-- A function that fences and writes, called in autocommit, is protected:
-- its statement is its transaction.
CREATE FUNCTION fenced_insert(id int, g bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM hoplock_fence('fen-auto', g);
    INSERT INTO fenced_work VALUES (id, g);
END $$;
SELECT fenced_insert(3, 1);
SELECT hoplock_force_release('fen-auto');
SELECT show(hoplock_acquire('fen-auto', 'b', '1 h'));
SELECT fenced_insert(4, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM fenced_work ORDER BY id;

-- A fence cannot be taken in a parallel worker (its lock would end with the
-- worker, leaving the transaction unprotected), even hidden in a function
-- that claims to be parallel safe; nor can a lease change there.
CREATE FUNCTION parallel_fence(n text, g bigint) RETURNS text
LANGUAGE sql PARALLEL SAFE AS $$ SELECT hoplock_fence(n, g)::text $$;
CREATE FUNCTION parallel_acquire(n text) RETURNS text
LANGUAGE sql PARALLEL SAFE AS $$ SELECT hoplock_acquire(n, 'p', '1 h')::text $$;
SELECT show(hoplock_acquire('fen-par', 'p', '1 h'));
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000
                       THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END,
                  'on', false) AS parallel;
\set VERBOSITY terse
SELECT parallel_fence('fen-par', (SELECT generation FROM hoplock_holder('fen-par')));
\echo :LAST_ERROR_SQLSTATE
SELECT parallel_acquire('fen-par-2');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000
                       THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END,
                  'off', false) AS parallel;
SELECT hoplock_read('fen-par-2') IS NULL AS nothing_written;
