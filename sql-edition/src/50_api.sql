/* 50_api.sql: the lease functions of the contract, with the C edition's
 * names, arguments, defaults and types.  Each runs with the rights of
 * the extension's owner (SECURITY DEFINER, search_path pinned), checks
 * its arguments, and leaves the work to hoplock_internal.cas. */

CREATE FUNCTION @extschema@.hoplock_acquire(name text, owner text, ttl interval,
                                            session_bound boolean DEFAULT false,
                                            value text DEFAULT NULL,
                                            min_hold interval DEFAULT NULL,
                                            slots integer DEFAULT 1)
RETURNS @extschema@.hoplock_lease
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hoplock_internal.check_text('name', name);
    PERFORM hoplock_internal.check_text('owner', owner);
    PERFORM hoplock_internal.check_interval('ttl', ttl, 'ttl');
    PERFORM hoplock_internal.check_text('value', value, false);
    PERFORM hoplock_internal.check_hold(ttl, min_hold);
    PERFORM hoplock_internal.check_slots(name, slots);
    IF session_bound IS NULL THEN
        RAISE EXCEPTION 'argument "session_bound" must not be null' USING ERRCODE = '22004';
    END IF;
    PERFORM hoplock_internal.check_writable('hoplock_acquire');
    RETURN hoplock_internal.to_lease(hoplock_internal.call('acquire', name, owner, ttl, NULL, NULL,
                                                           coalesce(session_bound, false), value, min_hold,
                                                           slots));
END $$;

CREATE FUNCTION hoplock_internal.check_hold(ttl interval, min_hold interval)
RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF min_hold IS NULL THEN
        RETURN;
    END IF;
    PERFORM hoplock_internal.check_interval('min_hold', min_hold, 'min_hold');
    IF min_hold > ttl THEN
        RAISE EXCEPTION 'min_hold "%" is longer than the ttl', hoplock_internal.interval_text(min_hold)
            USING ERRCODE = '22023',
                  DETAIL = format('The min_hold is %s seconds; the ttl is %s seconds.',
                                  to_char(extract(epoch FROM min_hold), 'FM999999999999990.000000'),
                                  to_char(extract(epoch FROM ttl), 'FM999999999999990.000000')),
                  HINT = 'A term''s first ttl must cover its hold: raise the ttl, or shorten the hold.';
    END IF;
END $$;

-- No worker wakes a waiting session: it tries again every few
-- milliseconds (2 ms, doubling to 20 ms), each try a short read that
-- takes no lock unless the lease is free.
CREATE FUNCTION @extschema@.hoplock_wait(name text, owner text, ttl interval, timeout interval,
                                         session_bound boolean DEFAULT false,
                                         priority integer DEFAULT 0,
                                         value text DEFAULT NULL,
                                         preempt boolean DEFAULT false,
                                         min_hold interval DEFAULT NULL,
                                         slots integer DEFAULT 1)
RETURNS @extschema@.hoplock_lease
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    deadline timestamptz;
    r hoplock_internal.lease;
    nap double precision := 0.002;
    left_ double precision;
BEGIN
    PERFORM hoplock_internal.check_text('name', name);
    PERFORM hoplock_internal.check_text('owner', owner);
    PERFORM hoplock_internal.check_interval('ttl', ttl, 'ttl');
    PERFORM hoplock_internal.check_interval('timeout', timeout, 'timeout');
    PERFORM hoplock_internal.check_text('value', value, false);
    PERFORM hoplock_internal.check_hold(ttl, min_hold);
    PERFORM hoplock_internal.check_slots(name, slots);
    IF session_bound IS NULL THEN
        RAISE EXCEPTION 'argument "session_bound" must not be null' USING ERRCODE = '22004';
    END IF;
    PERFORM hoplock_internal.check_writable('hoplock_wait');
    deadline := clock_timestamp() + timeout;
    LOOP
        r := hoplock_internal.call('acquire', name, owner, ttl, NULL, NULL,
                                   coalesce(session_bound, false), value, min_hold, slots);
        IF r.name IS NOT NULL THEN
            RETURN hoplock_internal.to_lease(r);
        END IF;
        left_ := extract(epoch FROM deadline - clock_timestamp());
        IF left_ <= 0 THEN
            RETURN NULL;
        END IF;
        PERFORM pg_sleep(least(nap, left_));
        nap := least(nap * 2, 0.02);
    END LOOP;
END $$;

CREATE FUNCTION @extschema@.hoplock_renew(name text, owner text, ttl interval)
RETURNS @extschema@.hoplock_lease
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hoplock_internal.check_text('name', name);
    PERFORM hoplock_internal.check_text('owner', owner);
    PERFORM hoplock_internal.check_interval('ttl', ttl, 'ttl');
    PERFORM hoplock_internal.check_writable('hoplock_renew');
    RETURN hoplock_internal.to_lease(hoplock_internal.call('renew', name, owner, ttl));
END $$;

CREATE FUNCTION @extschema@.hoplock_renew(name text, owner text, ttl interval, generation bigint)
RETURNS @extschema@.hoplock_lease
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hoplock_internal.check_text('name', name);
    PERFORM hoplock_internal.check_text('owner', owner);
    PERFORM hoplock_internal.check_interval('ttl', ttl, 'ttl');
    PERFORM hoplock_internal.check_generation(generation);
    PERFORM hoplock_internal.check_writable('hoplock_renew');
    RETURN hoplock_internal.to_lease(hoplock_internal.call('renew', name, owner, ttl, generation));
END $$;

CREATE FUNCTION @extschema@.hoplock_release(name text, owner text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hoplock_internal.check_text('name', name);
    PERFORM hoplock_internal.check_text('owner', owner);
    PERFORM hoplock_internal.check_writable('hoplock_release');
    RETURN (hoplock_internal.call('release', name, owner, NULL)).name IS NOT NULL;
END $$;

CREATE FUNCTION @extschema@.hoplock_release(name text, owner text, generation bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hoplock_internal.check_text('name', name);
    PERFORM hoplock_internal.check_text('owner', owner);
    PERFORM hoplock_internal.check_generation(generation);
    PERFORM hoplock_internal.check_writable('hoplock_release');
    RETURN (hoplock_internal.call('release', name, owner, NULL, generation)).name IS NOT NULL;
END $$;

CREATE FUNCTION @extschema@.hoplock_force_release(name text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hoplock_internal.check_text('name', name);
    PERFORM hoplock_internal.check_writable('hoplock_force_release');
    RETURN (hoplock_internal.call('force', name, '-', NULL)).name IS NOT NULL;
END $$;
REVOKE EXECUTE ON FUNCTION @extschema@.hoplock_force_release(text) FROM PUBLIC;

-- Read-only: they work on a standby and in read-only transactions.
CREATE FUNCTION @extschema@.hoplock_holder(name text)
RETURNS @extschema@.hoplock_lease
LANGUAGE plpgsql VOLATILE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r hoplock_internal.lease;
BEGIN
    PERFORM hoplock_internal.check_text('name', name);
    SELECT * INTO r FROM hoplock_internal.lease AS l WHERE l.name = hoplock_holder.name;
    IF hoplock_internal.marker(r) > 1 THEN
        -- a lease with slots: the running term of the lowest slot
        FOR r IN SELECT * FROM hoplock_internal.lease AS l
                  WHERE l.name = ANY (hoplock_internal.slot_keys(hoplock_holder.name, hoplock_internal.marker(r)))
                  ORDER BY hoplock_internal.slot_of(l.name)
        LOOP
            r := hoplock_internal.fold(r);
            IF hoplock_internal.running(r, clock_timestamp()) THEN
                RETURN hoplock_internal.to_lease(r);
            END IF;
        END LOOP;
        RETURN NULL;
    END IF;
    r := hoplock_internal.fold(r);
    IF hoplock_internal.running(r, clock_timestamp()) THEN
        RETURN hoplock_internal.to_lease(r);
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION @extschema@.hoplock_read(name text)
RETURNS @extschema@.hoplock_lease
LANGUAGE plpgsql VOLATILE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r hoplock_internal.lease;
BEGIN
    PERFORM hoplock_internal.check_text('name', name);
    SELECT * INTO r FROM hoplock_internal.lease AS l WHERE l.name = hoplock_read.name;
    r := hoplock_internal.fold(r);
    IF r.state IN ('h', 'x') THEN
        RETURN hoplock_internal.to_lease(r);
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION @extschema@.hoplock_write(name text, prev_handle text, owner text, ttl interval)
RETURNS @extschema@.hoplock_lease
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hoplock_internal.check_text('name', name);
    PERFORM hoplock_internal.check_text('owner', owner);
    PERFORM hoplock_internal.check_interval('ttl', ttl, 'ttl');
    PERFORM hoplock_internal.check_writable('hoplock_write');
    RETURN hoplock_internal.to_lease(hoplock_internal.call('write', name, owner, ttl, NULL, prev_handle));
END $$;

CREATE FUNCTION @extschema@.hoplock_delete(name text, handle text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hoplock_internal.check_text('name', name);
    IF handle IS NULL THEN
        RAISE EXCEPTION 'argument "handle" must not be null' USING ERRCODE = '22004';
    END IF;
    PERFORM hoplock_internal.check_writable('hoplock_delete');
    RETURN (hoplock_internal.call('delete', name, '-', NULL, NULL, handle)).name IS NOT NULL;
END $$;

-- Publish a value for the owner's running term of the generation.
CREATE FUNCTION @extschema@.hoplock_proclaim(name text, owner text, generation bigint, value text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r hoplock_internal.lease;
BEGIN
    PERFORM hoplock_internal.check_text('name', name);
    PERFORM hoplock_internal.check_text('owner', owner);
    PERFORM hoplock_internal.check_generation(generation);
    PERFORM hoplock_internal.check_text('value', value, false);
    PERFORM hoplock_internal.check_writable('hoplock_proclaim');
    r := hoplock_internal.row_of(hoplock_proclaim.name, hoplock_proclaim.generation);
    SELECT * INTO r FROM hoplock_internal.lease AS l
     WHERE l.name = r.name FOR NO KEY UPDATE SKIP LOCKED;
    r := hoplock_internal.fold(r);
    IF r.state IS DISTINCT FROM 'h' OR r.expires_at <= clock_timestamp()
       OR r.owner <> hoplock_proclaim.owner OR r.generation <> hoplock_proclaim.generation THEN
        RETURN false;
    END IF;
    PERFORM hoplock_internal.check_role(hoplock_internal.display_name(r.name), r.owner_roleid, r.owner_role);
    UPDATE hoplock_internal.lease AS l
       SET value = hoplock_proclaim.value, version = hoplock_internal.mint(r.version, false)
     WHERE l.name = r.name;
    PERFORM hoplock_internal.emit('proclaimed', r.name, r.owner, r.generation, r.expires_at,
                                  clock_timestamp(), hoplock_proclaim.value);
    RETURN true;
END $$;

CREATE FUNCTION @extschema@.hoplock_request_step_down(name text, to_owner text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r hoplock_internal.lease;
    now_ timestamptz := clock_timestamp();
    asked boolean := false;
BEGIN
    PERFORM hoplock_internal.check_text('name', name);
    PERFORM hoplock_internal.check_text('to_owner', to_owner, false);
    PERFORM hoplock_internal.check_writable('hoplock_request_step_down');
    SELECT * INTO r FROM hoplock_internal.lease AS l WHERE l.name = hoplock_request_step_down.name;
    -- a lease with slots: every running slot's term is asked
    FOR r IN SELECT * FROM hoplock_internal.lease AS l
              WHERE l.name = ANY (CASE WHEN hoplock_internal.marker(r) > 1
                                       THEN hoplock_internal.slot_keys(hoplock_request_step_down.name,
                                                                       hoplock_internal.marker(r))
                                       ELSE ARRAY[hoplock_request_step_down.name] END)
              ORDER BY hoplock_internal.slot_of(l.name)
                FOR NO KEY UPDATE SKIP LOCKED
    LOOP
        r := hoplock_internal.fold(r);
        CONTINUE WHEN NOT hoplock_internal.running(r, now_);
        UPDATE hoplock_internal.lease AS l
           SET step_down_at = now_, step_down_to = to_owner, version = hoplock_internal.mint(r.version, false)
         WHERE l.name = r.name;
        PERFORM hoplock_internal.emit('step_down', r.name, r.owner, r.generation, r.expires_at, now_, to_owner);
        asked := true;
    END LOOP;
    RETURN asked;
END $$;
REVOKE EXECUTE ON FUNCTION @extschema@.hoplock_request_step_down(text, text) FROM PUBLIC;

-- Handing a term to a waiting candidate needs candidates that a worker
-- wakes: not in the SQL edition.
CREATE FUNCTION @extschema@.hoplock_handoff(name text, owner text, generation bigint,
                                            to_owner text DEFAULT NULL)
RETURNS @extschema@.hoplock_lease
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'hoplock_handoff() is not supported by the SQL edition of hoplock'
        USING ERRCODE = '0A000',
              HINT = 'Release the term; the waiting candidate''s hoplock_wait takes it.';
END $$;

-- Forget a released or lapsed name; the floor keeps its generations
-- monotone.  A name with slots is forgotten whole once every slot is free
-- (47_slots.sql): its slots are judged first without the lock, so that a
-- name in use never holds up the acquires of its slots.
CREATE FUNCTION @extschema@.hoplock_forget(name text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r hoplock_internal.lease;
    have integer;
BEGIN
    PERFORM hoplock_internal.check_text('name', name);
    PERFORM hoplock_internal.check_writable('hoplock_forget');
    SELECT * INTO r FROM hoplock_internal.lease AS l WHERE l.name = hoplock_forget.name;
    have := hoplock_internal.marker(r);
    IF have > 1 THEN
        IF hoplock_internal.slots_in_use(name, have, clock_timestamp()) THEN
            RETURN false;
        END IF;
        -- (not forgotten: the subtransaction gives the lock back)
        BEGIN
            IF NOT hoplock_internal.try_term_lock(name, true)
               OR NOT hoplock_internal.forget_slots(name, have, have) THEN
                RAISE EXCEPTION USING ERRCODE = 'HLC01';
            END IF;
            RETURN true;
        EXCEPTION WHEN SQLSTATE 'HLC01' OR SQLSTATE '22023' THEN
            RETURN false;           -- being changed, or in use after all
        END;
    END IF;
    IF NOT hoplock_internal.try_term_lock(name, true) THEN
        RETURN false;
    END IF;
    SELECT * INTO r FROM hoplock_internal.lease AS l
     WHERE l.name = hoplock_forget.name FOR UPDATE SKIP LOCKED;
    IF r.name IS NULL OR r.state = 'h' OR r.hold_until > clock_timestamp()
       OR hoplock_internal.marker(r) > 1 THEN
        RETURN false;
    END IF;
    IF NOT hoplock_internal.raise_floor(r.generation) THEN
        RETURN false;               -- another forget in flight
    END IF;
    PERFORM hoplock_internal.no_prepare();
    DELETE FROM hoplock_internal.lease AS l WHERE l.name = r.name;
    RETURN true;
END $$;
REVOKE EXECUTE ON FUNCTION @extschema@.hoplock_forget(text) FROM PUBLIC;
