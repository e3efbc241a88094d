-- truncate_log: TRUNCATE of the event log by a superuser (a documented
-- fork: the hooks leave a "written" marker) takes events away below the
-- numbers that remain; a reader resuming from a number before them must
-- be told (HL001), not handed the events after the TRUNCATE as if none
-- were missing.  (hoplock_events returned only 'tl2 acquired', silently
-- missing tl1's acquired and released, once the worker had sent them
-- before the TRUNCATE.)
SELECT hoplock_release('tl0', 'a') FROM hoplock_acquire('tl0', 'a', '1 h');
SELECT hoplock_position() AS p0 \gset
SELECT hoplock_release('tl1', 'a') FROM hoplock_acquire('tl1', 'a', '1 h');
-- the worker has sent them (as it has, in practice, by the time anyone
-- truncates the log)
DO $$
BEGIN
  FOR i IN 1..1000 LOOP
    EXIT WHEN (SELECT delivered FROM hoplock_internal.delivery) >= hoplock_position();
    PERFORM pg_sleep(0.01);
  END LOOP;
END $$;
TRUNCATE hoplock_internal.event;
SELECT (hoplock_acquire('tl2', 'a', '1 h')).owner;
\set VERBOSITY sqlstate
SELECT name, event FROM hoplock_events(:p0) ORDER BY seq;
\set VERBOSITY default
