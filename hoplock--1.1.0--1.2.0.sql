/* hoplock--1.1.0--1.2.0.sql: upgrade hoplock from 1.1.0 to 1.2.0 */

\echo Use "ALTER EXTENSION hoplock UPDATE TO '1.2.0'" to load this file. \quit

-- The schema hoplock goes into must be one that only superusers may create
-- objects in or rename: another role could plant functions there that
-- capture the calls clients make by qualified name (src/install.c).
CREATE FUNCTION hoplock_check_schema(updating boolean) RETURNS void
LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'hoplock_check_schema';
SELECT hoplock_check_schema(true);
DROP FUNCTION hoplock_check_schema(boolean);

-- Each change to the SQL objects lands here and in hoplock--1.2.0.sql
-- together, and t/022_upgrade.pl checks that an upgraded extension is the
-- same, object for object, as one installed afresh.

-- Handles are row versions (a hybrid clock with the branch's tag), not
-- transaction IDs, which a promoted standby reuses.
ALTER TABLE hoplock_internal.lease ADD COLUMN version bigint;
COMMENT ON COLUMN hoplock_internal.lease.version IS
    'version of the row, new at every write: the handle (NULL: not written since 1.1)';

COMMENT ON TABLE hoplock_internal.floor IS
    'the greatest generation of a forgotten name (forgotten); the era columns are 1.1''s, read once to start 1.2''s numbering above them';

-- The branches of this database's lease state (hoplock--1.2.0.sql says
-- more).  The first term after the update begins the first one, above
-- every value 1.1 handed out.
CREATE TABLE hoplock_internal.branch (
    tag               integer NOT NULL,
    started_at        timestamptz NOT NULL,
    floor             bigint NOT NULL,
    parent_tag        integer,
    parent_started_at timestamptz,
    fork_point        bigint,
    reason            text NOT NULL,
    incarnation       bigint NOT NULL,
    timeline          bigint NOT NULL,
    system_identifier bigint NOT NULL,
    database          oid NOT NULL,
    CONSTRAINT branch_check CHECK (tag OPERATOR(pg_catalog.>=) 1
                                   AND tag OPERATOR(pg_catalog.<=) 2047
                                   AND floor OPERATOR(pg_catalog.>) 0)
) WITH (vacuum_truncate = false);

COMMENT ON TABLE hoplock_internal.branch IS
    'branches of the lease state: values are minted as c << 11 | tag, c above the floor of their branch';

SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.branch', '');

-- The event log: every event, with its number, recorded in the transaction
-- of the change (written by hoplock, below the executor, as the lease row).
-- No term change sends a NOTIFY itself: the database's worker sends those
-- of committed events, in number order and in batches, and records how far
-- it got in hoplock_internal.delivery (see "Events" in the README).
-- hoplock_events and hoplock_watch read it by number.  Events are kept
-- for hoplock.event_retention after their delivery.  Kept by pg_dump.
CREATE TABLE hoplock_internal.event (
    seq         bigint NOT NULL,
    event       text NOT NULL,
    name        text COLLATE "C" NOT NULL,
    owner       text COLLATE "C" NOT NULL,
    generation  bigint NOT NULL,
    expires_at  timestamptz NOT NULL,
    at          timestamptz NOT NULL,
    value       text COLLATE "C",
    free_at     timestamptz,
    -- A mass expiry's "expired" events, recorded as one row: this row is
    -- the last term's event, and these arrays (null, or all of one length)
    -- carry the others', oldest first, numbered consecutively below seq
    -- (the i-th of n: seq - ((n - i + 1) << 11)); their "at" is their
    -- expires_at.  No other event is numbered between them.
    earlier_names        text[] COLLATE "C",
    earlier_owners       text[] COLLATE "C",
    earlier_generations  bigint[],
    earlier_expires_at   timestamptz[],
    earlier_values       text[] COLLATE "C",
    CONSTRAINT event_pkey PRIMARY KEY (seq)
) WITH (vacuum_truncate = false);

COMMENT ON TABLE hoplock_internal.event IS
    'the events of the leases, by number: recorded in the transaction of the change, sent as NOTIFY by the worker after its commit';

-- The arrays are stored out of line, uncompressed: compressing a mass
-- expiry's thousand names would hold up the commit that announces them.
ALTER TABLE hoplock_internal.event
    ALTER COLUMN earlier_names SET STORAGE EXTERNAL,
    ALTER COLUMN earlier_owners SET STORAGE EXTERNAL,
    ALTER COLUMN earlier_generations SET STORAGE EXTERNAL,
    ALTER COLUMN earlier_expires_at SET STORAGE EXTERNAL,
    ALTER COLUMN earlier_values SET STORAGE EXTERNAL;

SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.event', '');

-- How far the worker has sent the event log (at most one row; none: from
-- the beginning), the greatest number it dropped from the log after
-- hoplock.event_retention, and, while a mass expiry's lease rows are being
-- written after its events, a number below those events (expiries_after:
-- an "expired" event above it whose term's row still says running was
-- announced already).  The install script writes no row, so a restore
-- brings back exactly the one that was dumped.
CREATE TABLE hoplock_internal.delivery (
    delivered      bigint NOT NULL,
    delivered_at   timestamptz NOT NULL,
    pruned_through bigint NOT NULL,
    expiries_after bigint,
    CONSTRAINT delivery_check CHECK (delivered OPERATOR(pg_catalog.>=) 0
                                     AND pruned_through OPERATOR(pg_catalog.>=) 0)
) WITH (vacuum_truncate = false);

CREATE UNIQUE INDEX delivery_one_row ON hoplock_internal.delivery ((true));
-- logical replication of the database needs an identity for its updates
ALTER TABLE hoplock_internal.delivery REPLICA IDENTITY FULL;

COMMENT ON TABLE hoplock_internal.delivery IS
    'the greatest event number the worker has sent (delivered), the greatest it dropped from the log (pruned_through), and a number below the events of a mass expiry whose lease rows are not all written yet (expiries_after)';

SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.delivery', '');

-- 1.2.0 adds two types to the extension's schema: a type (or table, view,
-- sequence) of that name there already stops the update, with the hint.
DO $$
DECLARE
    taken pg_catalog.text;
BEGIN
    SELECT pg_catalog.string_agg(pg_catalog.format_type(t.oid, NULL), ', ')
      INTO taken
      FROM pg_catalog.pg_type AS t
     WHERE t.typnamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
       AND t.typname OPERATOR(pg_catalog.=) ANY ('{hoplock_event,hoplock_renewed}'::pg_catalog.name[]);
    IF taken IS NOT NULL THEN
        RAISE EXCEPTION 'hoplock 1.2.0 creates types named hoplock_event and hoplock_renewed in schema @extschema@, where % exists', taken
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Rename it or move it to another schema, then update the extension.';
    END IF;
END $$;

-- What hoplock_events and hoplock_watch return, a row per event.  A named
-- type, not OUT parameters: PostgreSQL builds the row shape of a function
-- with OUT parameters from pg_proc's argument arrays three times in every
-- statement that calls it (parse analysis, twice, and the executor),
-- some 28,000 instructions a call of these two; a named type's comes from
-- the type cache.
CREATE TYPE @extschema@.hoplock_event AS (
    seq         bigint,
    event       text,
    name        text,
    owner       text,
    generation  bigint,
    at          timestamptz,
    value       text,
    free_at     timestamptz,
    slot        integer
);

COMMENT ON TYPE @extschema@.hoplock_event IS 'one event of the event log, as hoplock_events and hoplock_watch return it';

-- The events after number "after", as soon as there are any, waiting up to
-- "timeout": the event stream without LISTEN (behind a transaction pooler).
CREATE FUNCTION @extschema@.hoplock_watch(after bigint, timeout interval)
RETURNS SETOF @extschema@.hoplock_event
AS 'MODULE_PATHNAME', 'hoplock_watch'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.hoplock_watch(bigint, interval) IS
    'the events after number after, waiting up to timeout for the first: the event stream for a client that cannot LISTEN';

-- The number to resume from: every event up to it has committed.
CREATE FUNCTION @extschema@.hoplock_position()
RETURNS bigint
AS 'MODULE_PATHNAME', 'hoplock_position'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.hoplock_position() IS
    'the newest event number a reader may resume from: no event at or below it can still appear';

-- 1.1 kept its events in the history only: they go into the log, and count
-- as sent (1.1 sent them in their own transactions).  Those of the terms
-- the history had dropped are gone: a number below the oldest kept is
-- reported as such (pruned_through).
INSERT INTO hoplock_internal.event (seq, event, name, owner, generation, expires_at, at)
SELECT h.begin_seq, 'acquired', h.name, h.owner, h.generation,
       COALESCE(h.ended_at, h.acquired_at), h.acquired_at
  FROM hoplock_internal.history AS h
UNION ALL
SELECT h.end_seq,
       CASE WHEN h.how OPERATOR(pg_catalog.=) ANY ('{expired,taken over}'::text[])
            THEN 'expired' ELSE 'released' END,
       h.name, h.owner, h.generation, h.ended_at, h.ended_at
  FROM hoplock_internal.history AS h
 WHERE h.end_seq IS NOT NULL AND h.ended_at IS NOT NULL AND h.how IS NOT NULL
ON CONFLICT DO NOTHING;

INSERT INTO hoplock_internal.delivery (delivered, delivered_at, pruned_through)
SELECT COALESCE(pg_catalog.max(e.seq), 0), pg_catalog.now(),
       COALESCE(pg_catalog.min(e.seq) OPERATOR(pg_catalog.-) 1, 0)
  FROM hoplock_internal.event AS e;

-- hoplock_stats counts the events sent and the transactions that sent them.
DROP VIEW @extschema@.hoplock_stats;
DROP FUNCTION hoplock_internal.stats();
CREATE FUNCTION hoplock_internal.stats(
    OUT datid oid, OUT datname text, OUT terms_begun bigint,
    OUT contended bigint, OUT renewals bigint, OUT releases bigint,
    OUT force_releases bigint, OUT expiries bigint, OUT waits bigint,
    OUT wakeups bigint, OUT events_delivered bigint, OUT deliveries bigint,
    OUT fences_refused bigint, OUT writes_refused bigint,
    OUT stats_reset timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'hoplock_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE VIEW @extschema@.hoplock_stats AS
    SELECT * FROM hoplock_internal.stats();

GRANT SELECT ON @extschema@.hoplock_stats TO PUBLIC;

COMMENT ON VIEW @extschema@.hoplock_stats IS
    'per-database counters: terms begun, contended calls, renewals, releases, force-releases, expiries announced, waits and their wake-ups, events sent and the transactions that sent them, fences and fenced writes refused to terms that no longer held their lease';

COMMENT ON FUNCTION @extschema@.hoplock_events(bigint) IS
    'the events after number since, from the event log: acquired, renewed (with hoplock.notify_renewals), released, expired';

COMMENT ON TABLE hoplock_internal.history IS
    'the terms of the leases that ended, written as each ends, newest hoplock.history_size kept, the running ones (their lease rows) counted: how each ended (begin_seq and end_seq: the numbers of its events in 1.1; 0 and NULL since 1.2, whose events are in the event log; 1.1 wrote a row as a term began too)';

-- Three functions are replaced below, their arguments or columns changed
-- (hoplock_wait, hoplock_acquire, hoplock_events): no object of the user's
-- may depend on an old one, and the privileges granted on an old one go to
-- the new one (restored at the end of this script).
DO $$
DECLARE
    r record;
    deps pg_catalog.text;
BEGIN
    FOR r IN SELECT v.key, v.old::pg_catalog.regprocedure AS old
               FROM (VALUES
                   ('wait', '@extschema@.hoplock_wait(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval, pg_catalog.bool)'),
                   ('acquire', '@extschema@.hoplock_acquire(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.bool)'),
                   ('events', '@extschema@.hoplock_events(pg_catalog.int8)')) AS v(key, old)
    LOOP
        SELECT pg_catalog.string_agg(pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid), ', ')
          INTO deps
          FROM pg_catalog.pg_depend AS d
         WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND d.refobjid OPERATOR(pg_catalog.=) r.old
           AND d.deptype OPERATOR(pg_catalog.=) 'n';
        IF deps IS NOT NULL THEN
            RAISE EXCEPTION 'hoplock 1.2.0 replaces function %, on which % depend', r.old, deps
                USING ERRCODE = 'dependent_objects_still_exist',
                      HINT = 'Drop them, update the extension, then create them again with the new function.';
        END IF;
        PERFORM pg_catalog.set_config('hoplock_update.' OPERATOR(pg_catalog.||) r.key,
            coalesce((SELECT p.proacl::pg_catalog.text FROM pg_catalog.pg_proc AS p
                       WHERE p.oid OPERATOR(pg_catalog.=) r.old), ''), true);
    END LOOP;
END $$;

-- hoplock_wait: candidates with a priority.  A new argument is a new
-- function: the old one goes.
DROP FUNCTION @extschema@.hoplock_wait(text, text, interval, interval, boolean);

CREATE FUNCTION @extschema@.hoplock_wait(name text, owner text, ttl interval, timeout interval,
                                         session_bound boolean DEFAULT false,
                                         priority integer DEFAULT 0,
                                         value text DEFAULT NULL,
                                         preempt boolean DEFAULT false,
                                         min_hold interval DEFAULT NULL,
                                         slots integer DEFAULT 1)
RETURNS @extschema@.hoplock_lease
AS 'MODULE_PATHNAME', 'hoplock_wait'
LANGUAGE C VOLATILE PARALLEL UNSAFE;


COMMENT ON FUNCTION @extschema@.hoplock_wait(text, text, interval, interval, boolean, integer, text, boolean, interval, integer) IS
    'acquire the lease as soon as it can be had, as a candidate of the given priority (with preempt, asking a holder of lower priority to step down); NULL after timeout';

-- The sessions waiting in hoplock_wait: a freed lease goes to the one
-- with the highest priority, among equals to the one waiting longest.
CREATE FUNCTION hoplock_internal.candidates(
    OUT name text, OUT owner text, OUT priority integer,
    OUT waiting_since timestamptz, OUT pid integer, OUT role text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'hoplock_candidates'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE VIEW @extschema@.hoplock_candidates AS
    SELECT c.name, c.owner, c.priority, c.waiting_since, c.pid, c.role
      FROM hoplock_internal.candidates() AS c
     ORDER BY c.name, c.priority DESC, c.waiting_since, c.pid;

GRANT SELECT ON @extschema@.hoplock_candidates TO PUBLIC;

COMMENT ON VIEW @extschema@.hoplock_candidates IS
    'the sessions waiting in hoplock_wait, per lease in the order a freed lease goes to them';

-- hoplock_handoff: a term handed to a waiting candidate.
CREATE FUNCTION @extschema@.hoplock_handoff(name text, owner text, generation bigint,
                                            to_owner text DEFAULT NULL)
RETURNS @extschema@.hoplock_lease
AS 'MODULE_PATHNAME', 'hoplock_handoff'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.hoplock_handoff(text, text, bigint, text) IS
    'end the owner''s term of the given generation and begin the next for a waiting candidate (to_owner''s, or the first); the new term, or NULL if there is no such candidate';

-- The leader's value: a column of the lease and of the event log, an
-- attribute of hoplock_lease, an argument of hoplock_acquire (a new
-- argument is a new function: the old one goes), hoplock_proclaim, a
-- column of hoplock_leases and of hoplock_events.
ALTER TABLE hoplock_internal.lease ADD COLUMN value text COLLATE "C";
ALTER TABLE hoplock_internal.lease ADD COLUMN step_down_at timestamptz;
ALTER TABLE hoplock_internal.lease ADD COLUMN step_down_to text COLLATE "C";
ALTER TABLE hoplock_internal.lease ADD COLUMN priority integer;
ALTER TABLE hoplock_internal.lease ADD COLUMN handed_pid integer;
ALTER TABLE hoplock_internal.lease ADD COLUMN handed_start timestamptz;
ALTER TABLE hoplock_internal.lease ADD COLUMN hold_until timestamptz;
ALTER TABLE hoplock_internal.lease ADD COLUMN keepalive bigint;
COMMENT ON COLUMN hoplock_internal.lease.keepalive IS
    'the owner keepalive (hoplock_internal.keepalive.id) the running term takes its expiry from; minus that id: the term left it (renewed by itself) and the owner''s next hoplock_renew_all attaches it again; NULL: none';
COMMENT ON COLUMN hoplock_internal.lease.hold_until IS
    'acquired_at + min_hold of the term (hoplock_acquire, hoplock_wait): released before then, the name is kept from other owners until then; NULL: no hold, or its end announced';
COMMENT ON COLUMN hoplock_internal.lease.handed_pid IS
    'the waiting session (its pid, and handed_start its start) a handoff wrote the running term for, until it takes it; NULL: none (the worker ends a handed term nobody took)';
COMMENT ON COLUMN hoplock_internal.lease.handed_start IS
    'the start of the session handed_pid names';
COMMENT ON COLUMN hoplock_internal.lease.priority IS
    'the priority of the candidate the running term was granted to (hoplock_wait); 0 or NULL: hoplock_acquire';
COMMENT ON COLUMN hoplock_internal.lease.step_down_at IS
    'when hoplock_request_step_down asked the holder of the running term to hand it over; NULL if nobody did';
COMMENT ON COLUMN hoplock_internal.lease.step_down_to IS
    'the owner it was asked to hand over to; NULL: any candidate';
COMMENT ON COLUMN hoplock_internal.lease.value IS
    'the value the holder proclaimed for its term (its address, say): hoplock_proclaim, or value => at acquire; NULL if none';

ALTER TYPE @extschema@.hoplock_lease ADD ATTRIBUTE value text;
ALTER TYPE @extschema@.hoplock_lease ADD ATTRIBUTE step_down boolean;
COMMENT ON COLUMN @extschema@.hoplock_lease.value IS
    'the value its holder proclaimed (hoplock_proclaim, or value => at acquire); empty if none';
COMMENT ON COLUMN @extschema@.hoplock_lease.step_down IS
    'a step-down of this term was requested (hoplock_request_step_down): hand it over';

DROP FUNCTION @extschema@.hoplock_acquire(text, text, interval, boolean);
CREATE FUNCTION @extschema@.hoplock_acquire(name text, owner text, ttl interval,
                                            session_bound boolean DEFAULT false,
                                            value text DEFAULT NULL,
                                            min_hold interval DEFAULT NULL,
                                            slots integer DEFAULT 1)
RETURNS @extschema@.hoplock_lease
AS 'MODULE_PATHNAME', 'hoplock_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.hoplock_acquire(text, text, interval, boolean, text, interval, integer) IS
    'start a new term of the lease (with slots: in a free slot), or extend the owner''s own; NULL if other owners hold it (or keep it: min_hold)';

CREATE FUNCTION @extschema@.hoplock_proclaim(name text, owner text, generation bigint, value text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'hoplock_proclaim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.hoplock_proclaim(text, text, bigint, text) IS
    'publish a value (an address, a version) for the owner''s term of the given generation, without a new term; NULL clears it; false if the term is not the owner''s';

CREATE FUNCTION @extschema@.hoplock_request_step_down(name text, to_owner text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'hoplock_request_step_down'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION @extschema@.hoplock_request_step_down(text, text) FROM PUBLIC;

COMMENT ON FUNCTION @extschema@.hoplock_request_step_down(text, text) IS
    'ask the holder of the running term to hand it over (to to_owner, if given): a step_down event, and step_down in its next renewal; false if the lease is not held';

-- Zombie writes, counted: the fences and fenced writes refused to each
-- term after it lost its lease, kept in shared memory (the most recent
-- 1,024 terms of the server), for hoplock_history and hoplock_leases.
CREATE FUNCTION hoplock_internal.refusals(
    OUT name text, OUT generation bigint, OUT fences bigint, OUT writes bigint,
    OUT first_at timestamptz, OUT last_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'hoplock_refusals'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

-- hoplock_history counts them per term (a new last column).
-- The running terms are their lease rows (state h): a term's row in the
-- history is written when it ends.  A running term's row that 1.1 wrote
-- as it began (kept by the upgrade, or by a restored 1.1 dump) stands in
-- for its lease row until the term ends.  With no history kept
-- (hoplock.history_size = 0), no running term is shown either.
CREATE FUNCTION hoplock_internal.history_kept()
RETURNS boolean
AS 'MODULE_PATHNAME', 'hoplock_history_kept'
LANGUAGE C STABLE PARALLEL SAFE;

CREATE OR REPLACE VIEW @extschema@.hoplock_history WITH (security_barrier) AS
    SELECT pg_catalog.split_part(h.name, E'\x1f', 1) COLLATE "C" AS name,
           h.owner, h.role, h.generation, h.acquired_at, h.ended_at, h.how,
           coalesce(r.fences OPERATOR(pg_catalog.+) r.writes, 0) AS refused_writes,
           CASE WHEN pg_catalog.strpos(h.name, E'\x1f') OPERATOR(pg_catalog.>) 0
                THEN pg_catalog.split_part(h.name, E'\x1f', 2)::pg_catalog.int4 END AS slot
      FROM (SELECT e.name, e.owner, e.role, e.generation, e.acquired_at,
                   e.ended_at, e.how
              FROM hoplock_internal.history AS e
            UNION ALL
            SELECT l.name, l.owner, l.owner_role, l.generation, l.acquired_at,
                   NULL::pg_catalog.timestamptz, NULL::pg_catalog.text
              FROM hoplock_internal.lease AS l
             WHERE l.state OPERATOR(pg_catalog.=) 'h'::"char"
               AND hoplock_internal.history_kept()
               AND NOT EXISTS (SELECT FROM hoplock_internal.history AS o
                                WHERE o.name OPERATOR(pg_catalog.=) l.name
                                  AND o.generation OPERATOR(pg_catalog.=) l.generation)) AS h
           LEFT JOIN hoplock_internal.refusals() AS r
             ON (r.name COLLATE "C") OPERATOR(pg_catalog.=) h.name
            AND r.generation OPERATOR(pg_catalog.=) h.generation;

COMMENT ON VIEW @extschema@.hoplock_history IS
    'past and running terms: who led, from when to when, how each term ended, and the writes refused to it after it lost its lease';

-- Owner keepalives (hoplock_renew_all): one row per (role, owner) whose
-- running terms attached to it take their expiry from it, so that one
-- update renews them all.  A lapsed keepalive is never renewed: the next
-- hoplock_renew_all begins another (a new id); the worker announces the
-- lapsed one's terms and deletes it.  A lease row names its keepalive
-- only while its term is attached (NULL otherwise), and the only index that
-- finds attached terms is partial on that column, so that a term change of
-- a name whose terms never attach stays a HOT update.
CREATE SEQUENCE hoplock_internal.keepalive_id_seq;
SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.keepalive_id_seq', '');

CREATE TABLE hoplock_internal.keepalive (
    id            bigint NOT NULL,
    owner_roleid  oid NOT NULL,
    owner         text COLLATE "C" NOT NULL,
    renewed_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    version       bigint NOT NULL,
    attach_horizon bigint,
    CONSTRAINT keepalive_pkey PRIMARY KEY (id)
) WITH (fillfactor = 50, vacuum_truncate = false);

COMMENT ON TABLE hoplock_internal.keepalive IS
    'owner keepalives: the terms whose lease row names one in its keepalive column run until its expires_at (hoplock_renew_all renews it)';

SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.keepalive', '');

COMMENT ON COLUMN hoplock_internal.keepalive.attach_horizon IS
    'a transaction id: a term begun by a transaction before it may have missed the keepalive until that transaction ends; NULL: none';

CREATE INDEX keepalive_by_owner ON hoplock_internal.keepalive (owner_roleid, owner);

CREATE INDEX lease_by_keepalive ON hoplock_internal.lease (keepalive)
    WHERE keepalive IS NOT NULL;

CREATE OR REPLACE VIEW @extschema@.hoplock_leases WITH (security_barrier) AS
    SELECT pg_catalog.split_part(l.name, E'\x1f', 1) COLLATE "C" AS name,
           l.owner,
           l.generation,
           l.acquired_at,
           GREATEST(l.renewed_at, k.renewed_at) AS renewed_at,
           COALESCE(k.expires_at, l.expires_at) AS expires_at,
           l.state OPERATOR(pg_catalog.<>) 'r'::"char"
               AND COALESCE(k.expires_at, l.expires_at) OPERATOR(pg_catalog.<=) c.now AS expired,
           CASE WHEN COALESCE(k.expires_at, l.expires_at) OPERATOR(pg_catalog.>) c.now
                THEN COALESCE(k.expires_at, l.expires_at) OPERATOR(pg_catalog.-) c.now
                ELSE '0'::pg_catalog.interval
           END AS remaining,
           l.owner_role AS role,
           l.session_pid IS NOT NULL AS session_bound,
           l.session_pid AS holder_pid,
           hoplock_internal.blocker(l.name) AS blocked_by,
           l.value,
           l.step_down_at,
           l.step_down_to,
           coalesce(l.priority, 0) AS priority,
           coalesce(r.refused, 0) AS refused_writes,
           CASE WHEN l.hold_until OPERATOR(pg_catalog.>) c.now
                     AND (l.state OPERATOR(pg_catalog.=) 'r'::"char"
                          OR COALESCE(k.expires_at, l.expires_at) OPERATOR(pg_catalog.>) c.now)
                THEN l.hold_until
           END AS hold_until,
           CASE WHEN pg_catalog.strpos(l.name, E'\x1f') OPERATOR(pg_catalog.>) 0
                THEN pg_catalog.split_part(l.name, E'\x1f', 2)::pg_catalog.int4 END AS slot
      FROM hoplock_internal.lease AS l
           CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) AS c
           LEFT JOIN hoplock_internal.keepalive AS k
                  ON l.state OPERATOR(pg_catalog.=) 'h'::"char"
                 AND k.id OPERATOR(pg_catalog.=) l.keepalive
           LEFT JOIN (SELECT f.name COLLATE "C" AS name,
                             pg_catalog.sum(f.fences OPERATOR(pg_catalog.+) f.writes)::pg_catalog.int8 AS refused
                        FROM hoplock_internal.refusals() AS f
                       GROUP BY 1) AS r ON r.name OPERATOR(pg_catalog.=) l.name
     WHERE l.state OPERATOR(pg_catalog.<>) 'r'::"char"
        OR l.hold_until OPERATOR(pg_catalog.>) c.now;

COMMENT ON VIEW @extschema@.hoplock_leases IS
    'one row per lease that is held, has expired without being released, or was released during its hold (min_hold) that still keeps it; a lease with slots has a row per slot term (slot: its number; NULL for a lease without slots)';

DROP FUNCTION @extschema@.hoplock_events(bigint);
CREATE FUNCTION @extschema@.hoplock_events(since bigint DEFAULT 0)
RETURNS SETOF @extschema@.hoplock_event
AS 'MODULE_PATHNAME', 'hoplock_events'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;


COMMENT ON FUNCTION @extschema@.hoplock_events(bigint) IS
    'the events after number since, from the event log: acquired, renewed (with hoplock.notify_renewals), released, expired, proclaimed, step_down';

-- The privileges of the three replaced functions, on their new ones.
DO $$
DECLARE
    r record;
    g record;
BEGIN
    FOR r IN SELECT v.new::pg_catalog.regprocedure AS new,
                    pg_catalog.current_setting('hoplock_update.' OPERATOR(pg_catalog.||) v.key, true) AS acl
               FROM (VALUES
                   ('wait', '@extschema@.hoplock_wait(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval, pg_catalog.bool, pg_catalog.int4, pg_catalog.text, pg_catalog.bool, pg_catalog.interval, pg_catalog.int4)'),
                   ('acquire', '@extschema@.hoplock_acquire(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.bool, pg_catalog.text, pg_catalog.interval, pg_catalog.int4)'),
                   ('events', '@extschema@.hoplock_events(pg_catalog.int8)')) AS v(key, new)
    LOOP
        CONTINUE WHEN r.acl IS NULL OR r.acl OPERATOR(pg_catalog.=) '';
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', r.new);
        FOR g IN SELECT a.grantee, a.is_grantable
                   FROM pg_catalog.aclexplode(r.acl::pg_catalog.aclitem[]) AS a
                  WHERE a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', r.new,
                CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) END,
                CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END LOOP;
END $$;

-- What hoplock_renew_all returns, a row per term renewed.  A named type,
-- not RETURNS TABLE: PostgreSQL builds a RETURNS TABLE function's row
-- shape from pg_proc's argument arrays three times in every statement
-- that calls it (parse analysis, twice, and the executor), some 20,000
-- instructions a call; a named type's comes from the type cache.
CREATE TYPE @extschema@.hoplock_renewed AS (
    name        text,
    slot        integer,
    generation  bigint,
    expires_at  timestamptz
);

COMMENT ON TYPE @extschema@.hoplock_renewed IS 'one term renewed by hoplock_renew_all';

CREATE FUNCTION @extschema@.hoplock_renew_all(owner text, ttl interval)
RETURNS SETOF @extschema@.hoplock_renewed
AS 'MODULE_PATHNAME', 'hoplock_renew_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

COMMENT ON FUNCTION @extschema@.hoplock_renew_all(text, interval) IS
    'renew every running term of the owner that the calling role began, with one write of the owner''s keepalive; returns the terms renewed';
