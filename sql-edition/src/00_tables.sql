/* hoplock--1.2.0.sql (SQL edition): install script, built from the files in src/.
 * 00_tables.sql: the schema check, the internal schema and its tables, the
 * same tables as the C edition's (so a dump of one restores into the other). */

\echo Use "CREATE EXTENSION hoplock" to load this file. \quit

-- The schema hoplock goes into must be one that no role but its owner (the
-- installing owner, a superuser, or pg_database_owner) may create objects
-- in: another role could plant functions there that capture the calls
-- clients make by qualified name.
DO $check$
DECLARE
    s oid := '@extschema@'::pg_catalog.regnamespace;
    bad text;
BEGIN
    SELECT pg_catalog.string_agg(CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                                      ELSE pg_catalog.quote_ident(r.rolname) END, ', ')
      INTO bad
      FROM pg_catalog.pg_namespace AS n
           CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) AS a
           LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
     WHERE n.oid OPERATOR(pg_catalog.=) s
       AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
       AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
       AND a.grantee OPERATOR(pg_catalog.<>) '@extowner@'::pg_catalog.regrole
       AND NOT coalesce(r.rolsuper, false);
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'cannot install hoplock into schema "%"', '@extschema@'
            USING ERRCODE = '42501',
                  DETAIL = pg_catalog.format('Roles other than its owner may create objects in it: %s.', bad),
                  HINT = 'Create hoplock in a schema only its owner may create in: CREATE SCHEMA hoplock; CREATE EXTENSION hoplock SCHEMA hoplock;';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_namespace AS n
                    WHERE n.oid OPERATOR(pg_catalog.=) s
                      AND (n.nspowner OPERATOR(pg_catalog.=) '@extowner@'::pg_catalog.regrole
                           OR n.nspowner OPERATOR(pg_catalog.=) 'pg_database_owner'::pg_catalog.regrole
                           OR EXISTS (SELECT FROM pg_catalog.pg_roles AS r
                                       WHERE r.oid OPERATOR(pg_catalog.=) n.nspowner AND r.rolsuper))) THEN
        RAISE EXCEPTION 'cannot install hoplock into schema "%"', '@extschema@'
            USING ERRCODE = '42501',
                  DETAIL = 'The schema is owned by a role that is neither the installing role nor a superuser.';
    END IF;
END
$check$;

CREATE SCHEMA hoplock_internal;
REVOKE ALL ON SCHEMA hoplock_internal FROM PUBLIC;
COMMENT ON SCHEMA hoplock_internal IS 'hoplock internal state; use the hoplock_* functions';

-- One row per lease name, as in the C edition (the column order too, so
-- that dumps of either edition restore into the other).
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

SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.lease', '');

-- The greatest generation of a forgotten name (forgotten); the era
-- columns are the C edition's 1.1 columns, kept for its dumps.
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
ALTER TABLE hoplock_internal.floor REPLICA IDENTITY FULL;
SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.floor', '');

-- Numbers the events (nextval: unique, increasing); lifted to the clock's
-- floor at each new branch (10_mint.sql).
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
SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.history', '');

-- The branches of the lease state: one row per server start (and so per
-- promotion, restore or copy) that began minting here.
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
SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.branch', '');

-- The event log, numbered when recorded (20_events.sql says how readers
-- skip the numbers of transactions still open).
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
-- The arrays are stored out of line, uncompressed, as the C edition has
-- them (its worker writes them; this edition reads them in a restore).
ALTER TABLE hoplock_internal.event
    ALTER COLUMN earlier_names SET STORAGE EXTERNAL,
    ALTER COLUMN earlier_owners SET STORAGE EXTERNAL,
    ALTER COLUMN earlier_generations SET STORAGE EXTERNAL,
    ALTER COLUMN earlier_expires_at SET STORAGE EXTERNAL,
    ALTER COLUMN earlier_values SET STORAGE EXTERNAL;

SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.event', '');

-- Each call sends its own NOTIFYs at its commit, so every committed event
-- is delivered: a view, where the C edition has its worker's table.  A
-- dump of the C edition restores into it (its row is dropped).
CREATE VIEW hoplock_internal.delivery AS
    SELECT coalesce(pg_catalog.max(e.seq), 0) AS delivered,
           pg_catalog.clock_timestamp() AS delivered_at,
           0::bigint AS pruned_through,
           NULL::bigint AS expiries_after
      FROM hoplock_internal.event AS e;

CREATE FUNCTION hoplock_internal.delivery_restore() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS
$$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER delivery_restore INSTEAD OF INSERT ON hoplock_internal.delivery
    FOR EACH ROW EXECUTE FUNCTION hoplock_internal.delivery_restore();

-- Owner keepalives (hoplock_renew_all, 45_keepalive.sql), as in the C
-- edition: a running term whose row names one in its keepalive column runs
-- until the keepalive's expires_at; minus the id: renewed by itself since.
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
SELECT pg_catalog.pg_extension_config_dump('hoplock_internal.keepalive', '');
CREATE INDEX keepalive_by_owner ON hoplock_internal.keepalive (owner_roleid, owner);
CREATE INDEX lease_by_keepalive ON hoplock_internal.lease (keepalive)
    WHERE keepalive IS NOT NULL;

-- Claims (10_args.sql) of what has no lease row to lock: an owner's
-- keepalive (a row kept while the owner has one), an owner's acquire of a
-- lease with slots (a row inserted and deleted in the claiming
-- transaction).  Not dumped.
CREATE TABLE hoplock_internal.claim (
    key text COLLATE "C" NOT NULL,
    CONSTRAINT claim_pkey PRIMARY KEY (key)
) WITH (vacuum_truncate = false);

-- A secret of the database's, made at install (not dumped: a restore
-- makes another), that the keys of the insert hints are derived from
-- (10_args.sql): no other role can compute one.
CREATE TABLE hoplock_internal.secret (
    value text NOT NULL
);
CREATE UNIQUE INDEX secret_one_row ON hoplock_internal.secret ((true));
INSERT INTO hoplock_internal.secret (value)
VALUES (pg_catalog.gen_random_uuid()::text OPERATOR(pg_catalog.||) pg_catalog.gen_random_uuid()::text);

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

CREATE TYPE @extschema@.hoplock_renewed AS (
    name        text,
    slot        integer,
    generation  bigint,
    expires_at  timestamptz
);
COMMENT ON TYPE @extschema@.hoplock_renewed IS 'one term renewed by hoplock_renew_all';

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
