/* hoplock--1.2.0.sql: install script for hoplock 1.2.0 */

\echo Use "CREATE EXTENSION hoplock" to load this file. \quit

-- The schema hoplock goes into must be one that only superusers may create
-- objects in or rename: another role could plant functions there that
-- capture the calls clients make by qualified name (src/install.c).
CREATE FUNCTION hoplock_check_schema(updating boolean) RETURNS void
LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'hoplock_check_schema';
SELECT hoplock_check_schema(false);
DROP FUNCTION hoplock_check_schema(boolean);

-- Internal state.  Nothing but hoplock's functions writes this schema: they
-- reach the table directly, not through SQL, so no role needs (or gets) any
-- privilege on it.
CREATE SCHEMA hoplock_internal;
REVOKE ALL ON SCHEMA hoplock_internal FROM PUBLIC;
COMMENT ON SCHEMA hoplock_internal IS 'hoplock internal state; use the hoplock_* functions';

-- One row per lease name.  The row outlives release (state 'r') so that the
-- name's next generation is always greater than its last one.  Renewals touch
-- only unindexed columns, so they are HOT updates; fillfactor leaves room on
-- each page for them.  Autovacuum never truncates it (vacuum_truncate), since
-- truncation takes an exclusive lock that every call would have to wait out.
-- The C code relies on the column order; columns added by an upgrade come
-- last, as ALTER TABLE adds them.
CREATE TABLE hoplock_internal.lease (
    name          text COLLATE "C" NOT NULL,
    state         "char" NOT NULL,
    owner         text COLLATE "C" NOT NULL,
    owner_role    name NOT NULL,
    generation    bigint NOT NULL,
    acquired_at   timestamptz NOT NULL,
    renewed_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    session_pid   integer,
    session_start timestamptz,
    owner_roleid  oid NOT NULL,
    version       bigint,
    value         text COLLATE "C",
    step_down_at  timestamptz,
    step_down_to  text COLLATE "C",
    priority      integer,
    handed_pid    integer,
    handed_start  timestamptz,
    hold_until    timestamptz,
    keepalive     bigint,
    CONSTRAINT lease_pkey PRIMARY KEY (name),
    CONSTRAINT lease_state_check CHECK (state OPERATOR(pg_catalog.=) ANY ('{h,x,r}'::"char"[])),
    CONSTRAINT lease_generation_check CHECK (generation OPERATOR(pg_catalog.>) 0)
) WITH (fillfactor = 50, vacuum_truncate = false);

COMMENT ON TABLE hoplock_internal.lease IS
    'lease state: h = term running (or lapsed, expiry not yet announced), x = lapsed and announced, r = released';
COMMENT ON COLUMN hoplock_internal.lease.owner_role IS
    'name of the role that began the term, as it was then';
COMMENT ON COLUMN hoplock_internal.lease.owner_roleid IS
    'OID of the role that began the term: only its members may change or fence it';
COMMENT ON COLUMN hoplock_internal.lease.value IS
    'the value the holder proclaimed for its term (its address, say): hoplock_proclaim, or value => at acquire; NULL if none';
COMMENT ON COLUMN hoplock_internal.lease.step_down_at IS
    'when hoplock_request_step_down asked the holder of the running term to hand it over; NULL if nobody did';
COMMENT ON COLUMN hoplock_internal.lease.step_down_to IS
    'the owner it was asked to hand over to; NULL: any candidate';
COMMENT ON COLUMN hoplock_internal.lease.priority IS
    'the priority of the candidate the running term was granted to (hoplock_wait); 0 or NULL: hoplock_acquire';
COMMENT ON COLUMN hoplock_internal.lease.handed_pid IS
    'the waiting session (its pid, and handed_start its start) a handoff wrote the running term for, until it takes it; NULL: none (the worker ends a handed term nobody took)';
COMMENT ON COLUMN hoplock_internal.lease.handed_start IS
    'the start of the session handed_pid names';
COMMENT ON COLUMN hoplock_internal.lease.hold_until IS
    'acquired_at + min_hold of the term (hoplock_acquire, hoplock_wait): released before then, the name is kept from other owners until then; NULL: no hold, or its end announced';
COMMENT ON COLUMN hoplock_internal.lease.keepalive IS
    'the owner keepalive (hoplock_internal.keepalive.id) the running term takes its expiry from; minus that id: the term left it (renewed by itself) and the owner''s next hoplock_renew_all attaches it again; NULL: none';
COMMENT ON COLUMN hoplock_internal.lease.version IS
    'version of the row, new at every write: the handle (NULL: not written since 1.1)';

-- The lease state is kept by pg_dump, so that after a restore every name's
-- next generation is still greater than any it had.
SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.lease', '');

-- The generation floor: at most one row, written by the first term that
-- begins in a new cluster, database or timeline.  With it, every
-- generation handed out later -- here, on a promoted standby, or in a
-- copy of this database made by pg_dump or pg_upgrade -- is greater than
-- any handed out before (see "Generations" in the README).  Kept by pg_dump
-- too; the install script writes no row, so a restore brings back exactly
-- the one that was dumped.
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
    'the greatest generation of a forgotten name (forgotten); the era columns are 1.1''s, read once to start 1.2''s numbering above them';

SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.floor', '');

CREATE TYPE @extschema@.hoplock_lease AS (
    name        text,
    owner       text,
    generation  bigint,
    handle      text,
    acquired_at timestamptz,
    expires_at  timestamptz,
    value       text,
    step_down   boolean
);

COMMENT ON TYPE @extschema@.hoplock_lease IS 'one term of a lease, as returned by the hoplock functions';
COMMENT ON COLUMN @extschema@.hoplock_lease.value IS
    'the value its holder proclaimed (hoplock_proclaim, or value => at acquire); empty if none';
COMMENT ON COLUMN @extschema@.hoplock_lease.step_down IS
    'a step-down of this term was requested (hoplock_request_step_down): hand it over';

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

CREATE FUNCTION @extschema@.hoplock_renew(name text, owner text, ttl interval)
RETURNS @extschema@.hoplock_lease
AS 'MODULE_PATHNAME', 'hoplock_renew'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.hoplock_renew(name text, owner text, ttl interval, generation bigint)
RETURNS @extschema@.hoplock_lease
AS 'MODULE_PATHNAME', 'hoplock_renew'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.hoplock_renew(text, text, interval) IS
    'extend the owner''s unexpired term; NULL if the owner does not hold the lease';
COMMENT ON FUNCTION @extschema@.hoplock_renew(text, text, interval, bigint) IS
    'extend the owner''s unexpired term of the given generation; NULL otherwise';

CREATE FUNCTION @extschema@.hoplock_release(name text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'hoplock_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.hoplock_release(name text, owner text, generation bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'hoplock_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.hoplock_release(text, text) IS
    'end the owner''s term; false if the owner does not hold the lease';
COMMENT ON FUNCTION @extschema@.hoplock_release(text, text, bigint) IS
    'end the owner''s term of the given generation; false otherwise';

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

CREATE FUNCTION @extschema@.hoplock_handoff(name text, owner text, generation bigint,
                                            to_owner text DEFAULT NULL)
RETURNS @extschema@.hoplock_lease
AS 'MODULE_PATHNAME', 'hoplock_handoff'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.hoplock_handoff(text, text, bigint, text) IS
    'end the owner''s term of the given generation and begin the next for a waiting candidate (to_owner''s, or the first); the new term, or NULL if there is no such candidate';

CREATE FUNCTION @extschema@.hoplock_holder(name text)
RETURNS @extschema@.hoplock_lease
AS 'MODULE_PATHNAME', 'hoplock_holder'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.hoplock_holder(text) IS
    'the current unexpired term of the lease, or NULL';

CREATE FUNCTION @extschema@.hoplock_fence(name text, generation bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'hoplock_fence'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.hoplock_fence(text, bigint) IS
    'raise 55P03 unless the generation holds the lease; otherwise keep any new term from starting until this transaction ends';

CREATE FUNCTION @extschema@.hoplock_force_release(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'hoplock_force_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION @extschema@.hoplock_force_release(text) FROM PUBLIC;

COMMENT ON FUNCTION @extschema@.hoplock_force_release(text) IS
    'operator override: end the current term whoever holds it';

CREATE FUNCTION @extschema@.hoplock_read(name text)
RETURNS @extschema@.hoplock_lease
AS 'MODULE_PATHNAME', 'hoplock_read'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.hoplock_read(text) IS
    'the stored state of the lease, expired or not; NULL if it has none';

CREATE FUNCTION @extschema@.hoplock_write(name text, prev_handle text, owner text, ttl interval)
RETURNS @extschema@.hoplock_lease
AS 'MODULE_PATHNAME', 'hoplock_write'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.hoplock_write(text, text, text, interval) IS
    'compare-and-swap: write the lease only if its handle is still prev_handle (NULL: only if it has no state)';

CREATE FUNCTION @extschema@.hoplock_delete(name text, handle text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'hoplock_delete'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.hoplock_delete(text, text) IS
    'compare-and-swap: end the term only if the lease''s handle is still the given one';

-- A trigger function for users' own tables: a row written with a
-- generation other than the term that holds the lease now is rejected
-- (55P03), under the same lock as hoplock_fence.
CREATE FUNCTION @extschema@.hoplock_fenced()
RETURNS trigger
AS 'MODULE_PATHNAME', 'hoplock_fenced'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.hoplock_fenced() IS
    'trigger: hoplock_fenced(lease, generation_column) rejects rows whose generation does not hold the lease now';

-- The pid of a transaction that holds the lease up: one with an open fence
-- of its term, or with an uncommitted change of it.  NULL if there is none.
CREATE FUNCTION hoplock_internal.blocker(name text)
RETURNS integer
AS 'MODULE_PATHNAME', 'hoplock_blocker'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

-- Zombie writes, counted: the fences and fenced writes refused to each
-- term after it lost its lease, kept in shared memory (the most recent
-- 1,024 terms of the server), for hoplock_history and hoplock_leases.
CREATE FUNCTION hoplock_internal.refusals(
    OUT name text, OUT generation bigint, OUT fences bigint, OUT writes bigint,
    OUT first_at timestamptz, OUT last_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'hoplock_refusals'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

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

-- Counters of each database, kept in shared memory (not written per call).
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

CREATE FUNCTION @extschema@.hoplock_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'hoplock_stats_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION @extschema@.hoplock_stats_reset() FROM PUBLIC;

COMMENT ON FUNCTION @extschema@.hoplock_stats_reset() IS
    'reset this database''s counters in hoplock_stats';

-- The history keeps the terms (not the renewals); the events are in the
-- event log (below).  begin_seq and end_seq are 1.1's: the numbers of a
-- term's first and last events, which 1.2 numbers as they commit.  Kept
-- by pg_dump.  The sequence numbered 1.1's events; 1.2 numbers them in
-- shared memory, and keeps it for 1.1's dumps.
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
    'the terms of the leases that ended, written as each ends, newest hoplock.history_size kept, the running ones (their lease rows) counted: how each ended (begin_seq and end_seq: the numbers of its events in 1.1; 0 and NULL since 1.2, whose events are in the event log; 1.1 wrote a row as a term began too)';

SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.history', '');

-- The running terms are their lease rows (state h): a term's row in the
-- history is written when it ends.  A running term's row that 1.1 wrote
-- as it began (kept by the upgrade, or by a restored 1.1 dump) stands in
-- for its lease row until the term ends.  With no history kept
-- (hoplock.history_size = 0), no running term is shown either.
CREATE FUNCTION hoplock_internal.history_kept()
RETURNS boolean
AS 'MODULE_PATHNAME', 'hoplock_history_kept'
LANGUAGE C STABLE PARALLEL SAFE;

CREATE VIEW @extschema@.hoplock_history WITH (security_barrier) AS
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

GRANT SELECT ON @extschema@.hoplock_history TO PUBLIC;

COMMENT ON VIEW @extschema@.hoplock_history IS
    'past and running terms: who led, from when to when, how each term ended, and the writes refused to it after it lost its lease';

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

-- The events after number "since", as far as every transaction that could
-- still add one numbered below has ended: a client that resumes from the
-- last number it saw misses nothing.
CREATE FUNCTION @extschema@.hoplock_events(since bigint DEFAULT 0)
RETURNS SETOF @extschema@.hoplock_event
AS 'MODULE_PATHNAME', 'hoplock_events'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.hoplock_events(bigint) IS
    'the events after number since, from the event log: acquired, renewed (with hoplock.notify_renewals), released, expired, proclaimed, step_down';

-- Forget a released or lapsed name at once (the expiry worker forgets
-- them after hoplock.released_retention); its generations stay monotone.
CREATE FUNCTION @extschema@.hoplock_forget(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'hoplock_forget'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION @extschema@.hoplock_forget(text) FROM PUBLIC;

COMMENT ON FUNCTION @extschema@.hoplock_forget(text) IS
    'remove the row of a released or lapsed lease; a later term of the name still gets a greater generation';

-- The branches of this database's lease state: one row for each time its
-- numbering began afresh, at every fork the server can see (a server start,
-- a promotion, the data in another cluster or database).  Every generation
-- and row version is minted above the floor of the branch it belongs to,
-- and carries its tag (see docs/forks-and-events.md).  Written only by
-- hoplock, never updated; kept by pg_dump.
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

-- One clock reading serves every row, so "expired" and "remaining" agree.
-- A security barrier: a function in the caller's WHERE clause never sees the
-- released rows the view leaves out.
CREATE VIEW @extschema@.hoplock_leases WITH (security_barrier) AS
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

GRANT SELECT ON @extschema@.hoplock_leases TO PUBLIC;

COMMENT ON VIEW @extschema@.hoplock_leases IS
    'one row per lease that is held, has expired without being released, or was released during its hold (min_hold) that still keeps it; a lease with slots has a row per slot term (slot: its number; NULL for a lease without slots)';

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

-- Ask the launcher to start this database's worker once this commits.
CREATE FUNCTION hoplock_internal.serve_this_database()
RETURNS void
AS 'MODULE_PATHNAME', 'hoplock_serve_this_database'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION hoplock_internal.serve_this_database() FROM PUBLIC;

SELECT hoplock_internal.serve_this_database();
