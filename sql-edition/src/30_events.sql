/* 30_events.sql: the event log and NOTIFY.
 *
 * An event is numbered (nextval) and recorded in the transaction of the
 * change, and sent at once with pg_notify, so PostgreSQL delivers it at
 * that transaction's commit (in commit order; a rollback sends nothing).
 *
 * Readers must not return a number while a transaction still open could
 * commit a smaller one.  So a transaction, before it takes its first
 * number, publishes a lower bound of its numbers: a shared
 * transaction-level advisory lock whose key is the sequence's last value
 * (every number it takes later is greater).  A reader reads the
 * sequence's last value R first, then the smallest bound M published by
 * other sessions, then the log: every number at or below min(R, M) that
 * will ever commit has committed, and is in the log it reads.  (A bound
 * published after the reader's look at the locks is at least R.)
 *
 * Any session can take an advisory lock of any key, so a reader counts
 * only the bounds of sessions that hold ROW EXCLUSIVE on the event log,
 * which only hoplock's calls can take (the schema is the owner's): a
 * writer takes it before it reads the sequence for its bound, so a
 * writer whose table lock a reader does not see published a bound of at
 * least R.  And every event a transaction records publishes again (its
 * lock of a key already held costs no shared memory): a setting saying it
 * had published would be the session's to forge.  Nor may a writer wait
 * for its bound: another role can hold the key (the numbers are public)
 * exclusively.  Any lower key is a bound too, if a lower one: where the
 * key is held, the writer tries keys below it, at random, up to a million
 * below (a reader then stops lower, until the writer ends). */

CREATE FUNCTION hoplock_internal.publish() RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    k bigint;
BEGIN
    PERFORM hoplock_internal.branch_tag();
    LOCK TABLE hoplock_internal.event IN ROW EXCLUSIVE MODE;
    k := (SELECT s.last_value FROM hoplock_internal.event_seq AS s);
    FOR i IN 1..20 LOOP
        IF pg_try_advisory_xact_lock_shared(k) THEN
            RETURN;
        END IF;
        k := k - 1 - floor(random() * 1000000)::bigint;
    END LOOP;
    RAISE EXCEPTION 'could not publish the bound of this transaction''s event numbers'
        USING ERRCODE = '55P03',
              DETAIL = 'Other sessions hold advisory locks on every key tried.';
END $$;

-- The greatest number a reader may return now (see above).
CREATE FUNCTION hoplock_internal.horizon() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    -- (above the sequence: numbers a restore brought, which no writer
    -- takes again: it lifts the sequence above them before its first)
    r bigint := greatest((SELECT s.last_value FROM hoplock_internal.event_seq AS s),
                         (SELECT max(e.seq) FROM hoplock_internal.event AS e));
    m bigint;
BEGIN
    WITH lk AS MATERIALIZED (SELECT * FROM pg_locks AS l0 WHERE l0.granted
                                AND l0.pid <> pg_backend_pid())
    SELECT min((l.classid::bigint << 32) | l.objid::bigint) INTO m
      FROM lk AS l
     WHERE l.locktype = 'advisory' AND l.objsubid = 1
       AND l.database = (SELECT d.oid FROM pg_database AS d WHERE d.datname = current_database())
       AND l.classid::bigint >= 1 << 20
       -- (a bound counts only from a session writing the log: above)
       AND EXISTS (SELECT FROM lk AS w
                    WHERE w.pid = l.pid AND w.locktype = 'relation'
                      AND w.relation = 'hoplock_internal.event'::regclass
                      AND w.mode = 'RowExclusiveLock');
    RETURN least(r, m);
END $$;

-- Record an event and send its NOTIFY (at commit).
CREATE FUNCTION hoplock_internal.emit(kind text, n text, o text, g bigint,
                                      exp timestamptz, at_ timestamptz,
                                      val text DEFAULT NULL, free timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    s bigint;
    payload text;
    channel text := coalesce(nullif(current_setting('hoplock.channel', true), ''), 'hoplock');
BEGIN
    PERFORM hoplock_internal.publish();
    s := nextval('hoplock_internal.event_seq');
    INSERT INTO hoplock_internal.event (seq, event, name, owner, generation, expires_at, at, value, free_at)
    VALUES (s, kind, n, o, g, exp, at_, val, free);
    -- (a slot's row: its name, and "slot": k after it)
    payload := format('{"seq": %s, "seq_text": "%s", "event": %s, "name": %s%s, "owner": %s, '
                      '"generation": %s, "generation_text": "%s", "expires_at": "%s"',
                      s, s, to_json(kind), to_json(hoplock_internal.base_name(n)),
                      CASE WHEN strpos(n, E'\x1f') > 0
                           THEN ', "slot": ' || hoplock_internal.slot_of(n) ELSE '' END,
                      to_json(o), g, g,
                      to_char(exp AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || '+00:00');
    IF val IS NOT NULL THEN
        payload := payload || format(', "value": %s', to_json(val));
    END IF;
    IF free IS NOT NULL THEN
        payload := payload || format(', "free_at": "%s"',
                                     to_char(free AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || '+00:00');
    END IF;
    PERFORM pg_notify(channel, payload || '}');
    IF coalesce(current_setting('hoplock.log_events', true), '') IN ('on', 'true', '1') THEN
        RAISE LOG 'hoplock: lease "%" %, generation %, owner "%", expires at %', n, kind, g, o, exp;
    END IF;
    RETURN s;
END $$;

CREATE FUNCTION hoplock_internal.notify_renewals() RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce(current_setting('hoplock.notify_renewals', true), '') IN ('on', 'true', 'yes', '1');
END $$;

-- End a term in the history.  A term the C edition began (a database
-- moved here with pg_dump) has no row yet: the C edition writes a term's
-- row when it ends, its running terms are their lease rows.  Its row is
-- written now, from the lease row, which keeps the term's generation.
CREATE FUNCTION hoplock_internal.history_end(n text, g bigint, at_ timestamptz, how_ text)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    UPDATE hoplock_internal.history AS h SET ended_at = at_, how = how_
     WHERE h.name = n AND h.generation = g AND h.ended_at IS NULL;
    IF NOT FOUND THEN
        INSERT INTO hoplock_internal.history
               (name, generation, owner, role, acquired_at, begin_seq, ended_at, how)
        SELECT l.name, l.generation, l.owner, l.owner_role, l.acquired_at, 0, at_, how_
          FROM hoplock_internal.lease AS l
         WHERE l.name = n AND l.generation = g
        ON CONFLICT DO NOTHING;
    END IF;
END $$;

-- What a worker would do, done by a call: announce the lapsed terms (of
-- name n, or of every name), end the session-bound terms whose session is
-- gone and the holds that are over.  Rows another transaction holds are
-- skipped (never waited for); an announcement takes the row as a renewal
-- does (an open fence does not keep it out), the end of a session's term
-- the term lock (10_args.sql).  Called by hoplock_events, hoplock_watch,
-- and by a pg_cron job if one is scheduled (README); returns how many it
-- ended.
CREATE FUNCTION hoplock_internal.expire(n text DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r hoplock_internal.lease;
    now_ timestamptz := clock_timestamp();
    done integer := 0;
BEGIN
    IF current_setting('transaction_read_only') = 'on' OR pg_is_in_recovery() THEN
        RETURN 0;
    END IF;
    FOR r IN SELECT l.* FROM hoplock_internal.lease AS l
                  LEFT JOIN hoplock_internal.keepalive AS k
                         ON l.keepalive > 0 AND k.id = l.keepalive
              WHERE (n IS NULL OR l.name = n OR left(l.name, length(n) + 1) = n || E'\x1f')
                AND ((l.state = 'h' AND coalesce(k.expires_at, l.expires_at) <= now_)
                     OR (l.state = 'r' AND l.hold_until <= now_)
                     OR (l.state = 'h' AND l.session_pid IS NOT NULL))
                FOR NO KEY UPDATE OF l SKIP LOCKED
    LOOP
        r := hoplock_internal.fold(r);
        -- (a term of a keepalive that a hoplock_renew_all in flight renews
        -- is left for later: the clock was read before this look)
        CONTINUE WHEN r.state = 'h' AND r.keepalive > 0
                      AND NOT hoplock_internal.keepalive_free(r.owner_roleid, r.owner);
        IF r.state = 'h' AND r.expires_at <= now_ THEN
            PERFORM hoplock_internal.announce_expiry(r, 'expired');
            done := done + 1;
        ELSIF r.state = 'r' THEN
            UPDATE hoplock_internal.lease SET hold_until = NULL WHERE name = r.name;
            PERFORM hoplock_internal.emit('freed', r.name, r.owner, r.generation, r.hold_until,
                                          r.hold_until, r.value);
            done := done + 1;
        ELSIF hoplock_internal.session_gone(r.session_pid, r.session_start)
              AND hoplock_internal.try_term_lock(r.name, true) THEN
            UPDATE hoplock_internal.lease
               SET state = 'r', expires_at = now_, keepalive = NULL,
                   version = hoplock_internal.mint(r.version, false)
             WHERE name = r.name;
            PERFORM hoplock_internal.history_end(r.name, r.generation, now_, 'session ended');
            PERFORM hoplock_internal.emit('released', r.name, r.owner, r.generation, now_, now_, r.value);
            done := done + 1;
        END IF;
    END LOOP;
    -- lapsed keepalives none of whose terms is left to announce
    IF n IS NULL THEN
        DELETE FROM hoplock_internal.keepalive AS k
         WHERE k.id IN (SELECT k2.id FROM hoplock_internal.keepalive AS k2
                         WHERE k2.expires_at <= now_
                           AND NOT EXISTS (SELECT FROM hoplock_internal.lease AS l
                                            WHERE l.keepalive = k2.id AND l.state = 'h')
                           FOR UPDATE SKIP LOCKED);
        -- and the claims of owners left with no keepalive (45_keepalive.sql)
        DELETE FROM hoplock_internal.claim AS c
         WHERE c.key IN (SELECT c2.key FROM hoplock_internal.claim AS c2
                          WHERE c2.key LIKE 'keepalive' || E'\x1f' || '%'
                            AND NOT EXISTS (SELECT FROM hoplock_internal.keepalive AS k
                                             WHERE k.owner_roleid = split_part(c2.key, E'\x1f', 2)::oid
                                               AND k.owner = split_part(c2.key, E'\x1f', 3))
                            FOR UPDATE SKIP LOCKED);
    END IF;
    RETURN done;
END $$;

-- Announce the expiry of a lapsed term (r: its row, folded, locked):
-- state x, its expiry written into the row (off its keepalive), the
-- history ended (how: expired, or taken over) and the event recorded.
CREATE FUNCTION hoplock_internal.announce_expiry(r hoplock_internal.lease, how_ text)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    UPDATE hoplock_internal.lease
       SET state = 'x', expires_at = r.expires_at, keepalive = NULL,
           version = hoplock_internal.mint(r.version, false)
     WHERE name = r.name;
    PERFORM hoplock_internal.history_end(r.name, r.generation, r.expires_at, how_);
    PERFORM hoplock_internal.emit('expired', r.name, r.owner, r.generation, r.expires_at,
                                  r.expires_at, r.value);
END $$;
