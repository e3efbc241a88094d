-- Monitoring: the counters of hoplock_stats, the history of terms
-- (hoplock_history), the events read back by number (hoplock_events) and
-- forgetting names (hoplock_forget).  It runs last: forgetting a name
-- raises the generations of every name in the database.

-- (reinstall dropped the extension, and show() with it)
CREATE FUNCTION show(l hoplock_lease) RETURNS text
LANGUAGE sql SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT CASE WHEN l IS NULL THEN 'NULL'
                ELSE format('%s/%s/%s', l.name, l.owner,
                            gen_label(l.name, l.generation))
           END
$$;

-- Counters start from zero at a reset.
SELECT hoplock_stats_reset();
SELECT terms_begun, contended, renewals, releases, force_releases, expiries,
       waits, wakeups, stats_reset > now() - interval '1 min' AS just_reset
  FROM hoplock_stats WHERE datname = current_database();

-- Each kind of call counts once.
SELECT show(hoplock_acquire('mon', 'a', '1 h'));
SELECT show(hoplock_acquire('mon', 'b', '1 h'));		-- contended
SELECT show(hoplock_renew('mon', 'a', '1 h'));
SELECT show(hoplock_renew('mon', 'b', '1 h'));			-- not b's: no renewal
SELECT hoplock_release('mon', 'a');
SELECT show(hoplock_acquire('mon', 'b', '1 h'));
SELECT hoplock_force_release('mon');
SELECT show(hoplock_acquire('mon', 'c', '1 h'));
SELECT show(hoplock_wait('mon', 'd', '1 h', '20 ms'));	-- waits, times out
SELECT show(hoplock_acquire('mon-lapse', 'a', '10 ms'));
SELECT pg_sleep(0.05);
SELECT wait_expired('mon-lapse');
SELECT show(hoplock_acquire('mon-lapse', 'b', '1 h'));	-- takes over a lapsed term
SELECT terms_begun, contended, renewals, releases, force_releases, expiries,
       waits, wakeups
  FROM hoplock_stats WHERE datname = current_database();

-- A call that fails counts nothing.
SELECT hoplock_acquire('mon', 'a', '-1 s');
SELECT terms_begun, contended FROM hoplock_stats WHERE datname = current_database();

-- Resetting is for superusers and those granted it.
CREATE ROLE mon_user;
SET ROLE mon_user;
SELECT hoplock_stats_reset();
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS rows_visible FROM hoplock_stats WHERE datname = current_database();
RESET ROLE;

-- The history: one row per term, how each ended.  Renewals write nothing.
SELECT gen_label(name, generation) AS generation, owner, role,
       ended_at IS NOT NULL AS ended, how
  FROM hoplock_history WHERE name = 'mon' ORDER BY hoplock_history.generation;
SELECT gen_label(name, generation) AS generation, owner, how
  FROM hoplock_history WHERE name = 'mon-lapse' ORDER BY hoplock_history.generation;

-- Written over, deleted.
SELECT hoplock_write('mon-w', NULL, 'a', '1 h') IS NOT NULL AS written;
SELECT hoplock_write('mon-w', (SELECT handle FROM hoplock_read('mon-w')),
                     'b', '1 h') IS NOT NULL AS written;
SELECT hoplock_delete('mon-w', (SELECT handle FROM hoplock_read('mon-w')));
SELECT gen_label(name, generation) AS generation, owner, how
  FROM hoplock_history WHERE name = 'mon-w' ORDER BY hoplock_history.generation;

-- A rolled-back term leaves nothing in the history.
BEGIN;
SELECT show(hoplock_acquire('mon-rb', 'a', '1 h'));
ROLLBACK;
SELECT count(*) AS rolled_back_rows FROM hoplock_history WHERE name = 'mon-rb';

-- The events, numbered: a client that saw up to some number reads the rest.
SELECT e.event, e.owner, gen_label(e.name, e.generation) AS generation,
       e.seq > 0 AS numbered,
       e.at = CASE WHEN e.event = 'acquired' THEN h.acquired_at ELSE h.ended_at END
           AS at_matches_history
  FROM hoplock_events() AS e
  JOIN hoplock_history AS h USING (name, generation)
 WHERE e.name = 'mon'
 ORDER BY e.seq;
-- Numbers increase with time.
SELECT bool_and(seq > prev) AS increasing
  FROM (SELECT seq, lag(seq, 1, 0::bigint) OVER (ORDER BY seq) AS prev
          FROM hoplock_events()) AS s;
-- Resuming after the third event of "mon" gives the rest, and nothing
-- before.
SELECT event, owner, gen_label(name, generation) AS generation
  FROM hoplock_events((SELECT seq FROM hoplock_events() WHERE name = 'mon'
                        ORDER BY seq OFFSET 2 LIMIT 1))
 WHERE name = 'mon' ORDER BY seq;
-- Nothing after the last.
SELECT count(*) AS after_last
  FROM hoplock_events((SELECT max(seq) FROM hoplock_events()));
SELECT count(*) AS null_since_gives_nothing FROM hoplock_events(NULL);

-- Forgetting a name: its row goes, and its next term still gets a greater
-- generation.
SELECT hoplock_release('mon', 'c');
SELECT max(generation) AS mon_forgotten FROM hoplock_history WHERE name = 'mon' \gset
SELECT hoplock_forget('mon');
SELECT show(hoplock_read('mon'));
SELECT show(hoplock_acquire('mon', 'e', '1 h'));
SELECT hoplock_release('mon', 'e');
-- The floor that keeps it so is the database's: a name new to it starts
-- above every generation forgotten.
SELECT show(l), l.generation > :mon_forgotten AS above_forgotten
  FROM hoplock_acquire('mon-new', 'a', '1 h') AS l;
SELECT hoplock_release('mon-new', 'a');
-- A held term is not forgotten.
SELECT hoplock_forget('mon-lapse');
SELECT show(hoplock_read('mon-lapse'));
-- Nor is a name never used, or NULL.
SELECT hoplock_forget('mon-never');
SELECT hoplock_forget(NULL);
\echo :LAST_ERROR_SQLSTATE
-- Only for superusers and those granted it.
SET ROLE mon_user;
SELECT hoplock_forget('mon');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- Forgetting in a rolled-back transaction forgets nothing.
BEGIN;
SELECT hoplock_forget('mon');
ROLLBACK;
SELECT count(*) AS row_kept FROM hoplock_internal.lease WHERE name = 'mon';

SELECT hoplock_force_release('mon-lapse');
DROP ROLE mon_user;
