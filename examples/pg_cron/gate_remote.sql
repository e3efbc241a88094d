-- gate_remote.sql: gate pg_cron jobs in several databases (or on several
-- servers) on one lease.
--
-- Leases are per database: a lease named 'rollup' in database a and one
-- named 'rollup' in database b are two leases, and jobs gated by them run
-- together.  For jobs in several databases to share one lease, keep it in
-- one database -- pg_cron's own (cron.database_name) is a good choice --
-- and gate every job through it: run gate.sql there, and this file, as a
-- superuser, in each database whose jobs gate through it.  It installs
-- dblink in schema cron_gate (if dblink is already installed in another
-- schema, write that schema for "cron_gate.dblink" below).  Then:
--
--   SELECT cron.schedule_in_database('rollup-b', '* * * * *',
--       $$CALL cron_gate.run_via('dbname=postgres', 'rollup', '10 min', 'SELECT refresh_rollups()')$$,
--       'b');
--
-- A job that does not run as a superuser must authenticate its dblink
-- connection with a password (dblink requires it).  Never write one into
-- lease_db: the job's command is its pg_stat_activity.query for the whole
-- run, and cron.job's command, both readable by every pg_read_all_stats
-- member (run_via refuses a lease_db that holds a password).  Keep it in a
-- user mapping of a foreign server, which only a superuser and the mapped
-- user can read, and name the server instead:
--
--   CREATE SERVER lease_db FOREIGN DATA WRAPPER dblink_fdw
--       OPTIONS (host '/var/run/postgresql', dbname 'postgres');
--   CREATE USER MAPPING FOR job_owner SERVER lease_db
--       OPTIONS (user 'job_owner', password '...');
--   GRANT USAGE ON FOREIGN SERVER lease_db TO job_owner;
--   GRANT USAGE ON SCHEMA cron_gate TO job_owner;
--   ... $$CALL cron_gate.run_via('lease_db', 'rollup', '10 min', ...)$$ ...
--
-- In the lease's database, job_owner needs the grants gate.sql lists.
--
-- cron_gate.run_via(lease_db, lease, ttl, command [, min_hold]) does what
-- cron_gate.run does, with the lease, and the log, in the database that
-- lease_db -- the name of a foreign server with a user mapping, or a
-- dblink connection string without a password -- connects to:
--   * a gate session there takes the lease, bound to that session, and
--     holds hoplock_fence open in a transaction while the command runs
--     here; the command commits here only if the gate session still
--     answers; then the fence ends and the lease is released;
--   * if the job's session ends mid-run, its connection to the gate
--     closes with it; the gate session, idle in its transaction, sees
--     that at once and ends, and so does the term;
--   * if the command is still running ttl + hoplock.hung_holder_timeout
--     after its term began, the expiry worker ends the gate session: the
--     lease is free from then on, and the command, when it finishes,
--     fails instead of committing.  Here ttl bounds how long the lease
--     excludes a section's execution, not only its effects: make it the
--     longest the section may ever take, with room to spare.
-- Across servers, the skip rule for queued runs compares this server's
-- minute with the times the lease's server recorded: keep the clocks in
-- sync.

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
CREATE EXTENSION IF NOT EXISTS dblink SCHEMA cron_gate;

-- (min_hold is a new argument: drop the signature that came before it)
DROP PROCEDURE IF EXISTS cron_gate.run_via(text, text, interval, text);
CREATE OR REPLACE PROCEDURE cron_gate.run_via(lease_db text, lease text, ttl interval, command text,
                                              min_hold interval DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    link constant text := 'cron_gate';
    term record;
    failed boolean := false;
    e_state text;
    e_message text;
    e_detail text;
BEGIN
    -- a password here would be readable in pg_stat_activity.query
    IF pg_catalog.strpos(pg_catalog.lower(lease_db), 'password') > 0
       OR lease_db ~ '^[A-Za-z]+://[^/@]*:[^/@]*@' THEN
        RAISE EXCEPTION 'cron_gate.run_via: lease_db must not hold a password'
            USING ERRCODE = '22023',
                  DETAIL = 'The job''s command is in pg_stat_activity, readable by every member of pg_read_all_stats.',
                  HINT = 'Name a foreign server whose user mapping holds the password (see gate_remote.sql).';
    END IF;
    IF link = ANY (cron_gate.dblink_get_connections()) THEN
        PERFORM cron_gate.dblink_disconnect(link);
    END IF;
    PERFORM cron_gate.dblink_connect(link, lease_db);
    -- the gate session idles in a transaction while the command runs
    PERFORM cron_gate.dblink_exec(link, 'SET idle_in_transaction_session_timeout = 0'::text);
    SELECT t.owner, t.generation INTO term
      FROM cron_gate.dblink(link, pg_catalog.format(
               'SELECT owner, generation FROM cron_gate.enter(%L::text, %L::interval, pg_catalog.to_timestamp(%s::double precision), %L::name, %s::integer, %L::interval)',
               lease, ttl,
               pg_catalog.date_part('epoch', pg_catalog.date_trunc('minute', pg_catalog.now())),
               pg_catalog.current_database(), pg_catalog.pg_backend_pid(), min_hold))
           AS t(owner text, generation bigint);
    IF term.generation IS NULL THEN
        PERFORM cron_gate.dblink_disconnect(link);
        RETURN;                 -- skipped, and logged in the lease's database
    END IF;

    PERFORM cron_gate.dblink_exec(link, 'BEGIN'::text);
    PERFORM 1 FROM cron_gate.dblink(link,
        pg_catalog.format('SELECT 1 FROM hoplock.hoplock_fence(%L::text, %s::bigint)', lease, term.generation))
        AS t(ok integer);
    BEGIN
        EXECUTE command;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
                                e_detail = PG_EXCEPTION_DETAIL;
        failed := true;
    END;
    IF failed THEN
        PERFORM cron_gate.dblink_exec(link, 'ROLLBACK'::text);
        PERFORM * FROM cron_gate.dblink(link,
            pg_catalog.format('SELECT cron_gate.leave(%L::text, %L::text, %s::bigint, %L::text)',
                              lease, term.owner, term.generation, e_message))
            AS t(released boolean);
        PERFORM cron_gate.dblink_disconnect(link);
        IF e_detail <> '' THEN
            RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
        END IF;
        RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
    END IF;

    -- the gate session answers, so its fence still holds: commit here
    PERFORM 1 FROM cron_gate.dblink(link, 'SELECT 1'::text) AS t(ok integer);
    COMMIT;
    PERFORM cron_gate.dblink_exec(link, 'COMMIT'::text);
    PERFORM * FROM cron_gate.dblink(link,
        pg_catalog.format('SELECT cron_gate.leave(%L::text, %L::text, %s::bigint)', lease, term.owner, term.generation))
        AS t(released boolean);
    PERFORM cron_gate.dblink_disconnect(link);
END
$$;
