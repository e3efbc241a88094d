-- setup: install hoplock and the helpers the other regression tests use.
CREATE EXTENSION hoplock;

SELECT extversion FROM pg_extension WHERE extname = 'hoplock';

-- A lease result in one deterministic line: name/owner/generation, or NULL.
CREATE FUNCTION show(l hoplock_lease) RETURNS text
LANGUAGE sql AS $$
    SELECT CASE WHEN l IS NULL THEN 'NULL'
                ELSE format('%s/%s/g%s', l.name, l.owner, l.generation)
           END
$$;

-- Wait until the expiry worker has announced the lapse of a lease's current
-- term (at most 30 s): a takeover then never meets the worker's transaction,
-- however slow the server (under valgrind, say).  t/029 tests the race.
CREATE FUNCTION wait_expired(lease text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    g bigint := (SELECT generation FROM hoplock_read(lease));
BEGIN
    FOR i IN 1..3000 LOOP
        IF EXISTS (SELECT FROM hoplock_events(0) AS e
                    WHERE e.name = lease AND e.event = 'expired'
                      AND e.generation = g) THEN
            RETURN true;
        END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
    RETURN false;
END $$;

-- The whole lease table, to show that a failed call changed nothing.
CREATE FUNCTION lease_table_digest() RETURNS text
LANGUAGE sql AS $$
    SELECT coalesce(md5(string_agg(l::text, ',' ORDER BY l.name)), 'empty')
      FROM hoplock_internal.lease AS l
$$;

-- What the extension created, and that nothing in it is SECURITY DEFINER.
-- PostgreSQL 17 and later also record the row types of its tables and views
-- and every array type as members; implicit_type leaves them out, so that the
-- list is the same on every version.
CREATE FUNCTION implicit_type(classid oid, objid oid) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT classid = 'pg_type'::regclass
       AND (EXISTS (SELECT FROM pg_type WHERE typarray = objid)
            OR EXISTS (SELECT FROM pg_type AS t JOIN pg_class AS c ON c.oid = t.typrelid
                        WHERE t.oid = objid AND c.relkind <> 'c'))
$$;
SELECT pg_describe_object(classid, objid, objsubid) AS object
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'hoplock')
   AND deptype = 'e'
   AND NOT implicit_type(classid, objid)
 ORDER BY 1;

SELECT count(*) AS security_definer_functions
  FROM pg_proc
 WHERE prosecdef
   AND oid IN (SELECT objid FROM pg_depend
                WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'hoplock'));

-- No function is STRICT: NULL arguments raise instead of returning NULL.
SELECT proname, proisstrict, provolatile, proparallel
  FROM pg_proc
 WHERE proname LIKE 'hoplock\_%'
 ORDER BY proname, pronargs;
