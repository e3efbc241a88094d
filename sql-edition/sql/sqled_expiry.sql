-- sqled_expiry: with no worker, a lapsed term is announced by the next
-- call that looks -- a takeover, hoplock_events, hoplock_watch, or
-- hoplock_internal.expire(), which a pg_cron job may call -- once.
SELECT hoplock_position() AS p \gset

SELECT show(hoplock_acquire('sx', 'a', '50 ms'));
SELECT pg_sleep(0.1);
-- lapsed, and nothing has announced it yet
SELECT show(hoplock_holder('sx')), state FROM hoplock_internal.lease WHERE name = 'sx';
SELECT count(*) AS announced FROM hoplock_internal.event WHERE name = 'sx' AND event = 'expired';
-- the job's call announces it, once
SELECT hoplock_internal.expire('sx') AS ended;
SELECT hoplock_internal.expire('sx') AS ended_again;
SELECT event, owner FROM hoplock_events(:p) WHERE name = 'sx' ORDER BY seq;
SELECT how FROM hoplock_history WHERE name = 'sx';

-- A takeover before anything announced the lapse records it first.
SELECT show(hoplock_acquire('sx2', 'a', '50 ms'));
SELECT pg_sleep(0.1);
SELECT show(hoplock_acquire('sx2', 'b', '1 h'));
SELECT event, owner FROM hoplock_events(:p) WHERE name = 'sx2' ORDER BY seq;
SELECT gen_label(name, generation), how FROM hoplock_history WHERE name = 'sx2' ORDER BY generation;

-- hoplock_events announces what lapsed; not in a read-only transaction.
SELECT show(hoplock_acquire('sx3', 'a', '50 ms'));
SELECT pg_sleep(0.1);
BEGIN READ ONLY;
SELECT count(*) AS announced FROM hoplock_events(:p) WHERE name = 'sx3' AND event = 'expired';
COMMIT;
SELECT count(*) AS announced FROM hoplock_events(:p) WHERE name = 'sx3' AND event = 'expired';

-- A watcher wakes on a lapse: hoplock_watch looks again every 10 ms.
SELECT show(hoplock_acquire('sx4', 'a', '300 ms'));
SELECT hoplock_position() AS p2 \gset
SELECT clock_timestamp() AS t0 \gset
SELECT event, owner FROM hoplock_watch(:p2, '10 s') WHERE name = 'sx4';
SELECT clock_timestamp() - :'t0'::timestamptz BETWEEN interval '0.25 s' AND interval '5 s'
       AS woke_at_the_lapse;

-- A hold's end (min_hold) is announced the same way: "freed".
SELECT show(hoplock_acquire('sx5', 'a', '1 h', min_hold => '100 ms'));
SELECT hoplock_release('sx5', 'a');
SELECT pg_sleep(0.2);
SELECT event FROM hoplock_events(:p) WHERE name = 'sx5' ORDER BY seq;

-- Only the extension's owner may run the sweep (the pg_cron job's
-- command): other roles cannot reach hoplock_internal.
CREATE ROLE regress_sqled_other;
SET ROLE regress_sqled_other;
SELECT hoplock_internal.expire();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE regress_sqled_other;

-- A name with slots whose last term lapsed unannounced: forgotten whole,
-- the lapse announced first ("expired"); another N announces it as taken
-- over.
SELECT show(hoplock_acquire('sx6', 'a', '50 ms', slots => 2));
SELECT show(hoplock_acquire('sx7', 'a', '50 ms', slots => 2));
SELECT pg_sleep(0.1);
SELECT hoplock_forget('sx6') AS forgotten;
SELECT show(hoplock_acquire('sx7', 'b', '1 h', slots => 3));
SELECT name, slot, event FROM hoplock_events(:p) WHERE name IN ('sx6', 'sx7') ORDER BY seq;
SELECT name, slot, how FROM hoplock_history WHERE name IN ('sx6', 'sx7') ORDER BY name, generation;
SELECT count(*) AS rows FROM hoplock_internal.lease WHERE split_part(name, E'\x1f', 1) = 'sx6';
