-- security_install_schema: where CREATE EXTENSION hoplock may go.  A role
-- that may create objects in public (and in the database) cannot make it
-- install into a schema it could plant in, nor into a schema
-- hoplock_internal, or next to objects, made beforehand.
--
-- Runs after setup (it uses nothing of it): it drops the extension, and
-- leaves it installed again, with show(), as setup does.  One of the
-- topics of the old security_install test, with security_install_planted,
-- security_install_access and security_install_settings.

-- PostgreSQL 18 names the script file and line of an error raised inside
-- an extension script; the errors themselves are what is tested.
\set SHOW_CONTEXT never

SET client_min_messages = warning;
DROP EXTENSION IF EXISTS hoplock CASCADE;
RESET client_min_messages;

CREATE ROLE regress_hoplock_planter;
GRANT CREATE ON SCHEMA public TO regress_hoplock_planter;
GRANT CREATE ON DATABASE contrib_regression TO regress_hoplock_planter;

--------------------------------------------------------------------------
-- The schema hoplock goes into must be one that only superusers own and
-- may create in (42501, nothing created): another role could plant there
-- functions that capture calls made by qualified name, such as
-- hoplock_fence(text, integer) for hoplock.hoplock_fence('x', 2).  Public,
-- where the planter may create, is refused; so is a schema the planter
-- owns, and one every role may create in.
CREATE EXTENSION hoplock;
CREATE SCHEMA si_owned AUTHORIZATION regress_hoplock_planter;
CREATE EXTENSION hoplock SCHEMA si_owned;
CREATE SCHEMA si_open;
GRANT CREATE ON SCHEMA si_open TO PUBLIC;
\set VERBOSITY terse
CREATE EXTENSION hoplock SCHEMA si_open;
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'hoplock';
DROP SCHEMA si_owned, si_open;
-- (Below, hoplock goes into public with the planter's CREATE revoked for
-- the moment.)

--------------------------------------------------------------------------
-- A schema hoplock_internal that exists already -- here made by a role
-- with CREATE on the database, with a table "lease" in it -- makes CREATE
-- EXTENSION fail (42P06): hoplock never adopts a schema, or a table, it
-- did not create.
SET ROLE regress_hoplock_planter;
CREATE SCHEMA hoplock_internal;
CREATE TABLE hoplock_internal.lease (name text PRIMARY KEY, generation bigint);
INSERT INTO hoplock_internal.lease VALUES ('planted', 1);
GRANT USAGE ON SCHEMA hoplock_internal TO PUBLIC;
GRANT ALL ON hoplock_internal.lease TO PUBLIC;
RESET ROLE;
\set VERBOSITY terse
REVOKE CREATE ON SCHEMA public FROM regress_hoplock_planter;
CREATE EXTENSION hoplock;
GRANT CREATE ON SCHEMA public TO regress_hoplock_planter;
\echo :LAST_ERROR_SQLSTATE
REVOKE CREATE ON SCHEMA public FROM regress_hoplock_planter;
CREATE EXTENSION IF NOT EXISTS hoplock;
GRANT CREATE ON SCHEMA public TO regress_hoplock_planter;
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'hoplock';
SELECT count(*) AS functions_left_behind FROM pg_proc WHERE proname LIKE 'hoplock\_%';
SELECT nspowner::regrole AS schema_owner FROM pg_namespace WHERE nspname = 'hoplock_internal';
-- Even an empty one, made by a superuser.
SET ROLE regress_hoplock_planter;
DROP SCHEMA hoplock_internal CASCADE;
RESET ROLE;
CREATE SCHEMA hoplock_internal;
\set VERBOSITY terse
REVOKE CREATE ON SCHEMA public FROM regress_hoplock_planter;
CREATE EXTENSION hoplock;
GRANT CREATE ON SCHEMA public TO regress_hoplock_planter;
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
DROP SCHEMA hoplock_internal;

--------------------------------------------------------------------------
-- An object another role made beforehand in the schema hoplock is created
-- in makes CREATE EXTENSION fail (42501) even when that role may no longer
-- create there: whoever takes a schema over must look at what is in it.
SET ROLE regress_hoplock_planter;
CREATE FUNCTION public.hoplock_holder(name text) RETURNS text
LANGUAGE sql AS $$SELECT 'planted'$$;
RESET ROLE;
REVOKE CREATE ON SCHEMA public FROM regress_hoplock_planter;
CREATE EXTENSION hoplock;
GRANT CREATE ON SCHEMA public TO regress_hoplock_planter;
-- The same object owned by a superuser, and one with the name of
-- hoplock's type, make it fail too (42723, 42710): the script never
-- replaces or adopts an object it did not make.
ALTER FUNCTION public.hoplock_holder(text) OWNER TO CURRENT_USER;
\set VERBOSITY terse
REVOKE CREATE ON SCHEMA public FROM regress_hoplock_planter;
CREATE EXTENSION hoplock;
GRANT CREATE ON SCHEMA public TO regress_hoplock_planter;
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
DROP FUNCTION public.hoplock_holder(text);
CREATE TYPE public.hoplock_lease AS (name text, owner text, generation bigint);
\set VERBOSITY terse
REVOKE CREATE ON SCHEMA public FROM regress_hoplock_planter;
CREATE EXTENSION hoplock;
GRANT CREATE ON SCHEMA public TO regress_hoplock_planter;
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
DROP TYPE public.hoplock_lease;
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'hoplock';

--------------------------------------------------------------------------
-- Clean up: as setup left it.
DROP OWNED BY regress_hoplock_planter;
DROP ROLE regress_hoplock_planter;
CREATE EXTENSION hoplock;
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'hoplock';

CREATE FUNCTION show(l hoplock_lease) RETURNS text
LANGUAGE sql SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT CASE WHEN l IS NULL THEN 'NULL'
                ELSE format('%s/%s/%s', l.name, l.owner,
                            gen_label(l.name, l.generation))
           END
$$;
