/* hoplock--1.0.0--1.1.0.sql: upgrade hoplock from 1.0.0 to 1.1.0 */

\echo Use "ALTER EXTENSION hoplock UPDATE TO '1.1.0'" to load this file. \quit

-- Terms are bound to the OID of the role that began them, not its name: a
-- role dropped and created again under the same name is another role.
-- Running terms of roles that no longer exist get OID 0: only a superuser
-- may change them.
ALTER TABLE hoplock_internal.lease ADD COLUMN owner_roleid oid;
UPDATE hoplock_internal.lease AS l
   SET owner_roleid = COALESCE(
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
-- logical replication of the database needs an identity for its updates
ALTER TABLE hoplock_internal.floor REPLICA IDENTITY FULL;

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

DROP VIEW @extschema@.hoplock_workers;
DROP FUNCTION hoplock_internal.worker_status();
-- Every database hoplock should serve (in every database): its expiry
-- worker, or why it has none.
CREATE FUNCTION hoplock_internal.worker_status(
    OUT datid oid, OUT datname text, OUT pid integer, OUT state text,
    OUT leases_tracked bigint, OUT next_expiry timestamptz,
    OUT last_wakeup timestamptz, OUT expiries_announced bigint,
    OUT last_lag interval, OUT started_at timestamptz,
    OUT sessions_ended bigint, OUT reason text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'hoplock_worker_status'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE VIEW @extschema@.hoplock_workers AS
    SELECT * FROM hoplock_internal.worker_status();

GRANT SELECT ON @extschema@.hoplock_workers TO PUBLIC;

COMMENT ON VIEW @extschema@.hoplock_workers IS
    'the expiry workers: one row per database hoplock should serve, with the reason when it has no worker';

-- Counters of each database, kept in shared memory (not written per call).
CREATE FUNCTION hoplock_internal.stats(
    OUT datid oid, OUT datname text, OUT terms_begun bigint,
    OUT contended bigint, OUT renewals bigint, OUT releases bigint,
    OUT force_releases bigint, OUT expiries bigint, OUT waits bigint,
    OUT wakeups bigint, OUT stats_reset timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'hoplock_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE VIEW @extschema@.hoplock_stats AS
    SELECT * FROM hoplock_internal.stats();

GRANT SELECT ON @extschema@.hoplock_stats TO PUBLIC;

COMMENT ON VIEW @extschema@.hoplock_stats IS
    'per-database counters: terms begun, contended calls, renewals, releases, force-releases, expiries announced, waits and their wake-ups';

CREATE FUNCTION @extschema@.hoplock_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'hoplock_stats_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION @extschema@.hoplock_stats_reset() FROM PUBLIC;

COMMENT ON FUNCTION @extschema@.hoplock_stats_reset() IS
    'reset this database''s counters in hoplock_stats';

-- Events are numbered per database; the history keeps the terms (not the
-- renewals) and the numbers of their first and last events, so that a
-- client can read what it missed.  Both are kept by pg_dump.
CREATE SEQUENCE hoplock_internal.event_seq;
SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.event_seq', '');

CREATE TABLE hoplock_internal.history (
    name        text COLLATE "C" NOT NULL,
    generation  bigint NOT NULL,
    owner       text COLLATE "C" NOT NULL,
    role        name NOT NULL,
    acquired_at timestamptz NOT NULL,
    begin_seq   bigint NOT NULL,
    ended_at    timestamptz,
    end_seq     bigint,
    how         text,
    CONSTRAINT history_pkey PRIMARY KEY (name, generation)
) WITH (fillfactor = 80, vacuum_truncate = false);

COMMENT ON TABLE hoplock_internal.history IS
    'the terms of the leases, newest hoplock.history_size kept: how each ended, and the numbers of its events';

SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.history', '');

CREATE VIEW @extschema@.hoplock_history WITH (security_barrier) AS
    SELECT h.name, h.owner, h.role, h.generation, h.acquired_at, h.ended_at, h.how
      FROM hoplock_internal.history AS h;

GRANT SELECT ON @extschema@.hoplock_history TO PUBLIC;

COMMENT ON VIEW @extschema@.hoplock_history IS
    'past and running terms: who led, from when to when, and how each term ended';

-- The events after number "since", as far as every transaction that could
-- still add one numbered below has ended: a client that resumes from the
-- last number it saw misses nothing.
CREATE FUNCTION @extschema@.hoplock_events(since bigint DEFAULT 0,
    OUT seq bigint, OUT event text, OUT name text, OUT owner text,
    OUT generation bigint, OUT at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'hoplock_events'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.hoplock_events(bigint) IS
    'the events after sequence number since, from the history: acquired, released, expired';

-- Forget a released or lapsed name at once (the expiry worker forgets
-- them after hoplock.released_retention); its generations stay monotone.
CREATE FUNCTION @extschema@.hoplock_forget(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'hoplock_forget'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION @extschema@.hoplock_forget(text) FROM PUBLIC;

COMMENT ON FUNCTION @extschema@.hoplock_forget(text) IS
    'remove the row of a released or lapsed lease; a later term of the name still gets a greater generation';

