-- fence: succeeds only for the running term; raises 55P03 otherwise.
-- (What a fence keeps other sessions from doing is in specs/fence_takeover.)

-- (Generations are read with \gset: their values are hoplock's business.
-- raises() shows them in its error as g1, g2, ... as show() does.)
SELECT show(hoplock_acquire('fen', 'a', '1 h'));
SELECT generation AS g1 FROM hoplock_read('fen') \gset

-- The current generation: no error, nothing returned.
BEGIN;
SELECT hoplock_fence('fen', :g1);
-- a second fence of the same term in the same transaction is fine too
SELECT hoplock_fence('fen', :g1);
COMMIT;

-- A stale or future generation: 55P03, naming the lease and both generations.
SELECT raises('fen', $$SELECT hoplock_fence('fen', %s)$$, :g1 + 1);
\echo :LAST_ERROR_SQLSTATE

SELECT hoplock_release('fen', 'a');
SELECT show(hoplock_acquire('fen', 'b', '1 h'));
SELECT generation AS g2 FROM hoplock_read('fen') \gset
SELECT raises('fen', $$SELECT hoplock_fence('fen', %s)$$, :g1);
\echo :LAST_ERROR_SQLSTATE

-- A released term.
SELECT hoplock_release('fen', 'b');
SELECT raises('fen', $$SELECT hoplock_fence('fen', %s)$$, :g2);
\echo :LAST_ERROR_SQLSTATE

-- An expired term.
SELECT show(hoplock_acquire('fen', 'a', '50 ms'));
SELECT generation AS g3 FROM hoplock_read('fen') \gset
SELECT pg_sleep(0.1);
-- (terse: the detail names the instant it expired)
\set VERBOSITY terse
SELECT raises('fen', $$SELECT hoplock_fence('fen', %s)$$, :g3);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default

-- A lease that was never acquired (any generation).
SELECT hoplock_fence('fen-never', 1);
\echo :LAST_ERROR_SQLSTATE

-- The point of a fence: a stale leader's write aborts with its transaction.
CREATE TABLE fenced_work (id int, by_generation bigint);
SELECT show(hoplock_acquire('fen-job', 'leader-1', '1 h'));
SELECT generation AS job1 FROM hoplock_read('fen-job') \gset
BEGIN;
SELECT hoplock_fence('fen-job', :job1);
INSERT INTO fenced_work VALUES (1, :job1);
COMMIT;
SELECT hoplock_force_release('fen-job');
SELECT show(hoplock_acquire('fen-job', 'leader-2', '1 h'));
BEGIN;
SELECT raises('fen-job', $$SELECT hoplock_fence('fen-job', %s)$$, :job1);
INSERT INTO fenced_work VALUES (2, :job1);
COMMIT;
SELECT id, gen_label('fen-job', by_generation) AS by_generation
  FROM fenced_work ORDER BY id;

-- A fence in the same transaction as its own term change is not blocked.
BEGIN;
SELECT show(hoplock_acquire('fen-own', 'a', '1 h'));
SELECT generation AS own1 FROM hoplock_read('fen-own') \gset
SELECT hoplock_fence('fen-own', :own1);
SELECT hoplock_release('fen-own', 'a');
COMMIT;
SELECT show(hoplock_read('fen-own'));

-- A fence takes no row lock: it shows in pg_locks as an advisory lock of
-- its own class (objsubid 26732), shared, until the transaction ends.
SELECT show(hoplock_acquire('fen-locks', 'a', '1 h'));
SELECT generation AS locks1 FROM hoplock_read('fen-locks') \gset
BEGIN;
SELECT hoplock_fence('fen-locks', :locks1);
SELECT locktype, mode, objsubid, granted
  FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype = 'advisory';
COMMIT;
SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory';

-- Outside a transaction block a fence ends with its own statement: unless
-- that statement writes, it protected nothing, and it fails (25P01) rather
-- than pretend.
SELECT show(hoplock_acquire('fen-auto', 'a', '1 h'));
SELECT generation AS auto1 FROM hoplock_read('fen-auto') \gset
SELECT hoplock_fence('fen-auto', :auto1);
\echo :LAST_ERROR_SQLSTATE
-- A function that fences and writes, called in autocommit, is protected:
-- its statement is its transaction.
CREATE FUNCTION fenced_insert(id int, g bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM hoplock_fence('fen-auto', g);
    INSERT INTO fenced_work VALUES (id, g);
END $$;
SELECT fenced_insert(3, :auto1);
SELECT hoplock_force_release('fen-auto');
SELECT show(hoplock_acquire('fen-auto', 'b', '1 h'));
SELECT raises('fen-auto', $$SELECT fenced_insert(4, %s)$$, :auto1);
\echo :LAST_ERROR_SQLSTATE
SELECT id, gen_label(CASE WHEN id < 3 THEN 'fen-job' ELSE 'fen-auto' END,
                     by_generation) AS by_generation
  FROM fenced_work ORDER BY id;

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
