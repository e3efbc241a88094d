-- security: what an ordinary role cannot do to someone else's lease, even
-- by planting objects, reusing a role's name, or choosing names.

CREATE ROLE regress_hoplock_victim;
CREATE ROLE regress_hoplock_mallory;
GRANT CREATE ON SCHEMA public TO regress_hoplock_mallory;
GRANT CREATE ON DATABASE contrib_regression TO regress_hoplock_mallory;

-- A role dropped and created again under the same name is another role: it
-- cannot end or renew the term the first one began (terms are bound to the
-- role's OID).
SET ROLE regress_hoplock_victim;
SELECT show(hoplock_acquire('sec-reborn', 'v', '1 h'));
RESET ROLE;
DROP ROLE regress_hoplock_victim;
CREATE ROLE regress_hoplock_victim;
SET ROLE regress_hoplock_victim;
SELECT hoplock_release('sec-reborn', 'v');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_renew('sec-reborn', 'v', '1 h');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT hoplock_release('sec-reborn', 'v');

-- Objects planted earlier in the search_path are never used by hoplock's
-- functions: an operator, a type and a table with the internal table's
-- name in a schema of the planter's and in pg_temp.
SET ROLE regress_hoplock_mallory;
CREATE FUNCTION public.evil_eq(text, text) RETURNS boolean
LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.evil_eq);
CREATE TABLE public.lease (name text);
CREATE TEMP TABLE lease (name text, state "char", owner text);
RESET ROLE;
SET search_path = pg_temp, public, pg_catalog;
SET ROLE regress_hoplock_mallory;
SELECT show(hoplock_acquire('sec-planted', 'm', '1 h'));
SELECT show(hoplock_acquire('sec-planted-other', 'm', '1 h'));
SELECT show(hoplock_holder('sec-planted')), show(hoplock_read('sec-planted-other'));
SELECT name, owner FROM hoplock_leases WHERE name LIKE 'sec-planted%' ORDER BY name;
SELECT count(*) AS planted_rows FROM lease;
RESET ROLE;
RESET search_path;

-- But a function planted in a schema that comes first in the search_path,
-- with argument types that match a call better, captures an unqualified
-- call (here: the literal 1 is an integer): hoplock's own functions live in
-- the schema the extension was created in, and calls should name it.
SET ROLE regress_hoplock_mallory;
CREATE SCHEMA mallory;
CREATE FUNCTION mallory.hoplock_fence(name text, generation integer) RETURNS void
LANGUAGE sql AS 'SELECT NULL::void';
RESET ROLE;
SELECT show(hoplock_acquire('sec-fence', 'a', '1 h'));
SELECT hoplock_force_release('sec-fence');
SELECT show(hoplock_acquire('sec-fence', 'b', '1 h'));
SET search_path = mallory, public;
BEGIN;
SELECT hoplock_fence('sec-fence', 1);    -- captured: "succeeds"
ROLLBACK;
BEGIN;
-- (1 is not the current generation; the message names that, and the
-- current one, whose value is hoplock's business: only its form is shown)
\set VERBOSITY sqlstate
SELECT public.hoplock_fence('sec-fence', 1);    -- qualified: 55P03
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT :'LAST_ERROR_MESSAGE' ~ '^lease "sec-fence" is at generation [0-9]+, not 1$'
       AS refused_by_hoplock;
RESET search_path;

-- Term locks are keyed by the SHA-256 digest of the name: the lock a fence
-- takes shows its first 8 bytes, so no chosen name can share another's
-- lock short of a second preimage.
SELECT show(hoplock_acquire('billing-scheduler', 'a', '1 h'));
SELECT generation AS bs1 FROM hoplock_read('billing-scheduler') \gset
BEGIN;
SELECT hoplock_fence('billing-scheduler', :bs1);
SELECT l.classid::bigint = ('x' || substr(d, 1, 8))::bit(32)::bigint AS high_32_bits,
       l.objid::bigint = ('x' || substr(d, 9, 8))::bit(32)::bigint AS low_32_bits,
       l.objsubid
  FROM pg_locks AS l,
       encode(sha256('billing-scheduler'::bytea), 'hex') AS d
 WHERE l.pid = pg_backend_pid() AND l.locktype = 'advisory';
COMMIT;

-- hoplock.max_names_per_role bounds the names one role has (a
-- superuser may set it per role); superusers are not limited.
ALTER ROLE regress_hoplock_mallory SET hoplock.max_names_per_role = 4;
SET ROLE regress_hoplock_mallory;
SET hoplock.max_names_per_role = 0;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET hoplock.max_names_per_role = 4;
SET ROLE regress_hoplock_mallory;
SELECT show(hoplock_acquire('sec-limit-1', 'm', '1 h'));
SELECT show(hoplock_acquire('sec-limit-2', 'm', '1 h'));
SELECT hoplock_acquire('sec-limit-3', 'm', '1 h');
\echo :LAST_ERROR_SQLSTATE
-- an existing name can still be taken
SELECT hoplock_release('sec-limit-1', 'm');
SELECT show(hoplock_acquire('sec-limit-1', 'm2', '1 h'));
-- but a name whose last term another role began counts as one more when
-- this role takes it over: otherwise two roles could pass names back and
-- forth, each creating new ones, with no bound
RESET ROLE;
SELECT show(hoplock_acquire('sec-limit-other', 'su', '1 h'));
SELECT hoplock_release('sec-limit-other', 'su');
SET ROLE regress_hoplock_mallory;
SELECT hoplock_acquire('sec-limit-other', 'm', '1 h');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT show(hoplock_acquire('sec-limit-su', 'su', '1 h'));
RESET hoplock.max_names_per_role;

-- hoplock_history shows the running terms from the lease table's rows in
-- state h: a function in the caller's WHERE clause (cheaper than any
-- other qual, so first if it could go below the view) sees only the rows
-- the view shows, never the lease table's others (a name with slots has a
-- row that is no term, its owner the slot count); nor can the caller
-- change hoplock.history_size, which decides whether running terms show.
RESET ROLE;
SET ROLE regress_hoplock_victim;
SELECT show(hoplock_acquire('sec-hist-slots', 'v', '1 h', slots => 2));
RESET ROLE;
SET ROLE regress_hoplock_mallory;
CREATE FUNCTION public.sec_leak(text) RETURNS boolean
LANGUAGE plpgsql STABLE COST 0.0000001 AS $$
BEGIN
    IF $1 LIKE E'\x1f%' THEN
        RAISE NOTICE 'saw a lease row that is no term: owner %', replace($1, E'\x1f', '^_');
    END IF;
    RETURN true;
END $$;
SELECT name, owner, slot, ended_at IS NULL AS running FROM hoplock_history
 WHERE public.sec_leak(owner) AND name = 'sec-hist-slots';
SET hoplock.history_size = 0;
\echo :LAST_ERROR_SQLSTATE
SELECT set_config('hoplock.history_size', '0', true);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
ALTER ROLE regress_hoplock_mallory SET hoplock.history_size = 0;
\echo :LAST_ERROR_SQLSTATE
DROP FUNCTION public.sec_leak(text);
SET ROLE regress_hoplock_victim;
SELECT hoplock_release('sec-hist-slots', 'v');
RESET ROLE;

RESET ROLE;
DROP SCHEMA mallory CASCADE;
DROP TABLE pg_temp.lease;
DROP OPERATOR public.= (text, text);
DROP FUNCTION public.evil_eq(text, text);
DROP TABLE public.lease;
REVOKE CREATE ON SCHEMA public FROM regress_hoplock_mallory;
REVOKE CREATE ON DATABASE contrib_regression FROM regress_hoplock_mallory;
SELECT hoplock_force_release(name) FROM hoplock_internal.lease
 WHERE owner_role IN ('regress_hoplock_mallory', 'regress_hoplock_victim') AND state = 'h';
ALTER ROLE regress_hoplock_mallory RESET ALL;
DROP ROLE regress_hoplock_mallory, regress_hoplock_victim;
