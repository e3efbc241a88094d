-- settings: defaults, who may change them, and bad values.

SHOW hoplock.max_ttl;
SHOW hoplock.channel;
SHOW hoplock.notify_renewals;
SHOW hoplock.log_events;

SELECT name, setting, unit, context, vartype, min_val, max_val
  FROM pg_settings
 WHERE name LIKE 'hoplock.%'
 ORDER BY name;

-- hoplock.channel is the same for every session (one stream of events per
-- lease): it is set in the configuration file, not by SET, not even by a
-- superuser.
SET hoplock.channel = 'other';
\echo :LAST_ERROR_SQLSTATE

-- Bad values are refused.  (The range in the message of the first one has
-- units from PostgreSQL 16 on: only its SQLSTATE is shown.)
\set VERBOSITY sqlstate
SET hoplock.max_ttl = 0;
\set VERBOSITY default
SET hoplock.max_ttl = '1 week';
SET hoplock.notify_renewals = 'maybe';

-- max_ttl takes units and bounds ttl at once.
SET hoplock.max_ttl = '10s';
SELECT hoplock_acquire('guc', 'a', '11 s');
SELECT show(hoplock_acquire('guc', 'a', '10 s'));
RESET hoplock.max_ttl;

-- Only superusers may change max_ttl, channel and log_events; anyone may
-- change notify_renewals.
CREATE ROLE regress_hoplock_guc;
SET ROLE regress_hoplock_guc;
SET hoplock.max_ttl = '2 d';
SET hoplock.channel = 'other';
SET hoplock.log_events = on;
SET hoplock.notify_renewals = on;
SHOW hoplock.notify_renewals;
RESET ROLE;
RESET hoplock.notify_renewals;
DROP ROLE regress_hoplock_guc;
