/* 45_keepalive.sql: owner keepalives and hoplock_renew_all, as in the C
 * edition.  A running term attached to its role and owner's keepalive (the
 * lease row's keepalive column holds its id) runs until the keepalive's
 * expires_at (every reader folds it in: 20_mint.sql), so one update of
 * the keepalive renews them all.  A keepalive is never renewed once it has
 * lapsed: the next hoplock_renew_all begins another.
 *
 * Locks: hoplock_renew_all holds the (role, owner) claim (10_args.sql,
 * hold_claim: a row kept while the owner has a keepalive) until its
 * transaction ends; a second one of the same role and owner
 * fails at once (55P03).  A change of an attached term, and a new term of
 * that role and owner, look at that claim without keeping it: held, they
 * are contended.  (A claim, not an advisory lock, which any role could
 * take on the key and so stall the owner's renewals and new terms.)
 * Whoever finds a term lapsed reads the clock before it looks at the
 * claim, and hoplock_renew_all reads it after taking the claim: so a
 * keepalive that anyone found lapsed is found lapsed by hoplock_renew_all
 * too, which then begins another instead of renewing it. */

-- The (role, owner) claim's key.
CREATE FUNCTION hoplock_internal.keepalive_key(roleid oid, o text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN 'keepalive' || E'\x1f' || roleid || E'\x1f' || o;
END $$;

-- Whether no other transaction is beginning or renewing the keepalive of
-- (roleid, o) right now.  (NULL for a NULL argument: the callers' tests
-- of a row that is not there need not short-circuit.)
CREATE FUNCTION hoplock_internal.keepalive_free(roleid oid, o text) RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT AS $$
BEGIN
    RETURN hoplock_internal.claim_free(hoplock_internal.keepalive_key(roleid, o));
END $$;

CREATE FUNCTION @extschema@.hoplock_renew_all(owner text, ttl interval)
RETURNS SETOF @extschema@.hoplock_renewed
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER ROWS 100
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    o text := hoplock_renew_all.owner;
    caller oid;
    kid bigint;
    kexp timestamptz;
    horizon bigint;
    now_ timestamptz;
    lapsed record;
    r hoplock_internal.lease;
    renewed @extschema@.hoplock_renewed;
    scan boolean := false;
BEGIN
    PERFORM hoplock_internal.check_text('owner', o);
    PERFORM hoplock_internal.check_interval('ttl', ttl, 'ttl');
    PERFORM hoplock_internal.check_writable('hoplock_renew_all');
    caller := hoplock_internal.caller();
    IF NOT hoplock_internal.hold_claim(hoplock_internal.keepalive_key(caller, o)) THEN
        RAISE EXCEPTION 'could not renew the terms of owner "%": another transaction is renewing them', o
            USING ERRCODE = '55P03';
    END IF;
    PERFORM hoplock_internal.no_prepare();
    now_ := clock_timestamp();
    SELECT ka.id, ka.attach_horizon INTO kid, horizon FROM hoplock_internal.keepalive AS ka
     WHERE ka.owner_roleid = caller AND ka.owner = o AND ka.expires_at > now_
     ORDER BY ka.id DESC LIMIT 1;
    IF kid IS NOT NULL THEN
        UPDATE hoplock_internal.keepalive AS ka
           SET renewed_at = now_, expires_at = now_ + ttl,
               version = hoplock_internal.mint(ka.version, false)
         WHERE ka.id = kid
        RETURNING ka.expires_at INTO kexp;
    ELSE
        -- the lapsed keepalives' terms, announced, as a worker would
        FOR lapsed IN SELECT ka.id FROM hoplock_internal.keepalive AS ka
                       WHERE ka.owner_roleid = caller AND ka.owner = o
                         FOR UPDATE SKIP LOCKED
        LOOP
            FOR r IN SELECT * FROM hoplock_internal.lease AS l
                      WHERE l.keepalive = lapsed.id AND l.state = 'h'
                        FOR UPDATE SKIP LOCKED
            LOOP
                r := hoplock_internal.fold(r);
                IF r.expires_at <= now_ THEN
                    PERFORM hoplock_internal.announce_expiry(r, 'expired');
                END IF;
            END LOOP;
            DELETE FROM hoplock_internal.keepalive AS ka
             WHERE ka.id = lapsed.id
               AND NOT EXISTS (SELECT FROM hoplock_internal.lease AS l
                                WHERE l.keepalive = lapsed.id AND l.state = 'h');
        END LOOP;
        -- a new keepalive; a term begun by a transaction still open may
        -- be missed by the scan below, so it is looked for again later
        -- (attach_horizon) until every such transaction has ended
        IF EXISTS (SELECT FROM pg_stat_get_activity(NULL) AS a
                    WHERE a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid()) THEN
            horizon := txid_current();  -- above every xid assigned before
        END IF;
        INSERT INTO hoplock_internal.keepalive AS ka
            (id, owner_roleid, owner, renewed_at, expires_at, version, attach_horizon)
        VALUES (nextval('hoplock_internal.keepalive_id_seq'), caller, o, now_, now_ + ttl,
                hoplock_internal.mint(NULL, false), horizon)
        RETURNING ka.id, ka.expires_at INTO kid, kexp;
        scan := true;
    END IF;

    -- Attach the owner's running terms not attached yet: those renewed by
    -- themselves since (minus the id), or, when a scan is due, all.  A row
    -- another transaction is changing is left out.
    IF scan OR horizon IS NOT NULL THEN
        UPDATE hoplock_internal.lease AS l
           SET keepalive = kid, version = hoplock_internal.mint(l.version, false)
         WHERE l.name IN (
                SELECT c.name FROM hoplock_internal.lease AS c
                 WHERE c.keepalive IS DISTINCT FROM kid
                   AND c.state = 'h' AND c.owner = o AND c.owner_roleid = caller
                   AND (hoplock_internal.fold(c)).expires_at > now_
                   AND NOT hoplock_internal.session_gone(c.session_pid, c.session_start)
                   FOR NO KEY UPDATE SKIP LOCKED);
        IF horizon IS NOT NULL AND txid_snapshot_xmin(txid_current_snapshot()) > horizon THEN
            UPDATE hoplock_internal.keepalive AS ka SET attach_horizon = NULL WHERE ka.id = kid;
        END IF;
    ELSE
        UPDATE hoplock_internal.lease AS l
           SET keepalive = kid, version = hoplock_internal.mint(l.version, false)
         WHERE l.name IN (
                SELECT c.name FROM hoplock_internal.lease AS c
                 WHERE c.keepalive = -kid
                   AND c.state = 'h' AND c.owner = o AND c.owner_roleid = caller
                   AND c.expires_at > now_
                   AND NOT hoplock_internal.session_gone(c.session_pid, c.session_start)
                   FOR NO KEY UPDATE SKIP LOCKED);
    END IF;

    -- A term another transaction is changing (a release, a takeover in
    -- flight) is left out, as contended: the keepalive's write renews it
    -- all the same if that change rolls back, but were it to commit first,
    -- a renewal reported after it would follow the term's end.
    FOR r IN SELECT * FROM hoplock_internal.lease AS l
              WHERE l.keepalive = kid AND l.state = 'h'
                AND NOT hoplock_internal.session_gone(l.session_pid, l.session_start)
                FOR SHARE SKIP LOCKED
    LOOP
        renewed.name := hoplock_internal.base_name(r.name);
        renewed.slot := hoplock_internal.slot_of(r.name);
        renewed.generation := r.generation;
        renewed.expires_at := kexp;
        IF hoplock_internal.notify_renewals() THEN
            PERFORM hoplock_internal.emit('renewed', r.name, r.owner, r.generation, kexp, now_, r.value);
        END IF;
        RETURN NEXT renewed;
    END LOOP;
END $$;

COMMENT ON FUNCTION @extschema@.hoplock_renew_all(text, interval) IS
    'renew every running term of the owner that the calling role began, with one write of the owner''s keepalive; returns the terms renewed';
