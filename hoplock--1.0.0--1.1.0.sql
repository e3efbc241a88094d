/* hoplock--1.0.0--1.1.0.sql: upgrade hoplock from 1.0.0 to 1.1.0 */

\echo Use "ALTER EXTENSION hoplock UPDATE TO '1.1.0'" to load this file. \quit

-- Terms are bound to the OID of the role that began them, not its name: a
-- role dropped and created again under the same name is another role.
-- Running terms of roles that no longer exist get OID 0: only a superuser
-- may change them.
ALTER TABLE hoplock_internal.lease ADD COLUMN owner_roleid oid;
UPDATE hoplock_internal.lease AS l
   SET owner_roleid = pg_catalog.coalesce(
           (SELECT r.oid FROM pg_catalog.pg_authid AS r
             WHERE r.rolname OPERATOR(pg_catalog.=) l.owner_role),
           0::pg_catalog.oid);
ALTER TABLE hoplock_internal.lease ALTER COLUMN owner_roleid SET NOT NULL;
ALTER TABLE hoplock_internal.lease SET (vacuum_truncate = false);

COMMENT ON COLUMN hoplock_internal.lease.owner_role IS
    'name of the role that began the term, as it was then';
COMMENT ON COLUMN hoplock_internal.lease.owner_roleid IS
    'OID of the role that began the term: only its members may change or fence it';

-- The generation floor (see hoplock--1.1.0.sql).  No row yet: until the
-- first term of 1.1.0 writes one, generations follow 1.0.0's timeline
-- layout, so they stay above every generation 1.0.0 handed out.
CREATE TABLE hoplock_internal.floor (
    system_identifier bigint NOT NULL,
    database          oid NOT NULL,
    base_era          bigint NOT NULL,
    base_timeline     bigint NOT NULL,
    last_timeline     bigint NOT NULL,
    forgotten         bigint NOT NULL,
    CONSTRAINT floor_check CHECK (base_era OPERATOR(pg_catalog.>=) 0
                                  AND base_timeline OPERATOR(pg_catalog.>=) 0
                                  AND last_timeline OPERATOR(pg_catalog.>=) base_timeline
                                  AND forgotten OPERATOR(pg_catalog.>=) 0)
) WITH (vacuum_truncate = false);

CREATE UNIQUE INDEX floor_one_row ON hoplock_internal.floor ((true));

COMMENT ON TABLE hoplock_internal.floor IS
    'generation floor: era of timeline T is base_era + T - base_timeline in the cluster and database named';

SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.floor', '');

CREATE FUNCTION hoplock_internal.blocker(name text)
RETURNS integer
AS 'MODULE_PATHNAME', 'hoplock_blocker'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

CREATE OR REPLACE VIEW @extschema@.hoplock_leases WITH (security_barrier) AS
    SELECT l.name,
           l.owner,
           l.generation,
           l.acquired_at,
           l.renewed_at,
           l.expires_at,
           l.expires_at OPERATOR(pg_catalog.<=) c.now AS expired,
           CASE WHEN l.expires_at OPERATOR(pg_catalog.>) c.now
                THEN l.expires_at OPERATOR(pg_catalog.-) c.now
                ELSE '0'::pg_catalog.interval
           END AS remaining,
           l.owner_role AS role,
           l.session_pid IS NOT NULL AS session_bound,
           l.session_pid AS holder_pid,
           hoplock_internal.blocker(l.name) AS blocked_by
      FROM hoplock_internal.lease AS l
           CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) AS c
     WHERE l.state OPERATOR(pg_catalog.<>) 'r'::"char";

-- A trigger function for users' own tables: a row written with a
-- generation other than the term that holds the lease now is rejected
-- (55P03), under the same lock as hoplock_fence.
CREATE FUNCTION @extschema@.hoplock_fenced()
RETURNS trigger
AS 'MODULE_PATHNAME', 'hoplock_fenced'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.hoplock_fenced() IS
    'trigger: hoplock_fenced(lease, generation_column) rejects rows whose generation does not hold the lease now';
