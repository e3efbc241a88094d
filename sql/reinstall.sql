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

-- DROP and CREATE EXTENSION in the same session: new relations, new type,
-- and the old state is gone with the old table.
DROP EXTENSION hoplock CASCADE;
SELECT hoplock_holder('cache');
CREATE EXTENSION hoplock;
CREATE FUNCTION show(l hoplock_lease) RETURNS text
LANGUAGE sql AS $$
    SELECT CASE WHEN l IS NULL THEN 'NULL'
                ELSE format('%s/%s/g%s', l.name, l.owner, l.generation)
           END
$$;
SELECT show(hoplock_holder('cache'));
SELECT show(hoplock_acquire('cache', 'b', '1 h'));
SELECT show(hoplock_renew('cache', 'b', '1 h'));

-- Another session drops and recreates it while this one has it cached.
SELECT dblink_exec('other', 'DROP EXTENSION hoplock CASCADE');
SELECT dblink_exec('other', 'CREATE EXTENSION hoplock');
SELECT owner, generation FROM hoplock_holder('cache');
SELECT owner, generation FROM hoplock_acquire('cache', 'c', '1 h');

SELECT dblink_disconnect('other');
