-- sqled_trusted: the SQL edition is a trusted extension.  A database owner
-- without superuser installs it, in a schema of its choosing; everything
-- it creates belongs to that owner, whose rights its functions run with.
SELECT current_user AS su \gset
CREATE ROLE regress_sqled_owner LOGIN;
CREATE ROLE regress_sqled_app LOGIN;
CREATE DATABASE regress_sqled OWNER regress_sqled_owner;
\c regress_sqled regress_sqled_owner
SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = current_user;

-- A schema another role may create in is refused: objects planted there
-- could capture the calls made by qualified name.
CREATE SCHEMA open_leases;
GRANT CREATE ON SCHEMA open_leases TO PUBLIC;
CREATE EXTENSION hoplock SCHEMA open_leases;
\echo :LAST_ERROR_SQLSTATE

CREATE SCHEMA leases;
CREATE EXTENSION hoplock SCHEMA leases;
SELECT extname, extversion, extowner::regrole, extnamespace::regnamespace
  FROM pg_extension WHERE extname = 'hoplock';

-- Everything it created is the owner's; its SECURITY DEFINER functions
-- all pin their search_path.
SELECT count(*) FILTER (WHERE p.proowner <> current_user::regrole) AS foreign_functions,
       count(*) FILTER (WHERE p.prosecdef AND NOT p.proconfig @> '{"search_path=pg_catalog, pg_temp"}')
           AS definers_unpinned
  FROM pg_proc AS p
 WHERE p.oid IN (SELECT objid FROM pg_depend
                  WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'hoplock')
                    AND classid = 'pg_proc'::regclass);
SELECT count(*) AS foreign_relations
  FROM pg_class AS c
 WHERE c.relnamespace = 'hoplock_internal'::regnamespace AND c.relowner <> current_user::regrole;
SELECT nspowner::regrole AS internal_schema_owner FROM pg_namespace WHERE nspname = 'hoplock_internal';

-- It works, with the owner's rights: a term, its event, its fence.
SELECT (l).owner, (l).generation > 0 AS has_generation
  FROM (SELECT leases.hoplock_acquire('job', 'owner-a', '1 h') AS l) AS s;
BEGIN;
SELECT leases.hoplock_fence('job', (SELECT generation FROM leases.hoplock_holder('job')));
COMMIT;
SELECT event, name, owner FROM leases.hoplock_events(0) ORDER BY seq;

-- An application role uses the functions and reads the views; it cannot
-- touch the state, nor change the owner's term.
GRANT USAGE ON SCHEMA leases TO regress_sqled_app;
\c - regress_sqled_app
SELECT (leases.hoplock_acquire('app-job', 'app', '1 h')).owner;
SELECT name, owner, role FROM leases.hoplock_leases ORDER BY name;
SELECT * FROM hoplock_internal.lease;
\echo :LAST_ERROR_SQLSTATE
SELECT leases.hoplock_renew('job', 'owner-a', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT leases.hoplock_force_release('job');
\echo :LAST_ERROR_SQLSTATE
SELECT leases.hoplock_release('app-job', 'app');

-- The fence trigger runs with the owner's rights on the application's
-- table: it reads the generation column alone, so no function of the
-- application's (here a cast to json of a type of its own, which a
-- conversion of the whole row would call) runs with the owner's rights.
\c - regress_sqled_owner
CREATE SCHEMA app;
GRANT USAGE, CREATE ON SCHEMA app TO regress_sqled_app;
\c - regress_sqled_app
SET search_path = app;
CREATE TYPE mood AS ENUM ('calm');
CREATE FUNCTION mood_json(mood) RETURNS json LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'mood_json runs as %', current_user;
    RETURN '"calm"'::json;
END $$;
CREATE CAST (mood AS json) WITH FUNCTION mood_json(mood);
SELECT to_json('calm'::mood);
CREATE TABLE work (g bigint, m mood);
CREATE TRIGGER work_fence BEFORE INSERT OR UPDATE OR DELETE ON work
    FOR EACH ROW EXECUTE FUNCTION leases.hoplock_fenced('app-job', 'g');
SELECT generation AS app_g FROM leases.hoplock_acquire('app-job', 'app', '1 h') \gset
INSERT INTO work VALUES (:app_g, 'calm');
DELETE FROM work;
SELECT leases.hoplock_release('app-job', 'app');
DROP TABLE work;
RESET search_path;

-- The owner drops it like any extension it owns.
\c - regress_sqled_owner
DROP EXTENSION hoplock;
SELECT count(*) AS left_over FROM pg_namespace WHERE nspname = 'hoplock_internal';

\c contrib_regression :su
DROP DATABASE regress_sqled;
DROP ROLE regress_sqled_owner;
DROP ROLE regress_sqled_app;
