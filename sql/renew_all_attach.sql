-- Which terms attach to an owner keepalive, and what that costs the others.
-- A lease row names its keepalive only while its term is attached, and the
-- index that finds attached terms is partial on that column: a term change
-- of a name whose terms never attach stays a HOT update.

-- HOT: a name passed between owners that have no keepalive, in one
-- transaction (the counters are the transaction's own).
SELECT show(hoplock_acquire('hot1', 'h1', '1 h'));
BEGIN;
SELECT hoplock_release('hot1', 'h1');
SELECT show(hoplock_acquire('hot1', 'h2', '1 h'));
SELECT hoplock_release('hot1', 'h2');
SELECT show(hoplock_acquire('hot1', 'h3', '1 h'));
SELECT show(hoplock_renew('hot1', 'h3', '1 h'));
SELECT pg_stat_get_xact_tuples_updated('hoplock_internal.lease'::regclass) AS updates,
       pg_stat_get_xact_tuples_hot_updated('hoplock_internal.lease'::regclass) AS hot;
COMMIT;
SELECT keepalive IS NULL AS unattached FROM hoplock_internal.lease WHERE name = 'hot1';
SELECT hoplock_release('hot1', 'h3');

-- A term begun while its owner's keepalive runs is attached to it at once:
-- it runs until the keepalive's expiry, and the next renew_all renews it
-- without looking for it (the keepalive records that every term was found).
SELECT count(*) FROM hoplock_renew_all('ka', '10 min');
SELECT attach_horizon IS NULL AS all_found
  FROM hoplock_internal.keepalive WHERE owner = 'ka';
SELECT expires_at AS ka_expires FROM hoplock_internal.keepalive WHERE owner = 'ka' \gset
SELECT name, expires_at = :'ka_expires' AS keepalive_expiry,
       handle LIKE 'h3:%' AS keepalive_handle
  FROM hoplock_acquire('ka1', 'ka', '1 h');
SELECT l.keepalive = k.id AS attached
  FROM hoplock_internal.lease AS l, hoplock_internal.keepalive AS k
 WHERE l.name = 'ka1' AND k.owner = 'ka';
-- (another owner's and another role's terms stay on their own)
SELECT show(hoplock_acquire('kb1', 'kb', '1 h'));
SELECT keepalive IS NULL AS unattached FROM hoplock_internal.lease WHERE name = 'kb1';
CREATE ROLE ka_other;
SET ROLE ka_other;
SELECT show(hoplock_acquire('ko1', 'ka', '1 h'));
RESET ROLE;
SELECT keepalive IS NULL AS unattached FROM hoplock_internal.lease WHERE name = 'ko1';
SELECT name, expires_at - clock_timestamp() > '50 min' AS ttl
  FROM hoplock_renew_all('ka', '1 h') ORDER BY name;
SELECT (hoplock_holder('ka1')).expires_at - clock_timestamp() > '50 min' AS renewed;
-- a term begun by hoplock_write attaches too
SELECT show(hoplock_write('ka2', NULL, 'ka', '1 h'));
SELECT name FROM hoplock_renew_all('ka', '1 h') ORDER BY name;

-- A term with a hold beyond the keepalive's expiry stays on its own (minus
-- the keepalive's id in its keepalive column); the next renew_all finds it
-- there and attaches it.
SELECT count(*) FROM hoplock_renew_all('ka', '10 min');
SELECT show(hoplock_acquire('ka3', 'ka', '1 h', min_hold => '30 min'));
SELECT keepalive < 0 AS on_its_own FROM hoplock_internal.lease WHERE name = 'ka3';
SELECT name FROM hoplock_renew_all('ka', '1 h') ORDER BY name;
SELECT keepalive IS NOT NULL AS attached FROM hoplock_internal.lease WHERE name = 'ka3';

-- An attached term released, and the name taken by another owner: the
-- row leaves the keepalive (its keepalive column NULL again).
SELECT hoplock_release('ka1', 'ka');
SELECT keepalive IS NULL AS unattached FROM hoplock_internal.lease WHERE name = 'ka1';
SELECT show(hoplock_acquire('ka1', 'kb', '1 h'));
SELECT name FROM hoplock_renew_all('ka', '1 h') ORDER BY name;

SELECT hoplock_force_release(name) FROM hoplock_internal.lease
 WHERE name ~ '^(k[abo][0-9])$' AND state = 'h' ORDER BY name;
DROP ROLE ka_other;
