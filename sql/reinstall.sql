-- reinstall: each backend caches the extension's relations and row type;
-- the cache follows invalidations, even ones that arrive in the middle of a
-- call, and DROP / CREATE EXTENSION.

CREATE EXTENSION IF NOT EXISTS dblink;

SELECT show(hoplock_acquire('cache', 'a', '1 h'));

-- Another session changes the table in the middle of a statement; the
-- invalidation is processed while the next call locks the table.
SELECT dblink_connect('other',
           format('dbname=%s port=%s host=%s', current_database(),
                  current_setting('port'),
                  split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT dblink_exec('other', 'ALTER TABLE hoplock_internal.lease SET (fillfactor = 50)'),
       show(hoplock_holder('cache'));
SELECT dblink_exec('other', 'ALTER TABLE hoplock_internal.lease SET (fillfactor = 50)'),
       show(hoplock_renew('cache', 'a', '1 h'));
SELECT dblink_exec('other', 'ALTER TYPE hoplock_lease OWNER TO CURRENT_USER'),
       show(hoplock_renew('cache', 'a', '1 h'));

-- A damaged row type is refused, not trusted.
ALTER TYPE hoplock_lease ADD ATTRIBUTE extra int;
SELECT hoplock_holder('cache');
\echo :LAST_ERROR_SQLSTATE
ALTER TYPE hoplock_lease DROP ATTRIBUTE extra;
SELECT hoplock_holder('cache');
\echo :LAST_ERROR_SQLSTATE
-- And so are the set-returning functions' row types: a column of another
-- type would get datums of the type hoplock puts there.
ALTER TYPE hoplock_event ALTER ATTRIBUTE name TYPE bigint;
SELECT seq, name FROM hoplock_events(0);
\echo :LAST_ERROR_SQLSTATE
SELECT seq, name FROM hoplock_watch(0, '0');
\echo :LAST_ERROR_SQLSTATE
ALTER TYPE hoplock_event ALTER ATTRIBUTE name TYPE text;
SELECT count(*) > 0 AS events FROM hoplock_events(0);
ALTER TYPE hoplock_event ALTER ATTRIBUTE at TYPE timestamptz(0);
SELECT count(*) FROM hoplock_events(0);
\echo :LAST_ERROR_SQLSTATE
ALTER TYPE hoplock_event ALTER ATTRIBUTE at TYPE timestamptz;
SELECT count(*) > 0 AS events FROM hoplock_events(0);
ALTER TYPE hoplock_event ADD ATTRIBUTE extra int;
SELECT count(*) FROM hoplock_events(0);
\echo :LAST_ERROR_SQLSTATE
ALTER TYPE hoplock_renewed ALTER ATTRIBUTE slot TYPE text;
SELECT name FROM hoplock_renew_all('a', '1 h');
\echo :LAST_ERROR_SQLSTATE
ALTER TYPE hoplock_renewed DROP ATTRIBUTE slot;
SELECT name FROM hoplock_renew_all('a', '1 h');
\echo :LAST_ERROR_SQLSTATE

-- DROP and CREATE EXTENSION in the same session: new relations, new type,
-- and the old state is gone with the old table (and its history: show()
-- counts terms from g1 again).
DROP EXTENSION hoplock CASCADE;
SELECT hoplock_holder('cache');
CREATE EXTENSION hoplock;
CREATE FUNCTION show(l hoplock_lease) RETURNS text
LANGUAGE sql SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT CASE WHEN l IS NULL THEN 'NULL'
                ELSE format('%s/%s/%s', l.name, l.owner,
                            gen_label(l.name, l.generation))
           END
$$;
SELECT show(hoplock_holder('cache'));
SELECT show(hoplock_acquire('cache', 'b', '1 h'));
SELECT show(hoplock_renew('cache', 'b', '1 h'));

-- Another session drops and recreates it while this one has it cached.
SELECT dblink_exec('other', 'DROP EXTENSION hoplock CASCADE');
SELECT dblink_exec('other', 'CREATE EXTENSION hoplock');
SELECT owner, gen_label(name, generation) AS generation FROM hoplock_holder('cache');
SELECT owner, gen_label(name, generation) AS generation
  FROM hoplock_acquire('cache', 'c', '1 h');

SELECT dblink_disconnect('other');

-- A term begun in the transaction that drops the extension commits with
-- it: its event, recorded at the commit, goes with the event log.
BEGIN;
SELECT hoplock_acquire('doomed', 'a', '1 h') IS NOT NULL AS acquired;
DROP EXTENSION hoplock CASCADE;
COMMIT;
CREATE EXTENSION hoplock;
SELECT hoplock_holder('doomed') IS NULL AS gone;
