-- gate.sql: run a pg_cron job's critical section only while it holds a
-- hoplock lease; skip the run -- never queue it -- when the lease is held.
--
-- Run this file, as a superuser, in the database that keeps the leases:
-- the jobs' own database, or the one database that jobs in several
-- databases gate through (gate_remote.sql).  It assumes hoplock is
-- installed in schema "hoplock" (change "hoplock." if not).  Then a job is
-- one line:
--
--   SELECT cron.schedule('rollup', '* * * * *',
--       $$CALL cron_gate.run('rollup', '10 min', 'CALL rollup_step()')$$);
--
-- cron_gate.run(lease, ttl, command [, min_hold]):
--   * takes the lease for at most ttl, bound to the job's session, under a
--     fresh owner 'cron:<database>:<pid>:<nonce>'; if another run holds
--     it, the run is skipped, at once;
--   * with min_hold (hoplock 1.2), a run that ends early keeps the lease
--     from other runs until min_hold after its term began: a run of
--     another job, or of the same job on another server, due in the same
--     minute but a few seconds later is skipped too.  So at most one run
--     per tick does the work: give a min_hold shorter than the period and
--     no longer than ttl.  A run whose command fails keeps the hold too;
--   * skips the run too if a term of the lease was running when the run
--     was due -- at the start of the minute it started in -- and has ended
--     since.  pg_cron 1.4 does not start a job again while its previous run
--     is going: it queues the run and starts it the moment the previous one
--     ends.  This turns that late run into a skip;
--   * runs the command behind hoplock_fence, in one transaction (so the
--     command must not COMMIT itself): no other term can begin until it
--     has committed.  A command still running ttl +
--     hoplock.hung_holder_timeout (5 s) after its term began is ended by
--     hoplock's expiry worker, and rolls back: make ttl the longest the
--     section may ever take, with room to spare;
--   * releases the lease when the command has committed, or at once if
--     it raised (the job then fails with the command's error).  If the
--     job's session ends mid-run -- terminated, or ended by hoplock as
--     above -- the term ends with it, at once.
--
-- Every run that reaches the gate leaves a row in cron_gate.log: 'ran',
-- 'failed' (with the error), 'skipped' (with the reason and the term that
-- caused it), or 'running' -- while it runs, and for good if its session
-- ended mid-run.  pg_cron records a skipped run as "succeeded": see
-- run_details.sql for a view that puts the two side by side.  The skip
-- rule for queued runs reads hoplock_history, so it needs
-- hoplock.history_size > 0 (the default).
--
-- Jobs that do not run as a superuser need, for each role that owns
-- them (SELECT too: releasing updates the run's row, found by a WHERE):
--
--   GRANT USAGE ON SCHEMA cron_gate TO job_owner;
--   GRANT SELECT, INSERT, UPDATE ON cron_gate.log TO job_owner;
--   GRANT USAGE ON SEQUENCE cron_gate.log_id_seq TO job_owner;
--
-- and USAGE on hoplock's schema; EXECUTE on the functions and on
-- hoplock's is PUBLIC's.

-- Schema cron_gate must be one only superusers own and may create in:
-- one another role made beforehand (a database owner can) could hold its
-- own cron_gate.run, which the next job would call as its owner.  So an
-- existing cron_gate is checked, not simply used.
DO $check$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace AS n
                 JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
                WHERE n.nspname OPERATOR(pg_catalog.=) 'cron_gate'
                  AND NOT r.rolsuper)
       OR EXISTS (SELECT FROM pg_catalog.pg_namespace AS n,
                         pg_catalog.aclexplode(n.nspacl) AS a
                   WHERE n.nspname OPERATOR(pg_catalog.=) 'cron_gate'
                     AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
                     AND (a.grantee OPERATOR(pg_catalog.=) 0
                          OR NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r
                                   WHERE r.oid OPERATOR(pg_catalog.=) a.grantee)))
    THEN
        RAISE EXCEPTION 'schema cron_gate exists and a role that is not a superuser owns it or may create in it'
            USING HINT = 'Drop it (after checking what is in it), then run this file again.';
    END IF;
END
$check$;
CREATE SCHEMA IF NOT EXISTS cron_gate;

CREATE TABLE IF NOT EXISTS cron_gate.log (
    id         bigserial PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),  -- reached the gate
    lease      text NOT NULL,
    database   name NOT NULL,         -- the job's database
    pid        integer NOT NULL,      -- the job's backend: cron.job_run_details.job_pid
    due        timestamptz NOT NULL,  -- the minute the run was due
    outcome    text NOT NULL CHECK (outcome IN ('running', 'ran', 'failed', 'skipped')),
    owner      text,                  -- ran: this run's owner; skipped: the holder's
    generation bigint,                -- ran: this run's term; skipped: the holder's
    reason     text,                  -- skipped: why; failed: the error
    ended_at   timestamptz            -- ran, failed: when the lease was released
);
CREATE INDEX IF NOT EXISTS log_pid ON cron_gate.log (pid, at);

-- The gate, one statement, so that gate_remote.sql can call it through
-- dblink: the lease for this run, or a row of NULLs and a logged skip.
-- (min_hold is a new argument: drop the signatures that came before it)
DROP FUNCTION IF EXISTS cron_gate.enter(text, interval, timestamptz, name, integer);
DROP PROCEDURE IF EXISTS cron_gate.run(text, interval, text);
CREATE OR REPLACE FUNCTION cron_gate.enter(lease text, ttl interval, due timestamptz,
                                           job_database name, job_pid integer,
                                           min_hold interval DEFAULT NULL,
                                           OUT owner text, OUT generation bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    last record;
    term hoplock.hoplock_lease;
    kept_owner text;
    kept_generation bigint;
    kept_since timestamptz;
    kept_until timestamptz;
BEGIN
    -- A term held the lease when this run was due, and has ended since:
    -- pg_cron queued the run behind its previous one, or started it late.
    -- Skip it.  (Terms do not overlap: the last one begun by the time the
    -- run was due is the one that may have held it then.)
    SELECT h.owner, h.generation, h.ended_at INTO last
      FROM hoplock.hoplock_history AS h
     WHERE h.name = enter.lease AND h.acquired_at <= due
     ORDER BY h.generation DESC
     LIMIT 1;
    IF last.ended_at > due THEN
        INSERT INTO cron_gate.log (lease, database, pid, due, outcome, owner, generation, reason)
        VALUES (enter.lease, job_database, job_pid, due, 'skipped', last.owner, last.generation,
                format('due at %s, while %s held the lease (until %s)',
                       due, last.owner, last.ended_at));
        RETURN;
    END IF;

    owner := format('cron:%s:%s:%s', job_database, job_pid, left(md5(random()::text), 6));
    IF enter.min_hold IS NULL THEN
        -- (without min_hold, hoplock before 1.2 does too)
        term := hoplock.hoplock_acquire(enter.lease, owner, ttl, session_bound => true);
    ELSE
        term := hoplock.hoplock_acquire(enter.lease, owner, ttl, session_bound => true,
                                        min_hold => enter.min_hold);
    END IF;
    IF term.generation IS NULL THEN
        -- held by another run, kept by the hold of one that ended
        -- (min_hold), or being taken by one right now
        owner := NULL;
        term := hoplock.hoplock_holder(enter.lease);
        IF term.generation IS NULL AND enter.min_hold IS NOT NULL THEN
            SELECT l.owner, l.generation, l.acquired_at, l.hold_until
              INTO kept_owner, kept_generation, kept_since, kept_until
              FROM hoplock.hoplock_leases AS l
             WHERE l.name = enter.lease AND l.hold_until IS NOT NULL;
        END IF;
        INSERT INTO cron_gate.log (lease, database, pid, due, outcome, owner, generation, reason)
        VALUES (enter.lease, job_database, job_pid, due, 'skipped',
                coalesce(term.owner, kept_owner), coalesce(term.generation, kept_generation),
                CASE WHEN term.generation IS NOT NULL
                     THEN format('%s held the lease (since %s)', term.owner, term.acquired_at)
                     WHEN kept_until IS NOT NULL
                     THEN format('%s ran (since %s); its hold keeps the lease until %s',
                                 kept_owner, kept_since, kept_until)
                     ELSE 'another run was taking the lease'
                END);
        RETURN;
    END IF;

    INSERT INTO cron_gate.log (lease, database, pid, due, outcome, owner, generation)
    VALUES (enter.lease, job_database, job_pid, due, 'running', term.owner, term.generation);
    owner := term.owner;
    generation := term.generation;
END
$$;

-- Release the lease and log how the section ended (error: NULL if it
-- committed).
CREATE OR REPLACE FUNCTION cron_gate.leave(lease text, owner text, generation bigint,
                                           error text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE cron_gate.log AS l
       SET outcome = CASE WHEN error IS NULL THEN 'ran' ELSE 'failed' END,
           reason = error,
           ended_at = clock_timestamp()
     WHERE l.lease = leave.lease AND l.owner = leave.owner
       AND l.generation = leave.generation AND l.outcome = 'running';
    RETURN hoplock.hoplock_release(leave.lease, leave.owner, leave.generation);
END
$$;

-- The job's command: CALL cron_gate.run(lease, ttl, command [, min_hold]).
-- A procedure, so that the term is committed -- visible in
-- hoplock_leases, announced, bound to this session -- before the section
-- begins.  The command runs in one transaction and must not COMMIT itself.
CREATE OR REPLACE PROCEDURE cron_gate.run(lease text, ttl interval, command text,
                                          min_hold interval DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    term record;
    failed boolean := false;
    e_state text;
    e_message text;
    e_detail text;
BEGIN
    SELECT e.owner, e.generation INTO term
      FROM cron_gate.enter(lease, ttl, pg_catalog.date_trunc('minute', pg_catalog.now()),
                           pg_catalog.current_database(), pg_catalog.pg_backend_pid(),
                           min_hold) AS e;
    IF term.generation IS NULL THEN
        RETURN;                 -- skipped, and logged
    END IF;
    COMMIT;

    BEGIN
        PERFORM hoplock.hoplock_fence(lease, term.generation);
        EXECUTE command;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
                                e_detail = PG_EXCEPTION_DETAIL;
        failed := true;
    END;
    IF failed THEN
        -- the section rolled back: release at once, log, and fail the job
        -- with its error
        PERFORM cron_gate.leave(lease, term.owner, term.generation, e_message);
        COMMIT;
        IF e_detail <> '' THEN
            RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
        END IF;
        RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
    END IF;
    COMMIT;                     -- the section, still behind the fence

    PERFORM cron_gate.leave(lease, term.owner, term.generation);
END
$$;
