-- security_install_planted: what a role that may create objects in public
-- (and in its own pg_temp) cannot do to hoplock by planting functions,
-- operators, types and tables -- not at CREATE EXTENSION, not at ALTER
-- EXTENSION UPDATE, not later: they are never used by hoplock's install
-- scripts, functions or trigger -- nor by replacing, altering or dropping
-- hoplock's own objects or reaching its C code.
--
-- Runs after setup (it uses its gen_text and implicit_type): it drops
-- and creates the extension itself, and leaves it installed, with show(),
-- as setup does.  One of the topics of the old security_install test,
-- with security_install_schema, security_install_access and
-- security_install_settings.

-- PostgreSQL 18 names the script file and line of an error raised inside
-- an extension script; the errors themselves are what is tested.
\set SHOW_CONTEXT never

SET client_min_messages = warning;
DROP EXTENSION IF EXISTS hoplock CASCADE;
RESET client_min_messages;

CREATE ROLE regress_hoplock_planter;
CREATE ROLE regress_hoplock_leader;
CREATE ROLE regress_hoplock_intruder LOGIN;
GRANT CREATE ON SCHEMA public TO regress_hoplock_planter;
GRANT CREATE ON DATABASE contrib_regression TO regress_hoplock_planter;

-- Every extension member, and what belongs to one (columns' defaults,
-- constraints, indexes, view rules, row and array types): the objects they
-- refer to that are not the extension's own.  Only the extension and its
-- schema may appear: a planted function, operator or type that a view,
-- constraint or column had been bound to would be listed.
CREATE FUNCTION foreign_references() RETURNS SETOF text
LANGUAGE sql AS $$
    WITH RECURSIVE parts(classid, objid) AS (
        SELECT d.classid, d.objid FROM pg_catalog.pg_depend AS d
         WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
           AND d.refobjid OPERATOR(pg_catalog.=)
               (SELECT e.oid FROM pg_catalog.pg_extension AS e
                 WHERE e.extname OPERATOR(pg_catalog.=) 'hoplock')
        UNION
        SELECT d.classid, d.objid FROM pg_catalog.pg_depend AS d
          JOIN parts AS p ON d.refclassid OPERATOR(pg_catalog.=) p.classid
                         AND d.refobjid OPERATOR(pg_catalog.=) p.objid
         WHERE d.deptype OPERATOR(pg_catalog.=) ANY ('{a,i}'::pg_catalog."char"[])
    )
    SELECT DISTINCT pg_catalog.pg_describe_object(d.refclassid, d.refobjid, 0)
      FROM pg_catalog.pg_depend AS d
      JOIN parts AS p ON d.classid OPERATOR(pg_catalog.=) p.classid
                     AND d.objid OPERATOR(pg_catalog.=) p.objid
     WHERE NOT EXISTS (SELECT FROM parts AS q
                        WHERE q.classid OPERATOR(pg_catalog.=) d.refclassid
                          AND q.objid OPERATOR(pg_catalog.=) d.refobjid)
     ORDER BY 1
$$;

--------------------------------------------------------------------------
-- Planted objects: each function and operator records its use in
-- public.captured.  In public: functions and operators with the names and
-- argument types of those the install scripts and the views use, types
-- and tables with the names of hoplock's column types and tables.  In this
-- session's pg_temp (searched first for tables and types, unless listed):
-- tables named as hoplock's, and domains named as the column types.
SET ROLE regress_hoplock_planter;
CREATE TABLE public.captured (what text);
GRANT SELECT, INSERT ON public.captured TO PUBLIC;
CREATE FUNCTION public.planted(what text) RETURNS boolean
LANGUAGE sql AS $$INSERT INTO public.captured VALUES (what) RETURNING true$$;

CREATE FUNCTION public.hoplock_fence(name text, generation integer) RETURNS void
LANGUAGE sql AS $$SELECT public.planted('hoplock_fence(text, integer)')$$;
CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz
LANGUAGE sql AS $$SELECT public.planted('clock_timestamp()'); SELECT pg_catalog.clock_timestamp()$$;
CREATE FUNCTION public.now() RETURNS timestamptz
LANGUAGE sql AS $$SELECT public.planted('now()'); SELECT pg_catalog.now()$$;
CREATE FUNCTION public.pg_extension_config_dump(text, text) RETURNS void
LANGUAGE sql AS $$SELECT public.planted('pg_extension_config_dump(text, text)')$$;
CREATE FUNCTION public.pg_extension_config_dump(regclass, text) RETURNS void
LANGUAGE sql AS $$SELECT public.planted('pg_extension_config_dump(regclass, text)')$$;
CREATE FUNCTION public.serve_this_database() RETURNS void
LANGUAGE sql AS $$SELECT public.planted('serve_this_database()')$$;
CREATE FUNCTION public.blocker(name text) RETURNS integer
LANGUAGE sql AS $$SELECT public.planted('blocker(text)'); SELECT 0$$;
CREATE FUNCTION public.worker_status() RETURNS SETOF record
LANGUAGE sql AS $$SELECT public.planted('worker_status()'); SELECT NULL::record WHERE false$$;
CREATE FUNCTION public.coalesce(oid, oid) RETURNS oid
LANGUAGE sql AS $$SELECT public.planted('coalesce(oid, oid)'); SELECT $1$$;

CREATE FUNCTION public.p_text_eq(text, text) RETURNS boolean
LANGUAGE sql AS $$SELECT public.planted('= (text, text)') AND $1 OPERATOR(pg_catalog.=) $2$$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.p_text_eq);
CREATE FUNCTION public.p_char_ne("char", "char") RETURNS boolean
LANGUAGE sql AS $$SELECT public.planted('<> ("char", "char")') AND $1 OPERATOR(pg_catalog.<>) $2$$;
CREATE OPERATOR public.<> (LEFTARG = "char", RIGHTARG = "char", FUNCTION = public.p_char_ne);
CREATE FUNCTION public.p_char_eq("char", "char") RETURNS boolean
LANGUAGE sql AS $$SELECT public.planted('= ("char", "char")') AND $1 OPERATOR(pg_catalog.=) $2$$;
CREATE OPERATOR public.= (LEFTARG = "char", RIGHTARG = "char", FUNCTION = public.p_char_eq);
CREATE FUNCTION public.p_tstz_le(timestamptz, timestamptz) RETURNS boolean
LANGUAGE sql AS $$SELECT public.planted('<= (timestamptz, timestamptz)') AND $1 OPERATOR(pg_catalog.<=) $2$$;
CREATE OPERATOR public.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.p_tstz_le);
CREATE FUNCTION public.p_tstz_gt(timestamptz, timestamptz) RETURNS boolean
LANGUAGE sql AS $$SELECT public.planted('> (timestamptz, timestamptz)') AND $1 OPERATOR(pg_catalog.>) $2$$;
CREATE OPERATOR public.> (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.p_tstz_gt);
CREATE FUNCTION public.p_tstz_mi(timestamptz, timestamptz) RETURNS interval
LANGUAGE sql AS $$SELECT public.planted('- (timestamptz, timestamptz)'); SELECT $1 OPERATOR(pg_catalog.-) $2$$;
CREATE OPERATOR public.- (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.p_tstz_mi);
CREATE FUNCTION public.p_int84_gt(bigint, integer) RETURNS boolean
LANGUAGE sql AS $$SELECT public.planted('> (bigint, integer)') AND $1 OPERATOR(pg_catalog.>) $2$$;
CREATE OPERATOR public.> (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = public.p_int84_gt);
CREATE FUNCTION public.p_int84_ge(bigint, integer) RETURNS boolean
LANGUAGE sql AS $$SELECT public.planted('>= (bigint, integer)') AND $1 OPERATOR(pg_catalog.>=) $2$$;
CREATE OPERATOR public.>= (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = public.p_int84_ge);
CREATE FUNCTION public.p_int8_ge(bigint, bigint) RETURNS boolean
LANGUAGE sql AS $$SELECT public.planted('>= (bigint, bigint)') AND $1 OPERATOR(pg_catalog.>=) $2$$;
CREATE OPERATOR public.>= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = public.p_int8_ge);
CREATE FUNCTION public.p_name_eq(name, name) RETURNS boolean
LANGUAGE sql AS $$SELECT public.planted('= (name, name)') AND $1 OPERATOR(pg_catalog.=) $2$$;
CREATE OPERATOR public.= (LEFTARG = name, RIGHTARG = name, FUNCTION = public.p_name_eq);

CREATE DOMAIN public."char" AS integer;
CREATE DOMAIN public.timestamptz AS integer;
CREATE DOMAIN public.name AS integer;
CREATE DOMAIN public.oid AS text;
CREATE TABLE public.lease (name text, state "char", owner text);
CREATE TABLE public.floor (system_identifier bigint);
CREATE TABLE public.history (name text, generation bigint);
CREATE SEQUENCE public.event_seq;

CREATE TEMP TABLE lease (name text, state "char", owner text);
CREATE TEMP TABLE floor (system_identifier bigint);
CREATE TEMP TABLE history (name text, generation bigint);
CREATE TEMP SEQUENCE event_seq;
CREATE DOMAIN pg_temp.text AS pg_catalog.varchar CHECK (VALUE IS NULL);
CREATE DOMAIN pg_temp."char" AS pg_catalog.int4;
CREATE DOMAIN pg_temp.timestamptz AS pg_catalog.int4;
CREATE DOMAIN pg_temp.name AS pg_catalog.int4;
CREATE DOMAIN pg_temp.oid AS pg_catalog.int4;
CREATE DOMAIN pg_temp.void AS pg_catalog.int4;
RESET ROLE;

-- The planted objects work: an unqualified operator in a query whose
-- search_path lists public before pg_catalog is the planted one.
SET search_path = public, pg_catalog;
SELECT 'x'::pg_catalog.text = 'x'::pg_catalog.text AS captured_by_planted_operator;
RESET search_path;
SELECT what FROM public.captured;
TRUNCATE public.captured;

--------------------------------------------------------------------------
-- CREATE EXTENSION into public, with the planter's CREATE revoked but its
-- objects in place, is refused (42501).
REVOKE CREATE ON SCHEMA public FROM regress_hoplock_planter;
\set VERBOSITY terse
CREATE EXTENSION hoplock;
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default

-- With the objects in public given to a superuser (as if it had made
-- them), it succeeds, binds nothing planted, and calls none of it; the
-- objects in pg_temp stay the planter's.  They go back afterwards.
CREATE TABLE si_given (kind pg_catalog.text, object pg_catalog.oid);
INSERT INTO si_given
SELECT 'FUNCTION', p.oid
  FROM pg_catalog.pg_proc AS p
 WHERE p.pronamespace OPERATOR(pg_catalog.=) 'public'::regnamespace
   AND p.proowner OPERATOR(pg_catalog.=) 'regress_hoplock_planter'::regrole
UNION ALL
SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END,
       c.oid
  FROM pg_catalog.pg_class AS c
 WHERE c.relnamespace OPERATOR(pg_catalog.=) 'public'::regnamespace
   AND c.relowner OPERATOR(pg_catalog.=) 'regress_hoplock_planter'::regrole
   AND c.relkind::pg_catalog.text OPERATOR(pg_catalog.=) ANY ('{r,S}')
UNION ALL
SELECT 'DOMAIN', t.oid
  FROM pg_catalog.pg_type AS t
 WHERE t.typnamespace OPERATOR(pg_catalog.=) 'public'::regnamespace
   AND t.typowner OPERATOR(pg_catalog.=) 'regress_hoplock_planter'::regrole
   AND t.typtype::pg_catalog.text OPERATOR(pg_catalog.=) 'd'
UNION ALL
SELECT 'OPERATOR', o.oid
  FROM pg_catalog.pg_operator AS o
 WHERE o.oprnamespace OPERATOR(pg_catalog.=) 'public'::regnamespace
   AND o.oprowner OPERATOR(pg_catalog.=) 'regress_hoplock_planter'::regrole;
CREATE FUNCTION give_public_objects(to_role regrole) RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r record;
    n integer := 0;
BEGIN
    FOR r IN SELECT kind, CASE kind
                              WHEN 'FUNCTION' THEN object::regprocedure::text
                              WHEN 'OPERATOR' THEN object::regoperator::text
                              WHEN 'DOMAIN' THEN object::regtype::text
                              ELSE object::regclass::text
                          END AS object
               FROM public.si_given LOOP
        EXECUTE format('ALTER %s %s OWNER TO %s', r.kind, r.object, to_role);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;
SELECT give_public_objects(current_user::regrole) AS given;
CREATE EXTENSION hoplock;
SELECT give_public_objects('regress_hoplock_planter') AS given_back;
GRANT CREATE ON SCHEMA public TO regress_hoplock_planter;
SELECT * FROM foreign_references();
SELECT count(*) AS planted_uses FROM public.captured;
SELECT a.attrelid::regclass AS "table", count(*) AS columns,
       count(*) FILTER (WHERE t.typnamespace = 'pg_catalog'::regnamespace) AS of_pg_catalog_types
  FROM pg_attribute AS a JOIN pg_type AS t ON t.oid = a.atttypid
 WHERE a.attrelid IN ('hoplock_internal.lease'::regclass, 'hoplock_internal.floor'::regclass,
                      'hoplock_internal.history'::regclass, 'hoplock_internal.branch'::regclass)
   AND a.attnum > 0
 GROUP BY 1 ORDER BY 1;

CREATE FUNCTION show(l hoplock_lease) RETURNS pg_catalog.text
LANGUAGE sql SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT CASE WHEN l IS NULL THEN 'NULL'
                ELSE format('%s/%s/%s', l.name, l.owner,
                            gen_label(l.name, l.generation))
           END
$$;

-- Every function, the views and the trigger, called by an ordinary role
-- with the planted objects first in its search_path (pg_temp first for
-- tables and types, public before pg_catalog for the rest): the state
-- goes to hoplock's tables, and nothing planted is used.
CREATE TABLE si_work (id int, generation bigint);
GRANT ALL ON si_work TO regress_hoplock_leader;
CREATE TRIGGER si_work_fenced BEFORE INSERT OR UPDATE OR DELETE ON si_work
    FOR EACH ROW EXECUTE FUNCTION public.hoplock_fenced('si-planted', 'generation');
SET ROLE regress_hoplock_leader;
SET search_path = pg_temp, public, pg_catalog;
SELECT public.show(public.hoplock_acquire('si-planted', 'a', '1 h'::pg_catalog.interval));
SELECT generation AS sp1 FROM public.hoplock_read('si-planted') \gset
SELECT public.show(public.hoplock_renew('si-planted', 'a', '1 h'::pg_catalog.interval, :sp1::pg_catalog.int8));
SELECT public.show(public.hoplock_holder('si-planted')), public.show(public.hoplock_read('si-planted'));
BEGIN;
SELECT public.hoplock_fence('si-planted', :sp1::pg_catalog.int8);
INSERT INTO public.si_work VALUES (1, :sp1);
COMMIT;
-- (the messages name generations: shown as gen_text() shows them)
\set VERBOSITY sqlstate
INSERT INTO public.si_work VALUES (2, :sp1 + 1);
\echo :LAST_ERROR_SQLSTATE
SELECT public.gen_text('si-planted', :'LAST_ERROR_MESSAGE') AS error;
BEGIN;
SELECT public.hoplock_fence('si-planted', (:sp1 + 1)::pg_catalog.int8);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT public.gen_text('si-planted', :'LAST_ERROR_MESSAGE') AS error;
\set VERBOSITY default
SELECT public.show(public.hoplock_wait('si-planted', 'b', '1 h'::pg_catalog.interval, '0'::pg_catalog.interval));
SELECT name, owner, public.gen_label(name, generation) AS generation, expired,
       remaining > '0'::pg_catalog.interval AS running, role, blocked_by
  FROM public.hoplock_leases;
SELECT public.hoplock_release('si-planted', 'a', :sp1::pg_catalog.int8);
SELECT public.show(public.hoplock_write('si-planted', NULL, 'c', '1 h'::pg_catalog.interval));
SELECT public.hoplock_delete('si-planted', (SELECT handle FROM public.hoplock_read('si-planted')));
SELECT public.show(public.hoplock_acquire('si-planted', 'd', '1 h'::pg_catalog.interval, session_bound => true));
SELECT name, owner, public.gen_label(name, generation) AS generation, how
  FROM public.hoplock_history AS h ORDER BY h.generation;
SELECT event, name, owner, public.gen_label(name, generation) AS generation
  FROM public.hoplock_events(0::pg_catalog.int8) ORDER BY seq;
RESET search_path;
RESET ROLE;
SET search_path = pg_temp, public, pg_catalog;
SELECT public.hoplock_force_release('si-planted');
SELECT public.hoplock_forget('si-planted');
RESET search_path;
SELECT count(*) AS planted_uses FROM public.captured;
SELECT (SELECT count(*) FROM pg_temp.lease) + (SELECT count(*) FROM pg_temp.floor)
     + (SELECT count(*) FROM pg_temp.history) + (SELECT count(*) FROM public.lease)
     + (SELECT count(*) FROM public.floor) + (SELECT count(*) FROM public.history) AS planted_rows,
       (SELECT is_called FROM pg_temp.event_seq) AS temp_seq_used,
       (SELECT is_called FROM public.event_seq) AS public_seq_used;
SELECT name, state, owner, gen_label(name, generation) AS generation
  FROM hoplock_internal.lease;
SELECT count(*) AS floor_rows FROM hoplock_internal.floor;
SELECT id, gen_label('si-planted', generation) AS generation FROM si_work;

--------------------------------------------------------------------------
-- The same for the upgrade script: 1.0.0 installed, then updated, with
-- everything planted still in place.
DROP TABLE si_work;
DROP FUNCTION show(hoplock_lease);
-- (1.0.0's script has no check; the update's warns, naming the schema.)
DROP EXTENSION hoplock;
REVOKE CREATE ON SCHEMA public FROM regress_hoplock_planter;
CREATE EXTENSION hoplock VERSION '1.0.0';
GRANT CREATE ON SCHEMA public TO regress_hoplock_planter;
\set VERBOSITY terse
ALTER EXTENSION hoplock UPDATE;
\set VERBOSITY default
SELECT extversion FROM pg_extension WHERE extname = 'hoplock';
SELECT * FROM foreign_references();
SELECT count(*) AS planted_uses FROM public.captured;
SET ROLE regress_hoplock_leader;
SET search_path = pg_temp, public, pg_catalog;
SELECT public.hoplock_acquire('si-upgraded', 'a', '1 h'::pg_catalog.interval) IS NOT NULL AS acquired;
SELECT count(*) AS running FROM public.hoplock_leases WHERE NOT expired;
SELECT public.hoplock_release('si-upgraded', 'a');
RESET search_path;
RESET ROLE;
SELECT count(*) AS planted_uses FROM public.captured;
SELECT name, state, owner FROM hoplock_internal.lease;
-- (the domains in pg_temp go: they would capture this file's own types)
SET ROLE regress_hoplock_planter;
DROP DOMAIN pg_temp.text, pg_temp."char", pg_temp.timestamptz, pg_temp.name, pg_temp.oid, pg_temp.void;
RESET ROLE;

-- Planting more after the install changes nothing either: a function
-- hoplock_fence(text, integer) in pg_temp and hoplock_fenced() in a schema
-- of the planter's, first in the search_path, are not what the trigger or
-- the qualified calls use.
SET ROLE regress_hoplock_planter;
CREATE SCHEMA regress_planted;
GRANT USAGE ON SCHEMA regress_planted TO PUBLIC;
CREATE FUNCTION regress_planted.hoplock_fenced() RETURNS trigger
LANGUAGE plpgsql AS $$BEGIN PERFORM public.planted('hoplock_fenced()'); RETURN NEW; END$$;
CREATE FUNCTION regress_planted.hoplock_fence(name text, generation bigint) RETURNS void
LANGUAGE sql AS $$SELECT public.planted('regress_planted.hoplock_fence(text, bigint)')$$;
CREATE FUNCTION pg_temp.hoplock_fence(name text, generation bigint) RETURNS void
LANGUAGE sql AS $$SELECT public.planted('pg_temp.hoplock_fence(text, bigint)')$$;
RESET ROLE;
CREATE TABLE si_late (generation bigint);
GRANT ALL ON si_late TO regress_hoplock_leader;
CREATE TRIGGER si_late_fenced BEFORE INSERT ON si_late
    FOR EACH ROW EXECUTE FUNCTION public.hoplock_fenced('si-late', 'generation');
SET ROLE regress_hoplock_leader;
SET search_path = regress_planted, pg_temp, public, pg_catalog;
SELECT public.hoplock_acquire('si-late', 'a', '1 h'::pg_catalog.interval) IS NOT NULL AS acquired;
SELECT generation AS g FROM public.hoplock_read('si-late') \gset
INSERT INTO public.si_late VALUES (:g);
\set VERBOSITY sqlstate
INSERT INTO public.si_late VALUES (:g + 1);
\echo :LAST_ERROR_SQLSTATE
SELECT public.gen_text('si-late', :'LAST_ERROR_MESSAGE') AS error;
BEGIN;
SELECT public.hoplock_fence('si-late', (:g + 1)::pg_catalog.int8);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT public.gen_text('si-late', :'LAST_ERROR_MESSAGE') AS error;
\set VERBOSITY default
SELECT public.hoplock_release('si-late', 'a');
RESET search_path;
RESET ROLE;
SELECT count(*) AS planted_uses FROM public.captured;
SELECT count(*) AS rows_written FROM si_late;
DROP TABLE si_late;

--------------------------------------------------------------------------
-- hoplock's objects themselves: the planter, who may create in public
-- where they live, cannot replace, alter, drop or re-grant them, add its
-- own function to the extension, or reach hoplock's C functions (such as
-- the ones not granted to PUBLIC) through a function of its own.
SET ROLE regress_hoplock_planter;
CREATE OR REPLACE FUNCTION public.hoplock_fence(name text, generation bigint) RETURNS void
LANGUAGE sql AS $$SELECT NULL::void$$;
\echo :LAST_ERROR_SQLSTATE
ALTER FUNCTION public.hoplock_fence(text, bigint) SECURITY DEFINER;
\echo :LAST_ERROR_SQLSTATE
DROP FUNCTION public.hoplock_release(text, text);
\echo :LAST_ERROR_SQLSTATE
ALTER TYPE public.hoplock_lease ADD ATTRIBUTE extra int;
\echo :LAST_ERROR_SQLSTATE
CREATE OR REPLACE VIEW public.hoplock_leases AS SELECT 1 AS name;
\echo :LAST_ERROR_SQLSTATE
ALTER EXTENSION hoplock ADD FUNCTION public.planted(text);
\echo :LAST_ERROR_SQLSTATE
ALTER EXTENSION hoplock UPDATE;
\echo :LAST_ERROR_SQLSTATE
DROP EXTENSION hoplock;
\echo :LAST_ERROR_SQLSTATE
GRANT EXECUTE ON FUNCTION public.hoplock_force_release(text), public.hoplock_forget(text),
      public.hoplock_stats_reset() TO PUBLIC;
\echo :LAST_ERROR_SQLSTATE
CREATE FUNCTION public.my_forget(text) RETURNS boolean
AS 'hoplock', 'hoplock_forget' LANGUAGE C;
\echo :LAST_ERROR_SQLSTATE
CREATE FUNCTION public.my_force_release(text) RETURNS boolean
AS '$libdir/hoplock', 'hoplock_force_release' LANGUAGE C;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT p.oid::regprocedure AS function,
       has_function_privilege('regress_hoplock_intruder', p.oid, 'EXECUTE') AS intruder_may_call
  FROM pg_proc AS p
 WHERE p.proname IN ('hoplock_force_release', 'hoplock_forget', 'hoplock_stats_reset')
 ORDER BY p.proname;
SELECT p.oid::regprocedure AS function, p.prosecdef, p.prosrc
  FROM pg_proc AS p
 WHERE p.oid = 'public.hoplock_fence(text, bigint)'::regprocedure;
SELECT count(*) AS members FROM pg_depend
 WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'hoplock') AND deptype = 'e'
   AND NOT implicit_type(classid, objid);

--------------------------------------------------------------------------
-- Clean up: the planter's objects go with DROP OWNED, which fails if
-- anything of hoplock's depends on one of them.
DROP FUNCTION foreign_references(), give_public_objects(regrole);
DROP TABLE si_given;
DROP OWNED BY regress_hoplock_planter;
DROP OWNED BY regress_hoplock_leader;
DROP OWNED BY regress_hoplock_intruder;
DROP ROLE regress_hoplock_planter, regress_hoplock_leader, regress_hoplock_intruder;
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'hoplock';
SELECT * FROM hoplock_internal.lease WHERE name LIKE 'si-%' AND state = 'h';

CREATE FUNCTION show(l hoplock_lease) RETURNS text
LANGUAGE sql SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT CASE WHEN l IS NULL THEN 'NULL'
                ELSE format('%s/%s/%s', l.name, l.owner,
                            gen_label(l.name, l.generation))
           END
$$;
