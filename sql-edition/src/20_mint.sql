/* 20_mint.sql: generations, row versions and the branch they are minted
 * on.  A value is c << 11 | tag: c the server clock in microseconds since
 * 2000, tag the branch's; and always above the name's last value and the
 * floor of forgotten names.  A new branch begins at every server start
 * (a promotion, a restore and a copy are new starts too), with a tag other
 * than its parent's, and lifts the event numbers above its floor. */

-- The branch of this server start in this database, its tag cached for the
-- session.  (The first call after a start writes the branch's row.)
CREATE FUNCTION hoplock_internal.branch_tag() RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    cached text := current_setting('hoplock_sql.branch', true);
    inc bigint := (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint;
    db oid;
    t integer;
    parent record;
    fl bigint;
    sysid bigint := 0;
    tli bigint := 0;
BEGIN
    IF cached IS NOT NULL AND cached <> '' AND split_part(cached, ':', 1) = inc::text THEN
        RETURN split_part(cached, ':', 2)::integer;
    END IF;
    db := (SELECT d.oid FROM pg_database AS d WHERE d.datname = current_database());
    SELECT b.tag INTO t FROM hoplock_internal.branch AS b
     WHERE b.database = db AND b.incarnation = inc
     ORDER BY b.started_at DESC LIMIT 1;
    IF t IS NULL THEN
        SELECT b.tag, b.started_at INTO parent FROM hoplock_internal.branch AS b
         ORDER BY b.started_at DESC LIMIT 1;
        LOOP
            t := 1 + floor(random() * 2047)::integer;
            EXIT WHEN parent.tag IS NULL OR t <> parent.tag;
        END LOOP;
        -- (the floor is in microseconds, as the C edition reads it: the c of
        -- c << 11 | tag)
        fl := ((extract(epoch FROM clock_timestamp()) - 946684800) * 1000000)::bigint;
        -- (readable with pg_monitor; left 0 otherwise)
        BEGIN
            SELECT s.system_identifier INTO sysid FROM pg_control_system() AS s;
            SELECT c.timeline_id INTO tli FROM pg_control_checkpoint() AS c;
        EXCEPTION WHEN insufficient_privilege THEN
            NULL;
        END;
        INSERT INTO hoplock_internal.branch
            (tag, started_at, floor, parent_tag, parent_started_at, fork_point,
             reason, incarnation, timeline, system_identifier, database)
        VALUES (t, clock_timestamp(), fl, parent.tag, parent.started_at, NULL,
                'server start (SQL edition)', inc, coalesce(tli, 0), coalesce(sysid, 0), db);
        -- event numbers go on above the floor and above every number kept
        -- (a restore of the C edition's log, numbered by its own clock)
        fl := greatest(fl << 11, (SELECT max(e.seq) FROM hoplock_internal.event AS e));
        IF (SELECT s.last_value FROM hoplock_internal.event_seq AS s) < fl THEN
            PERFORM setval('hoplock_internal.event_seq', fl);
        END IF;
    END IF;
    PERFORM set_config('hoplock_sql.branch', inc || ':' || t, false);
    RETURN t;
END $$;

-- A new value above prev (and, for a generation, above the floor of
-- forgotten names).
CREATE FUNCTION hoplock_internal.mint(prev bigint, is_generation boolean)
RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    tag integer := hoplock_internal.branch_tag();
    v bigint := (((extract(epoch FROM clock_timestamp()) - 946684800) * 1000000)::bigint << 11) | tag;
BEGIN
    v := greatest(v, coalesce(prev, 0) + 1);
    IF is_generation THEN
        v := greatest(v, coalesce((SELECT f.forgotten FROM hoplock_internal.floor AS f), 0) + 1);
    END IF;
    RETURN v;
END $$;

-- A term attached to an owner keepalive (hoplock_renew_all) runs until
-- the keepalive's expires_at: every reader folds it into the row it read.
CREATE FUNCTION hoplock_internal.fold(r hoplock_internal.lease)
RETURNS hoplock_internal.lease
LANGUAGE plpgsql STABLE AS $$
DECLARE
    k record;
BEGIN
    IF r.state = 'h' AND r.keepalive > 0 THEN
        SELECT ka.expires_at, ka.renewed_at INTO k
          FROM hoplock_internal.keepalive AS ka WHERE ka.id = r.keepalive;
        IF FOUND THEN
            r.expires_at := k.expires_at;
            r.renewed_at := greatest(r.renewed_at, k.renewed_at);
        END IF;
    END IF;
    RETURN r;
END $$;

-- The handle of a row: "h2:" version ":" generation; of a term attached to
-- a keepalive, "h3:" version ":" the keepalive's version ":" generation, so
-- that a renewal through the keepalive is a new handle too (as in C).
CREATE FUNCTION hoplock_internal.handle(r hoplock_internal.lease)
RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    kv bigint;
BEGIN
    IF r.state = 'h' AND r.keepalive > 0 THEN
        SELECT ka.version INTO kv FROM hoplock_internal.keepalive AS ka WHERE ka.id = r.keepalive;
        IF kv IS NOT NULL THEN
            RETURN 'h3:' || coalesce(r.version, 0) || ':' || kv || ':' || r.generation;
        END IF;
    END IF;
    RETURN 'h2:' || coalesce(r.version, 0) || ':' || r.generation;
END $$;

-- (These helpers are PL/pgSQL, not SQL: a SQL function is planned anew
-- in every transaction that calls it.)
-- A lease with slots (slots => N) keeps each slot's term in a row of its
-- own, keyed name U+001F k (no name holds a control character), and
-- records N in the name's own row: released, its owner U+001F N (the
-- marker).  The C edition's storage, so dumps go both ways.
CREATE FUNCTION hoplock_internal.slot_key(n text, k integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN RETURN n || E'\x1f' || k; END $$;

CREATE FUNCTION hoplock_internal.base_name(key text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN RETURN split_part(key, E'\x1f', 1); END $$;

-- A row's slot; NULL for a row that is not a slot's.
CREATE FUNCTION hoplock_internal.slot_of(key text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF strpos(key, E'\x1f') > 0 THEN
        RETURN split_part(key, E'\x1f', 2)::integer;
    END IF;
    RETURN NULL;
END $$;

-- The slots a row records, if it is a name's marker; 0 otherwise.
CREATE FUNCTION hoplock_internal.marker(r hoplock_internal.lease) RETURNS integer
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF r.state = 'r' AND r.owner ~ '^\x1f[0-9]{1,5}$' THEN
        RETURN substr(r.owner, 2)::integer;
    END IF;
    RETURN 0;
END $$;

-- The lease a call returns, from a row of the lease table (folded).
CREATE FUNCTION hoplock_internal.to_lease(r hoplock_internal.lease)
RETURNS @extschema@.hoplock_lease
LANGUAGE plpgsql STABLE AS $$
DECLARE
    l @extschema@.hoplock_lease;
BEGIN
    IF r.name IS NULL THEN
        RETURN NULL;
    END IF;
    l.name := hoplock_internal.base_name(r.name);
    l.owner := r.owner;
    l.generation := r.generation;
    l.handle := hoplock_internal.handle(r);
    l.acquired_at := r.acquired_at;
    l.expires_at := r.expires_at;
    l.value := coalesce(r.value, '');
    l.step_down := r.step_down_at IS NOT NULL;
    RETURN l;
END $$;

-- Raise the floor of forgotten names (its one row) to g, without waiting
-- for another transaction: the row locked FOR UPDATE, tried, or inserted,
-- a conflict waited for 1 ms at most (lock_timeout).  false if another
-- transaction in flight is raising it (contended).  Any role's acquire
-- may forget a name with slots (47_slots.sql), and must not wait for
-- another role's transaction that forgot one.
CREATE FUNCTION hoplock_internal.raise_floor(g bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SET lock_timeout = '1ms' AS $$
BEGIN
    PERFORM FROM hoplock_internal.floor AS f FOR UPDATE SKIP LOCKED;
    IF NOT FOUND AND EXISTS (SELECT FROM hoplock_internal.floor AS f) THEN
        RETURN false;
    END IF;
    INSERT INTO hoplock_internal.floor AS f
        (system_identifier, database, base_era, base_timeline, last_timeline, forgotten)
    VALUES (0, 0, 0, 0, 0, g)
    ON CONFLICT ((true)) DO UPDATE SET forgotten = greatest(f.forgotten, excluded.forgotten);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END $$;
