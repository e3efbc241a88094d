-- run_details.sql: pg_cron's record of each run, with what the gate did.
--
-- Run this file, after gate.sql, in the database pg_cron lives in
-- (cron.database_name), when that database also keeps the leases (for
-- jobs in other databases: when they gate through it, gate_remote.sql).
-- pg_cron reports a skipped run as "succeeded" -- the job's command ran
-- and returned -- so this view adds the gate's side, found by the job's
-- backend pid and the time of the run:
--
--   SELECT jobname, start_time, status, gate, reason
--     FROM cron_gate.run_details ORDER BY start_time DESC LIMIT 20;
--
-- gate is 'ran'; 'skipped' (reason says why); 'failed' (the command
-- raised, rolled back, and the lease was released); 'aborted' (the run
-- never left the gate: its session was terminated, or ended by hoplock
-- for overrunning its ttl, or lost its gate session; its term ended with
-- its session, or at its ttl); 'running'; or NULL (the run did not reach
-- the gate: not gated, or pg_cron could not start it).  A run that
-- pg_cron cancelled (cron.unschedule while it ran) can show 'ran' next to
-- pg_cron's "failed": with libpq connections the command runs on to its
-- end.

CREATE OR REPLACE VIEW cron_gate.run_details AS
SELECT d.jobid, j.jobname, d.runid, d.database, d.job_pid,
       d.start_time, d.end_time, d.status, d.return_message,
       g.lease,
       CASE WHEN g.outcome = 'running' AND d.status = 'failed'
            THEN 'aborted'
            ELSE g.outcome
       END AS gate,
       g.reason, g.owner, g.generation
  FROM cron.job_run_details AS d
  LEFT JOIN cron.job AS j ON j.jobid = d.jobid
  LEFT JOIN LATERAL (
        SELECT l.lease, l.outcome, l.reason, l.owner, l.generation
          FROM cron_gate.log AS l
         WHERE l.pid = d.job_pid AND l.database = d.database
           -- pg_cron stamps start_time as it starts the run, give or take
           -- the start of a background worker
           AND l.at >= d.start_time - interval '1 s'
           AND l.at <= coalesce(d.end_time, 'infinity')
         ORDER BY l.id
         LIMIT 1) AS g ON true;
