/* 40_core.sql: the one compare-and-swap routine behind acquire, renew,
 * release, force_release, write and delete.
 *
 * Locks (all tried, never waited for, so that no call but hoplock_wait
 * waits for another transaction), all of them locks of the lease row,
 * which no role but hoplock's functions can take (10_args.sql): an
 * extension of the running term (a renewal, or an acquire or write by the
 * holder) locks the row FOR NO KEY UPDATE, as an UPDATE that touches no
 * key does, so that neither a fence (FOR KEY SHARE) nor a foreign key
 * ever holds a renewal up; a change that begins or ends a term locks it
 * FOR UPDATE (the name's term lock), which a fence's lock or any other
 * change in flight keeps it from: contended.  A name's first term inserts
 * its row instead (10_args.sql, insert_row).  The decision is made twice:
 * on the committed state without a lock (so that a contended call returns
 * NULL holding nothing), then again on the locked row. */

CREATE FUNCTION hoplock_internal.cas(op text, n text, o text, ttl interval,
                                     gen bigint DEFAULT NULL,
                                     prev_handle text DEFAULT NULL,
                                     session_bound boolean DEFAULT false,
                                     val text DEFAULT NULL,
                                     min_hold interval DEFAULT NULL,
                                     gen_after bigint DEFAULT NULL)
RETURNS hoplock_internal.lease
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r hoplock_internal.lease;
    now_ timestamptz;
    action text;
    pass integer;
    running boolean;
    held boolean;
    cur_handle text;
    caller oid := hoplock_internal.caller();
    g bigint;
    locked boolean := false;
    prev_value text;
    ka_id bigint;
    ka_exp timestamptz;
    ins hoplock_internal.lease;
BEGIN
    FOR pass IN 1..2 LOOP
        now_ := clock_timestamp();
        IF pass = 1 THEN
            SELECT * INTO r FROM hoplock_internal.lease AS l WHERE l.name = n;
        ELSIF r.name IS NOT NULL THEN
            SELECT * INTO r FROM hoplock_internal.lease AS l WHERE l.name = n
               FOR NO KEY UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                -- being changed by another transaction: contended, NULL at
                -- once (for a renewal too, as in the C edition: a term
                -- change or another renewal of the term is in flight)
                RETURN NULL;
            END IF;
            now_ := clock_timestamp();
        END IF;
        -- a name with slots: the caller makes the call again for a slot
        -- (47_slots.sql), and the compare-and-swap calls are not for it
        -- while it is in use; once every slot is free, an acquire or a
        -- write of no handle forgets it and goes on as for a new name
        IF pass = 1 AND hoplock_internal.marker(r) > 1 THEN
            IF op NOT IN ('acquire', 'write', 'delete') THEN
                RETURN r;
            ELSIF hoplock_internal.slots_in_use(n, hoplock_internal.marker(r), now_) THEN
                PERFORM hoplock_internal.slots_mismatch(n, hoplock_internal.marker(r), 1);
            ELSIF op = 'delete' OR (op = 'write' AND prev_handle IS NOT NULL) THEN
                RETURN NULL;
            ELSIF NOT hoplock_internal.try_term_lock(n, true)
                  OR NOT hoplock_internal.forget_slots(n, hoplock_internal.marker(r), 1) THEN
                RETURN NULL;
            END IF;
            locked := true;
            r := NULL;
        END IF;
        r := hoplock_internal.fold(r);

        running := r.state = 'h' AND r.expires_at > now_
                   AND NOT hoplock_internal.session_gone(r.session_pid, r.session_start);
        held := running AND r.owner = o;
        cur_handle := CASE WHEN r.state IN ('h', 'x') THEN hoplock_internal.handle(r) END;
        action := 'none';
        IF op = 'acquire' THEN
            IF held THEN
                PERFORM hoplock_internal.check_role(n, r.owner_roleid, r.owner_role);
                action := 'extend';
            ELSIF running THEN
                action := 'none';
            ELSIF r.state = 'r' AND r.hold_until > now_
                  AND NOT (r.owner = o AND hoplock_internal.is_member(r.owner_roleid)) THEN
                action := 'none';
            ELSE
                action := 'new';
            END IF;
        ELSIF op IN ('renew', 'release') THEN
            IF held AND (gen IS NULL OR gen = r.generation) THEN
                PERFORM hoplock_internal.check_role(n, r.owner_roleid, r.owner_role);
                action := CASE op WHEN 'renew' THEN 'extend' ELSE 'end' END;
            END IF;
        ELSIF op = 'force' THEN
            IF running THEN
                action := 'end';
            ELSIF r.state = 'r' AND r.hold_until > now_ THEN
                action := 'unhold';
            END IF;
        ELSIF op = 'write' THEN
            IF prev_handle IS DISTINCT FROM cur_handle THEN
                action := 'none';
            ELSIF running AND NOT hoplock_internal.is_member(r.owner_roleid) THEN
                PERFORM hoplock_internal.check_role(n, r.owner_roleid, r.owner_role);
            ELSIF held THEN
                action := 'extend';
            ELSIF r.state = 'r' AND r.hold_until > now_
                  AND NOT (r.owner = o AND hoplock_internal.is_member(r.owner_roleid)) THEN
                action := 'none';
            ELSE
                action := 'new';
            END IF;
        ELSIF op = 'delete' THEN
            IF prev_handle IS NOT NULL AND prev_handle = cur_handle THEN
                IF running THEN
                    PERFORM hoplock_internal.check_role(n, r.owner_roleid, r.owner_role);
                END IF;
                action := 'end';
            END IF;
        END IF;

        IF action = 'none' THEN
            RETURN NULL;
        END IF;
        -- a term attached to a keepalive that a hoplock_renew_all in flight
        -- is renewing is being changed: contended (45_keepalive.sql)
        IF pass = 1 AND r.state = 'h' AND r.keepalive > 0
           AND NOT hoplock_internal.keepalive_free(r.owner_roleid, r.owner) THEN
            RETURN NULL;
        END IF;
        -- a new term of a role and owner whose keepalive a transaction in
        -- flight is beginning or renewing: contended (it could not tell
        -- whether the term would run on it)
        IF pass = 1 AND action = 'new' AND NOT hoplock_internal.keepalive_free(caller, o) THEN
            RETURN NULL;
        END IF;
        IF action <> 'extend' AND NOT locked THEN
            IF NOT hoplock_internal.try_term_lock(n, true) THEN
                RETURN NULL;                -- a fence or a change in flight
            END IF;
            locked := true;
        END IF;
    END LOOP;

    PERFORM hoplock_internal.no_prepare();
    IF action = 'extend' THEN
        prev_value := r.value;
        UPDATE hoplock_internal.lease AS l
           SET expires_at = now_ + ttl, renewed_at = now_,
               version = hoplock_internal.mint(r.version, false),
               keepalive = CASE WHEN l.keepalive > 0 THEN -l.keepalive ELSE l.keepalive END,
               value = CASE WHEN val IS NOT NULL THEN val ELSE l.value END
         WHERE l.name = n
        RETURNING * INTO r;
        IF hoplock_internal.notify_renewals() THEN
            PERFORM hoplock_internal.emit('renewed', n, r.owner, r.generation, r.expires_at, now_, r.value);
        END IF;
        IF val IS NOT NULL AND val IS DISTINCT FROM prev_value THEN
            PERFORM hoplock_internal.emit('proclaimed', n, r.owner, r.generation, r.expires_at, now_, val);
        END IF;
        RETURN r;
    END IF;

    IF action = 'unhold' THEN
        UPDATE hoplock_internal.lease AS l
           SET hold_until = NULL, version = hoplock_internal.mint(r.version, false)
         WHERE l.name = n;
        PERFORM hoplock_internal.emit('freed', n, r.owner, r.generation, now_, now_, r.value);
        RETURN r;
    END IF;

    IF action = 'end' THEN
        IF running THEN
            UPDATE hoplock_internal.lease AS l
               SET state = 'r', expires_at = now_, keepalive = NULL,
                   version = hoplock_internal.mint(r.version, false),
                   hold_until = CASE WHEN op = 'release' AND r.hold_until > now_ THEN r.hold_until END
             WHERE l.name = n
            RETURNING * INTO r;
            PERFORM hoplock_internal.history_end(n, r.generation, now_,
                CASE op WHEN 'release' THEN 'released' WHEN 'force' THEN 'force-released'
                        ELSE 'deleted' END);
            PERFORM hoplock_internal.emit('released', n, r.owner, r.generation, now_, now_,
                                          r.value, r.hold_until);
        ELSE
            -- delete of a lapsed term: its expiry, announced now if it was not
            IF r.state = 'h' THEN
                PERFORM hoplock_internal.history_end(n, r.generation, r.expires_at, 'expired');
                PERFORM hoplock_internal.emit('expired', n, r.owner, r.generation, r.expires_at,
                                              r.expires_at, r.value);
            END IF;
            UPDATE hoplock_internal.lease AS l
               SET state = 'r', expires_at = r.expires_at, keepalive = NULL,
                   version = hoplock_internal.mint(r.version, false)
             WHERE l.name = n
            RETURNING * INTO r;
        END IF;
        RETURN r;
    END IF;

    -- action = 'new': end what the row still holds, then begin a term.
    IF r.state = 'h' THEN
        IF running THEN
            PERFORM hoplock_internal.history_end(n, r.generation, now_, 'written over');
            PERFORM hoplock_internal.emit('released', n, r.owner, r.generation, now_, now_, r.value);
        ELSIF r.expires_at > now_ THEN
            PERFORM hoplock_internal.history_end(n, r.generation, now_, 'session ended');
            PERFORM hoplock_internal.emit('released', n, r.owner, r.generation, now_, now_, r.value);
        ELSE
            PERFORM hoplock_internal.history_end(n, r.generation, r.expires_at, 'taken over');
            PERFORM hoplock_internal.emit('expired', n, r.owner, r.generation, r.expires_at,
                                          r.expires_at, r.value);
        END IF;
    ELSIF r.state = 'r' AND r.hold_until IS NOT NULL AND r.hold_until <= now_ THEN
        PERFORM hoplock_internal.emit('freed', n, r.owner, r.generation, r.hold_until,
                                      r.hold_until, r.value);
    END IF;
    g := hoplock_internal.mint(greatest(r.generation, gen_after), true);
    -- a running keepalive of the role and owner: the term runs on it
    -- (unless its hold would outlast it: then on its own, minus the id in
    -- its keepalive column, so that the next hoplock_renew_all attaches it)
    SELECT k.id, k.expires_at INTO ka_id, ka_exp FROM hoplock_internal.keepalive AS k
     WHERE k.owner_roleid = caller AND k.owner = o AND k.expires_at > now_
     ORDER BY k.id DESC LIMIT 1;
    IF ka_id IS NOT NULL AND min_hold IS NOT NULL AND now_ + min_hold > ka_exp THEN
        ka_id := -ka_id;
        ka_exp := NULL;
    END IF;
    IF r.name IS NULL THEN
        ins.name := n;
        ins.state := 'h';
        ins.owner := o;
        ins.owner_role := (SELECT ro.rolname FROM pg_roles AS ro WHERE ro.oid = caller);
        ins.generation := g;
        ins.acquired_at := now_;
        ins.renewed_at := now_;
        ins.expires_at := coalesce(ka_exp, now_ + ttl);
        IF session_bound THEN
            ins.session_pid := pg_backend_pid();
            ins.session_start := (SELECT a.backend_start FROM pg_stat_activity AS a
                                   WHERE a.pid = pg_backend_pid());
        END IF;
        ins.owner_roleid := caller;
        ins.version := hoplock_internal.mint(NULL, false);
        ins.value := val;
        ins.priority := 0;
        ins.hold_until := now_ + min_hold;
        ins.keepalive := ka_id;
        r := hoplock_internal.insert_row(ins);
        IF r.name IS NULL THEN
            RETURN NULL;                    -- created meanwhile: contended
        END IF;
    ELSE
        UPDATE hoplock_internal.lease AS l
           SET state = 'h', owner = o,
               owner_role = (SELECT ro.rolname FROM pg_roles AS ro WHERE ro.oid = caller),
               owner_roleid = caller, generation = g,
               acquired_at = now_, renewed_at = now_, expires_at = coalesce(ka_exp, now_ + ttl),
               keepalive = ka_id,
               session_pid = CASE WHEN session_bound THEN pg_backend_pid() END,
               session_start = CASE WHEN session_bound THEN (SELECT a.backend_start FROM pg_stat_activity AS a
                                                              WHERE a.pid = pg_backend_pid()) END,
               version = hoplock_internal.mint(r.version, false), value = val,
               step_down_at = NULL, step_down_to = NULL, priority = 0,
               handed_pid = NULL, handed_start = NULL, hold_until = now_ + min_hold
         WHERE l.name = n
        RETURNING * INTO r;
    END IF;
    INSERT INTO hoplock_internal.history (name, generation, owner, role, acquired_at, begin_seq)
    VALUES (n, g, o, r.owner_role, now_, 0);
    PERFORM hoplock_internal.emit('acquired', n, o, g, r.expires_at, now_, val);
    RETURN r;
END $$;
