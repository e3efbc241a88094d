-- min_hold: a term released before acquired_at + min_hold keeps the name
-- from other owners until then ("once per tick").  The released event
-- comes at once; the worker announces the hold's end ("freed").

SELECT coalesce(max(seq), 0) AS mh_seq FROM hoplock_events(0) \gset

-- Bad input: refused, nothing changes.
\set VERBOSITY terse
SELECT hoplock_acquire('mh', 'a', '10 s', min_hold => '0 s');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('mh', 'a', '10 s', min_hold => '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('mh', 'a', '10 s', min_hold => '1 mon');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('mh', 'a', '10 s', min_hold => '11 s');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_wait('mh', 'a', '10 s', '0 s', min_hold => '11 s');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT hoplock_acquire('mh', 'a', '10 s', min_hold => '11 s');
SELECT count(*) AS rows FROM hoplock_internal.lease WHERE name = 'mh';

-- NULL: no hold, as without the argument.
SELECT show(hoplock_acquire('mh0', 'a', '1 h', min_hold => NULL));
SELECT hoplock_release('mh0', 'a');
SELECT show(hoplock_acquire('mh0', 'b', '1 h'));

-- A term with a hold: hoplock_leases shows when a release would free it.
SELECT show(hoplock_acquire('mh', 'a', '1 h', min_hold => '1 h'));
SELECT hold_until - acquired_at AS hold FROM hoplock_leases WHERE name = 'mh';
SELECT generation AS mh1 FROM hoplock_read('mh') \gset

-- Released early: the release is recorded, the name is kept from other
-- owners (acquire: NULL; wait: times out; write: refused) ...
SELECT hoplock_release('mh', 'a', :mh1);
SELECT show(hoplock_acquire('mh', 'b', '1 h'));
SELECT show(hoplock_wait('mh', 'b', '1 h', '0.2 s'));
SELECT hoplock_write('mh', NULL, 'b', '1 h') IS NULL AS write_refused;
SELECT owner, expired, hold_until - acquired_at AS hold, remaining
  FROM hoplock_leases WHERE name = 'mh';
SELECT how FROM hoplock_history WHERE name = 'mh' AND generation = :mh1;
-- ... the worker does not forget it ...
SELECT hoplock_forget('mh') AS forgotten;
-- ... and its owner may take it again (a new term).
SELECT show(hoplock_acquire('mh', 'a', '1 h'));
SELECT hold_until IS NULL AS no_hold FROM hoplock_leases WHERE name = 'mh';
SELECT hoplock_release('mh', 'a');
SELECT show(hoplock_acquire('mh', 'b', '1 h'));
SELECT hoplock_release('mh', 'b');

-- The same owner in a role without the privileges of the term's role is
-- another owner to the hold.
CREATE ROLE mh_other;
GRANT EXECUTE ON FUNCTION hoplock_acquire(text, text, interval, boolean, text, interval, integer) TO mh_other;
SELECT show(hoplock_acquire('mh2', 'a', '1 h', min_hold => '1 h'));
SELECT hoplock_release('mh2', 'a');
SET ROLE mh_other;
SELECT show(hoplock_acquire('mh2', 'a', '1 h'));
RESET ROLE;

-- force_release, the operator's override, ends a hold: "freed" at once,
-- counted among the force-releases.
SELECT force_releases AS mh_fr FROM hoplock_stats
 WHERE datname = current_database() \gset
SELECT hoplock_force_release('mh2') AS forced;
SELECT count(*) AS listed FROM hoplock_leases WHERE name = 'mh2';
SELECT force_releases - :mh_fr AS counted FROM hoplock_stats
 WHERE datname = current_database();
SELECT show(hoplock_acquire('mh2', 'b', '1 h'));
SELECT hoplock_force_release('mh2') AS forced;
REVOKE ALL ON FUNCTION hoplock_acquire(text, text, interval, boolean, text, interval, integer) FROM mh_other;
DROP ROLE mh_other;

-- A hold runs out: the worker announces it ("freed", at hold_until), and
-- a waiting candidate of another owner, asleep until then, takes the name.
SELECT show(hoplock_acquire('mh3', 'a', '1 h', min_hold => '1 s'));
SELECT hoplock_release('mh3', 'a');
SELECT show(hoplock_wait('mh3', 'b', '1 h', '30 s'));
SELECT hoplock_release('mh3', 'b');

-- Expiry is unchanged: a term that lapses (its first ttl covers its hold)
-- frees the name at once.
SELECT show(hoplock_acquire('mh4', 'a', '1 s', min_hold => '1 s'));
SELECT pg_sleep(1.1);
SELECT show(hoplock_acquire('mh4', 'b', '1 h'));

-- A term that lapsed keeps nothing: hoplock_leases shows no hold_until for
-- it, also before its expiry is announced (here the renewal that made it
-- lapse first is not committed, so the worker cannot announce it yet).
SELECT show(hoplock_acquire('mh5', 'a', '1 h', min_hold => '1 h'));
BEGIN;
SELECT show(hoplock_renew('mh5', 'a', '10 ms'));
SELECT pg_sleep(0.05);
SELECT expired, hold_until FROM hoplock_leases WHERE name = 'mh5';
SELECT show(hoplock_acquire('mh5', 'b', '1 h'));
COMMIT;

-- The events, in order: released (the hold kept), freed (by force, or by
-- the worker when the hold ran out), then the next term.
SELECT event, name, owner,
       CASE WHEN event = 'freed' AND name = 'mh3'
            THEN at = (SELECT max(h.acquired_at) + interval '1 s'
                                 FROM hoplock_history AS h
                                WHERE h.name = 'mh3' AND h.owner = 'a')
       END AS at_hold_end
  FROM hoplock_events(:mh_seq)
 WHERE name IN ('mh', 'mh2', 'mh3', 'mh4')
 ORDER BY seq;
SELECT hoplock_release('mh4', 'b');

-- The released event of a term released in its hold says when the name
-- frees (free_at: the hold's end); no other event has it.
SELECT event, name, owner,
       free_at - (SELECT h.acquired_at FROM hoplock_history AS h
                   WHERE h.name = e.name AND h.generation = e.generation) AS free_after
  FROM hoplock_events(:mh_seq) AS e
 WHERE name IN ('mh', 'mh2', 'mh3') AND (event = 'released' OR free_at IS NOT NULL)
 ORDER BY seq;
