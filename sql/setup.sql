-- setup: install hoplock and the helpers the other regression tests use.
-- (Into public, which only superusers may create in: PostgreSQL 15's
-- default, made so on 13 and 14 too, where hoplock would warn.)
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
CREATE EXTENSION hoplock;

SELECT extversion FROM pg_extension WHERE extname = 'hoplock';

-- The generation g of lease n in a deterministic form.  A generation is a
-- fencing token whose value is hoplock's own business (1, 2, 3 today; in
-- 1.2 about 3.6e18, different on every run), so the tests show its ordinal
-- among the terms of the name instead: g1 for its first term, g2 for the
-- next, ...  What they check is unchanged: which term it is, that a new term
-- is later than every earlier one (a generation lower than one before it
-- gets a lower ordinal), that a renewal keeps it.  The ordinal is counted
-- from hoplock_history, which has one row per term, the running one
-- included, written in the term's own transaction (so the transaction sees
-- it, and a rollback takes it back) and unique per (name, generation).  It
-- is deterministic in this suite: no history row goes away -- forgetting a
-- name keeps its history, the worker trims only beyond hoplock.history_size
-- (10000 terms; the suite begins a few hundred), and DROP EXTENSION drops
-- history and leases together (reinstall, where generations start again).
-- A value one above the name's newest generation (a "future" generation a
-- test passes on purpose) shows as gN+1; any other value that is not a
-- generation of the name as g?, which no expected output contains.
CREATE FUNCTION gen_label(n text, g bigint) RETURNS text
LANGUAGE sql SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT CASE
        WHEN g IS NULL THEN NULL
        WHEN EXISTS (SELECT FROM hoplock_history AS h
                      WHERE h.name = n AND h.generation = g)
            THEN 'g' || (SELECT count(*) FROM hoplock_history AS h
                          WHERE h.name = n AND h.generation <= g)
        WHEN g = (SELECT max(h.generation) + 1 FROM hoplock_history AS h
                   WHERE h.name = n)
            THEN 'g' || (SELECT count(*) FROM hoplock_history AS h
                          WHERE h.name = n) || '+1'
        ELSE 'g?'
    END
$$;

-- (These helpers resolve names as pg_catalog, public, pg_temp:
-- security_install_planted calls them with objects planted in public
-- and pg_temp.)

-- A lease result in one deterministic line: name/owner/g<ordinal>, or NULL.
CREATE FUNCTION show(l hoplock_lease) RETURNS text
LANGUAGE sql SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT CASE WHEN l IS NULL THEN 'NULL'
                ELSE format('%s/%s/%s', l.name, l.owner,
                            gen_label(l.name, l.generation))
           END
$$;

-- A message with every number in it that is a generation of lease n (or
-- one above its newest) replaced by its label; quoted names are left alone.
CREATE FUNCTION gen_text(n text, msg text) RETURNS text
LANGUAGE sql SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT coalesce(string_agg(CASE WHEN m[1] !~ '^[1-9][0-9]{0,18}$' THEN m[1]
                           WHEN m[1]::numeric > 9223372036854775807 THEN m[1]
                           WHEN gen_label(n, m[1]::bigint) = 'g?' THEN m[1]
                           ELSE gen_label(n, m[1]::bigint) END, '' ORDER BY i),
                    msg)
      FROM regexp_matches(msg, '("[^"]*"|[0-9]+|[^"0-9]+|")', 'g')
           WITH ORDINALITY AS r(m, i)
$$;

-- Run a statement that must fail, and raise its error again with the
-- generations of lease n in its message and detail shown by gen_text (the
-- same SQLSTATE: the transaction aborts as it would have).  The statement
-- is a format() string, args its arguments: the real generations, read
-- with \gset.  A statement that does not fail returns 'no error'.
CREATE FUNCTION raises(n text, stmt text, VARIADIC args bigint[] DEFAULT '{}')
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    code text;
    msg text;
    detail text;
    hint text;
BEGIN
    EXECUTE format(stmt, VARIADIC args::text[]);
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                            detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    msg := gen_text(n, msg);
    detail := gen_text(n, detail);
    IF detail = '' AND hint = '' THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = msg;
    ELSIF hint = '' THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = msg, DETAIL = detail;
    ELSIF detail = '' THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = msg, HINT = hint;
    END IF;
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = msg, DETAIL = detail,
                          HINT = hint;
END $$;

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
