/* 47_slots.sql: leases with slots (slots => N on hoplock_acquire and
 * hoplock_wait), as in the C edition: up to N terms of a name at once, each
 * in a slot of its own, stored as a lease row of its own (20_mint.sql says
 * how).  hoplock_internal.call is what the functions call: it finds the
 * slot a call is for and hands that slot's row to hoplock_internal.cas.
 *
 * - An acquire with slots => N claims (role, name, owner) first
 *   (10_args.sql; held elsewhere: contended): two sessions of one owner
 *   never begin two terms of the name at once.  A contended call gives it
 *   back (call's subtransaction, below).  Then it locks the name's own row
 *   FOR KEY SHARE, as a fence does (forget_slots, below, and every writer
 *   of the name's own row lock it FOR UPDATE).  It has the name
 *   record N, then extends the owner's own term if it has one, or takes a
 *   free slot, trying them from one the owner's hash chooses; a new slot
 *   term's generation is above every other of the name.
 * - N binds while the name is in use: a slot's term runs, or a hold keeps
 *   the name.  Then another N (a call without slots: 1) raises 22023; once
 *   every slot is free, an acquire with another N, or a plain acquire or
 *   write of no handle (40_core.sql), forgets the name whole and goes on
 *   as for a new name, and so does hoplock_forget (50_api.sql).
 * - renew, release: the owner's term (of the generation, if given);
 *   force_release: every running slot.  write and delete: 22023 while the
 *   name is in use. */

-- A term runs (r folded: 20_mint.sql), or keeps its name (min_hold).
CREATE FUNCTION hoplock_internal.running(r hoplock_internal.lease, now_ timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN r.state = 'h' AND r.expires_at > now_
           AND NOT hoplock_internal.session_gone(r.session_pid, r.session_start);
END $$;

CREATE FUNCTION hoplock_internal.in_hold(r hoplock_internal.lease, now_ timestamptz)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN RETURN r.state = 'r' AND r.hold_until > now_; END $$;

CREATE FUNCTION hoplock_internal.slot_keys(n text, slots integer) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    keys text[] := '{}';
BEGIN
    FOR k IN 1 .. slots LOOP
        keys := keys || (n || E'\x1f' || k);
    END LOOP;
    RETURN keys;
END $$;

CREATE FUNCTION hoplock_internal.slots_mismatch(n text, have integer, want integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RAISE EXCEPTION 'lease "%" has % %, not %', n, have, CASE WHEN have = 1 THEN 'slot' ELSE 'slots' END, want
        USING ERRCODE = '22023',
              DETAIL = 'Every caller of a lease must give the same slots; without slots => a lease has 1.',
              HINT = 'A lease''s slots can change only while none of its terms runs or keeps it (min_hold) and no candidate waits for it.';
END $$;

-- The slots argument: 1 to 1000, and a name that leaves room for the keys.
CREATE FUNCTION hoplock_internal.check_slots(n text, slots integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF slots IS NULL THEN
        RAISE EXCEPTION 'argument "slots" must not be null' USING ERRCODE = '22004';
    ELSIF slots < 1 OR slots > 1000 THEN
        RAISE EXCEPTION 'slots % is out of range', slots
            USING ERRCODE = '22023', DETAIL = 'A lease has 1 to 1000 slots.';
    ELSIF slots > 1 AND octet_length(n) > 251 THEN
        RAISE EXCEPTION 'argument "name" is too long for a lease with slots'
            USING ERRCODE = '22023',
                  DETAIL = format('The name of a lease with slots has at most 251 bytes; this one has %s.',
                                  octet_length(n));
    END IF;
END $$;

-- What a worker would have announced of a row no term runs in, before the
-- row is taken over or forgotten: the lapse (history how_), the session's
-- end, the hold's end.
CREATE FUNCTION hoplock_internal.announce_end(b hoplock_internal.lease, now_ timestamptz,
                                              how_ text DEFAULT 'taken over')
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF b.state = 'h' AND b.expires_at <= now_ THEN
        PERFORM hoplock_internal.announce_expiry(b, how_);
    ELSIF b.state = 'h' THEN
        PERFORM hoplock_internal.history_end(b.name, b.generation, now_, 'session ended');
        PERFORM hoplock_internal.emit('released', b.name, b.owner, b.generation, now_, now_, b.value);
    ELSIF b.state = 'r' AND b.hold_until IS NOT NULL AND hoplock_internal.marker(b) = 0 THEN
        PERFORM hoplock_internal.emit('freed', b.name, b.owner, b.generation, b.hold_until,
                                      b.hold_until, b.value);
    END IF;
END $$;

-- Whether a name recording have slots is in use: a slot's term runs, or
-- the hold of one released early keeps the name (the SQL edition has no
-- candidates' queue: a waiter keeps nothing).
CREATE FUNCTION hoplock_internal.slots_in_use(n text, have integer, now_ timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT FROM hoplock_internal.lease AS l
                    WHERE l.name = ANY (hoplock_internal.slot_keys(n, have))
                      AND (hoplock_internal.running(hoplock_internal.fold(l), now_)
                           OR hoplock_internal.in_hold(l, now_)));
END $$;

-- Forget name n, which records have slots, whole: the floor raised to the
-- greatest generation of its marker and slot rows, then every row of it
-- deleted.  The caller holds n's term lock exclusively; the slots' rows
-- are locked FOR UPDATE, as a delete locks them.  false if a row is being
-- changed or fenced, or the floor raised (contended); 22023 (have, not
-- want) if the name is in use after all.
CREATE FUNCTION hoplock_internal.forget_slots(n text, have integer, want integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    keys text[] := hoplock_internal.slot_keys(n, have) || n;
    rows_ hoplock_internal.lease[];
    r hoplock_internal.lease;
    now_ timestamptz;
BEGIN
    SELECT array_agg(s.l) INTO rows_
      FROM (SELECT l FROM hoplock_internal.lease AS l
             WHERE l.name = ANY (keys) FOR UPDATE SKIP LOCKED) AS s;
    IF coalesce(cardinality(rows_), 0)
       <> (SELECT count(*) FROM hoplock_internal.lease AS l WHERE l.name = ANY (keys)) THEN
        RETURN false;
    END IF;
    now_ := clock_timestamp();
    FOREACH r IN ARRAY coalesce(rows_, '{}') LOOP
        IF r.name = n AND hoplock_internal.marker(r) <> have THEN
            RETURN false;
        END IF;
        r := hoplock_internal.fold(r);
        IF hoplock_internal.running(r, now_) OR hoplock_internal.in_hold(r, now_) THEN
            PERFORM hoplock_internal.slots_mismatch(n, have, want);
        END IF;
    END LOOP;
    -- (before anything is written: false leaves nothing behind)
    IF NOT hoplock_internal.raise_floor((SELECT max((x).generation) FROM unnest(rows_) AS x)) THEN
        RETURN false;
    END IF;
    PERFORM hoplock_internal.no_prepare();
    FOREACH r IN ARRAY coalesce(rows_, '{}') LOOP
        -- (a lapse: taken over by another N, or expired for hoplock_forget)
        PERFORM hoplock_internal.announce_end(hoplock_internal.fold(r), now_,
                                              CASE WHEN want = have THEN 'expired' ELSE 'taken over' END);
    END LOOP;
    DELETE FROM hoplock_internal.lease AS l WHERE l.name = ANY (keys);
    RETURN true;
END $$;

-- Have name n record N (its marker row); NULL if that cannot be done now
-- (contended).  The row is returned.
CREATE FUNCTION hoplock_internal.mark_slots(n text, slots integer)
RETURNS hoplock_internal.lease
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    b hoplock_internal.lease;
    caller oid := hoplock_internal.caller();
    now_ timestamptz;
    have integer;
BEGIN
    IF NOT hoplock_internal.try_term_lock(n, true) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO b FROM hoplock_internal.lease AS l WHERE l.name = n;
    IF FOUND THEN
        SELECT * INTO b FROM hoplock_internal.lease AS l WHERE l.name = n
           FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    b := hoplock_internal.fold(b);
    now_ := clock_timestamp();
    have := hoplock_internal.marker(b);
    IF have = slots THEN
        RETURN b;
    ELSIF have > 1 THEN
        PERFORM hoplock_internal.slots_mismatch(n, have, slots);
    END IF;
    PERFORM hoplock_internal.no_prepare();
    IF b.name IS NULL THEN
        b.name := n;
        b.state := 'r';
        b.owner := E'\x1f' || slots;
        b.owner_role := (SELECT ro.rolname FROM pg_roles AS ro WHERE ro.oid = caller);
        b.generation := hoplock_internal.mint(NULL, true);
        b.acquired_at := now_;
        b.renewed_at := now_;
        b.expires_at := now_;
        b.owner_roleid := caller;
        b.version := hoplock_internal.mint(NULL, false);
        RETURN hoplock_internal.insert_row(b);
    END IF;
    IF hoplock_internal.running(b, now_) THEN
        PERFORM hoplock_internal.slots_mismatch(n, 1, slots);
    ELSIF hoplock_internal.in_hold(b, now_) THEN
        RETURN NULL;                -- kept by its last term's hold
    END IF;
    -- what a worker would have announced: the lapse, the session's end, the hold's end
    PERFORM hoplock_internal.announce_end(b, now_);
    UPDATE hoplock_internal.lease AS l
       SET state = 'r', owner = E'\x1f' || slots,
           owner_role = (SELECT ro.rolname FROM pg_roles AS ro WHERE ro.oid = caller),
           owner_roleid = caller, expires_at = least(l.expires_at, now_),
           session_pid = NULL, session_start = NULL, value = NULL,
           step_down_at = NULL, step_down_to = NULL, handed_pid = NULL, handed_start = NULL,
           hold_until = NULL, keepalive = NULL,
           version = hoplock_internal.mint(l.version, false)
     WHERE l.name = n
    RETURNING * INTO b;
    RETURN b;
END $$;

-- An acquire (or a wait's attempt) with slots => N, N > 1.
CREATE FUNCTION hoplock_internal.slots_acquire(n text, o text, ttl interval, session_bound boolean,
                                               val text, min_hold interval, slots integer)
RETURNS hoplock_internal.lease
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    b hoplock_internal.lease;
    r hoplock_internal.lease;
    rows_ hoplock_internal.lease[];
    keys text[] := hoplock_internal.slot_keys(n, slots);
    newest bigint;
    now_ timestamptz;
    first integer;
    k integer;
BEGIN
    IF NOT hoplock_internal.claim('slots' || E'\x1f' || hoplock_internal.caller() || E'\x1f'
                                  || n || E'\x1f' || o) THEN
        RETURN NULL;
    END IF;
    -- the name's term lock, shared: no forget, no marker written, no plain
    -- term begun while this acquire is in flight (and none in flight now)
    IF NOT hoplock_internal.try_term_lock(n, false) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO b FROM hoplock_internal.lease AS l WHERE l.name = n;
    IF hoplock_internal.marker(b) <> slots THEN
        IF hoplock_internal.marker(b) > 1 THEN
            -- another N: bound while the name is in use; else forgotten
            IF hoplock_internal.slots_in_use(n, hoplock_internal.marker(b), clock_timestamp()) THEN
                PERFORM hoplock_internal.slots_mismatch(n, hoplock_internal.marker(b), slots);
            END IF;
            IF NOT hoplock_internal.try_term_lock(n, true)
               OR NOT hoplock_internal.forget_slots(n, hoplock_internal.marker(b), slots) THEN
                RETURN NULL;
            END IF;
            b := NULL;
        END IF;
        b := hoplock_internal.fold(b);
        IF hoplock_internal.running(b, clock_timestamp()) THEN
            PERFORM hoplock_internal.slots_mismatch(n, 1, slots);
        END IF;
        b := hoplock_internal.mark_slots(n, slots);
        IF b.name IS NULL THEN
            RETURN NULL;
        END IF;
    END IF;
    SELECT array_agg(hoplock_internal.fold(l) ORDER BY hoplock_internal.slot_of(l.name))
      INTO rows_
      FROM hoplock_internal.lease AS l WHERE l.name = ANY (keys);
    newest := greatest(b.generation, (SELECT max((x).generation) FROM unnest(rows_) AS x));
    now_ := clock_timestamp();
    -- the owner's term, running or in its hold, is extended or taken again
    FOREACH r IN ARRAY coalesce(rows_, '{}') LOOP
        IF r.owner = o AND (hoplock_internal.running(r, now_) OR hoplock_internal.in_hold(r, now_)) THEN
            RETURN hoplock_internal.cas('acquire', r.name, o, ttl, NULL, NULL, session_bound, val,
                                        min_hold, newest);
        END IF;
    END LOOP;
    -- the free slots, from one the owner's hash chooses
    first := (hashtext(o)::bigint & 4294967295) % slots;
    FOR i IN 0 .. slots - 1 LOOP
        k := (first + i) % slots + 1;
        r := NULL;
        SELECT x.* INTO r FROM unnest(rows_) AS x WHERE x.name = keys[k];
        IF r.name IS NOT NULL
           AND (hoplock_internal.running(r, now_) OR hoplock_internal.in_hold(r, now_)) THEN
            CONTINUE;
        END IF;
        r := hoplock_internal.cas('acquire', keys[k], o, ttl, NULL, NULL, session_bound, val,
                                  min_hold, newest);
        IF r.name IS NOT NULL THEN
            RETURN r;
        END IF;
    END LOOP;
    RETURN NULL;
END $$;

-- The core's call, for the slot a call is for (call_slot), in a
-- subtransaction rolled back when the call is contended: it then holds
-- nothing -- no term lock, no (name, owner) lock -- and changed nothing
-- (a hoplock_wait tries again and again in one transaction; so may a
-- caller's transaction block).  A renewal takes no lock it could keep.
CREATE FUNCTION hoplock_internal.call(op text, n text, o text, ttl interval,
                                      gen bigint DEFAULT NULL,
                                      prev_handle text DEFAULT NULL,
                                      session_bound boolean DEFAULT false,
                                      val text DEFAULT NULL,
                                      min_hold interval DEFAULT NULL,
                                      slots integer DEFAULT 1)
RETURNS hoplock_internal.lease
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r hoplock_internal.lease;
BEGIN
    IF op = 'renew' THEN
        RETURN hoplock_internal.call_slot(op, n, o, ttl, gen, prev_handle, session_bound, val,
                                          min_hold, slots);
    END IF;
    BEGIN
        r := hoplock_internal.call_slot(op, n, o, ttl, gen, prev_handle, session_bound, val,
                                        min_hold, slots);
        IF r.name IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HLC01';
        END IF;
        RETURN r;
    EXCEPTION WHEN SQLSTATE 'HLC01' THEN
        RETURN NULL;
    END;
END $$;

CREATE FUNCTION hoplock_internal.call_slot(op text, n text, o text, ttl interval,
                                      gen bigint DEFAULT NULL,
                                      prev_handle text DEFAULT NULL,
                                      session_bound boolean DEFAULT false,
                                      val text DEFAULT NULL,
                                      min_hold interval DEFAULT NULL,
                                      slots integer DEFAULT 1)
RETURNS hoplock_internal.lease
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    b hoplock_internal.lease;
    r hoplock_internal.lease;
    one hoplock_internal.lease;
    res hoplock_internal.lease;
    have integer;
    now_ timestamptz;
BEGIN
    IF op = 'acquire' AND slots > 1 THEN
        RETURN hoplock_internal.slots_acquire(n, o, ttl, session_bound, val, min_hold, slots);
    END IF;
    -- (the core returns the name's marker row if the name has slots)
    b := hoplock_internal.cas(op, n, o, ttl, gen, prev_handle, session_bound, val, min_hold);
    have := hoplock_internal.marker(b);
    IF have <= 1 THEN
        RETURN b;
    END IF;
    now_ := clock_timestamp();
    IF op = 'force' THEN
        FOR r IN SELECT * FROM hoplock_internal.lease AS l
                  WHERE l.name = ANY (hoplock_internal.slot_keys(n, have))
                  ORDER BY hoplock_internal.slot_of(l.name)
        LOOP
            r := hoplock_internal.fold(r);
            IF hoplock_internal.running(r, now_) OR hoplock_internal.in_hold(r, now_) THEN
                one := hoplock_internal.cas('force', r.name, o, NULL);
                IF one.name IS NOT NULL THEN
                    res := one;
                END IF;
            END IF;
        END LOOP;
        RETURN res;
    END IF;
    -- renew, release: the owner's term (of gen), a running one first
    FOR r IN SELECT * FROM hoplock_internal.lease AS l
              WHERE l.name = ANY (hoplock_internal.slot_keys(n, have))
                AND l.owner = o AND (gen IS NULL OR l.generation = gen)
              ORDER BY hoplock_internal.running(hoplock_internal.fold(l), now_) DESC,
                       hoplock_internal.slot_of(l.name)
              LIMIT 1
    LOOP
        RETURN hoplock_internal.cas(op, r.name, o, ttl, gen, prev_handle, session_bound, val, min_hold);
    END LOOP;
    RETURN NULL;
END $$;

-- The slot row of name n at generation g, if n has slots; the name's own
-- row otherwise (either may be NULL).
CREATE FUNCTION hoplock_internal.row_of(n text, g bigint)
RETURNS hoplock_internal.lease
LANGUAGE plpgsql STABLE AS $$
DECLARE
    b hoplock_internal.lease;
    have integer;
BEGIN
    SELECT * INTO b FROM hoplock_internal.lease AS l WHERE l.name = n;
    have := hoplock_internal.marker(b);
    IF have > 1 THEN
        b := NULL;
        SELECT * INTO b FROM hoplock_internal.lease AS l
         WHERE l.name = ANY (hoplock_internal.slot_keys(n, have)) AND l.generation = g;
    END IF;
    RETURN hoplock_internal.fold(b);
END $$;

-- A row's name as messages show it: the name, with its slot if any.
CREATE FUNCTION hoplock_internal.display_name(key text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF strpos(key, E'\x1f') > 0 THEN
        RETURN split_part(key, E'\x1f', 1) || '" slot "' || split_part(key, E'\x1f', 2);
    END IF;
    RETURN key;
END $$;
