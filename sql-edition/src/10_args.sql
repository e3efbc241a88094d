/* 10_args.sql: argument checks, settings and the caller's role, shared by
 * every function.  Errors as the C edition raises them. */

-- name, owner, value: not NULL (if required), not empty, at most 256
-- bytes, no control characters.
CREATE FUNCTION hoplock_internal.check_text(arg text, v text, required boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    c text;
BEGIN
    IF v IS NULL THEN
        IF required THEN
            RAISE EXCEPTION 'argument "%" must not be null', arg USING ERRCODE = '22004';
        END IF;
        RETURN;
    END IF;
    IF v = '' THEN
        RAISE EXCEPTION 'argument "%" must not be empty', arg USING ERRCODE = '22023';
    END IF;
    IF octet_length(v) > 256 THEN
        RAISE EXCEPTION 'argument "%" is too long', arg USING ERRCODE = '22023',
            DETAIL = format('It is %s bytes long; the limit is 256 bytes.', octet_length(v));
    END IF;
    c := substring(v FROM '[\x01-\x1f\x7f\u0080-\u009f]');
    IF c IS NOT NULL THEN
        RAISE EXCEPTION 'argument "%" must not contain control characters', arg
            USING ERRCODE = '22023',
                  DETAIL = format('It contains U+%s.', lpad(upper(to_hex(ascii(c))), 4, '0'));
    END IF;
END $$;

-- The largest ttl accepted, in seconds (hoplock.max_ttl: seconds, or an
-- interval; 1 day when unset).
CREATE FUNCTION hoplock_internal.max_ttl() RETURNS numeric
LANGUAGE plpgsql STABLE AS $$
DECLARE
    s text := current_setting('hoplock.max_ttl', true);
BEGIN
    IF s IS NULL OR s = '' THEN
        RETURN 86400;
    ELSIF s ~ '^[0-9]+$' THEN
        RETURN s::numeric;
    END IF;
    RETURN extract(epoch FROM s::interval);
END $$;

-- An interval as the errors show it ("@ 1 sec ago").
CREATE FUNCTION hoplock_internal.interval_text(v interval) RETURNS text
LANGUAGE sql STABLE SET intervalstyle = postgres_verbose AS $$ SELECT v::text $$;

-- An interval argument: not NULL, no month or year part, and (kind) a
-- positive ttl within hoplock.max_ttl, a positive min_hold, or a
-- timeout that is not negative.
CREATE FUNCTION hoplock_internal.check_interval(arg text, v interval, kind text)
RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    secs numeric;
    lim numeric;
BEGIN
    IF v IS NULL THEN
        RAISE EXCEPTION 'argument "%" must not be null', arg USING ERRCODE = '22004';
    END IF;
    IF extract(year FROM v) <> 0 OR extract(month FROM v) <> 0 THEN
        RAISE EXCEPTION 'interval "%" of argument "%" has a month or year part', hoplock_internal.interval_text(v), arg
            USING ERRCODE = '22023', HINT = 'Express it in days, hours, minutes or seconds.';
    END IF;
    secs := extract(epoch FROM v);
    IF kind = 'timeout' THEN
        IF secs < 0 THEN
            RAISE EXCEPTION 'timeout "%" is negative', hoplock_internal.interval_text(v) USING ERRCODE = '22023';
        END IF;
        RETURN;
    END IF;
    IF secs <= 0 THEN
        RAISE EXCEPTION '% "%" is not positive', arg, hoplock_internal.interval_text(v) USING ERRCODE = '22023';
    END IF;
    IF kind = 'ttl' THEN
        lim := hoplock_internal.max_ttl();
        IF secs > lim THEN
            RAISE EXCEPTION 'ttl "%" exceeds hoplock.max_ttl (%)', hoplock_internal.interval_text(v), lim
                USING ERRCODE = '22023',
                      DETAIL = format('The ttl is %s seconds; the limit is %s seconds.',
                                      -- (microseconds saturate in a bigint, as in C)
                                      CASE WHEN secs >= 9223372036854.775807 THEN '9223372036854.775391'
                                           ELSE to_char(secs, 'FM999999999999990.000000') END, lim),
                      HINT = 'A bare number is read as seconds: pass a duration as text with its unit, such as ''15s'' or ''1500ms''.';
        END IF;
    END IF;
END $$;

CREATE FUNCTION hoplock_internal.check_generation(g bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF g IS NULL THEN
        RAISE EXCEPTION 'argument "generation" must not be null' USING ERRCODE = '22004';
    ELSIF g <= 0 THEN
        RAISE EXCEPTION 'generation % is not positive', g USING ERRCODE = '22023';
    END IF;
END $$;

-- A call that writes: not in a read-only transaction nor on a standby
-- (25006), and committed synchronously whatever the session's
-- synchronous_commit, so that no acknowledged grant is lost to a crash.
CREATE FUNCTION hoplock_internal.check_writable(fn text)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_setting('transaction_read_only') = 'on' OR pg_is_in_recovery() THEN
        RAISE EXCEPTION 'cannot execute %() in a read-only transaction', fn
            USING ERRCODE = '25006';
    END IF;
    IF current_setting('synchronous_commit') NOT IN ('on', 'remote_apply', 'remote_write') THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
END $$;

-- The role that called: inside hoplock's SECURITY DEFINER functions
-- current_user is the extension's owner, so the caller is the session's
-- role (SET ROLE's, else the session user).  A SECURITY DEFINER function of
-- the caller's does not change it (README: differences from the C edition).
CREATE FUNCTION hoplock_internal.caller() RETURNS oid
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN to_regrole(quote_ident(CASE WHEN current_setting('role') = 'none'
                                       THEN session_user::text
                                       ELSE current_setting('role') END))::oid;
END $$;

-- 42501 unless the caller has the privileges of the role that began the term.
CREATE FUNCTION hoplock_internal.check_role(n text, roleid oid, rolename name)
RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT hoplock_internal.is_member(roleid) THEN
        -- (a slot's row: the name and its slot)
        n := hoplock_internal.display_name(n);
        IF NOT EXISTS (SELECT FROM pg_roles AS r WHERE r.oid = roleid) THEN
            RAISE EXCEPTION 'permission denied for lease "%"', n
                USING ERRCODE = '42501',
                      DETAIL = format('Role "%s", which began the current term, no longer exists; only a superuser may change or fence it.', rolename);
        END IF;
        RAISE EXCEPTION 'permission denied for lease "%"', n
            USING ERRCODE = '42501',
                  DETAIL = format('Only members of role "%s", which began the current term, may change or fence it.', rolename);
    END IF;
END $$;

-- (A superuser has the privileges of every role, a dropped one too.)
CREATE FUNCTION hoplock_internal.is_member(roleid oid) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN pg_has_role(hoplock_internal.caller(), roleid, 'USAGE');
END $$;

-- Whether the backend a session-bound term is bound to is gone.
CREATE FUNCTION hoplock_internal.session_gone(pid integer, started timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF pid IS NULL THEN
        RETURN false;
    END IF;
    RETURN NOT EXISTS (SELECT FROM pg_catalog.pg_stat_get_activity(pid) AS a
                        WHERE a.pid OPERATOR(pg_catalog.=) session_gone.pid
                          AND (a.backend_start IS NULL OR started IS NULL
                               OR a.backend_start OPERATOR(pg_catalog.=) started));
END $$;

-- The term lock of a name is its lease row (a slot's: the slot's row),
-- locked as the executor locks rows, so that only the roles that may lock
-- the row -- hoplock's own functions: no other role has any right on
-- hoplock_internal -- can hold it (an advisory lock would be anyone's: any
-- role may take any key).  A fence locks the row FOR KEY SHARE; a change
-- that begins or ends a term FOR UPDATE, which conflicts with a fence and
-- with every other change; a renewal FOR NO KEY UPDATE (40_core.sql),
-- which conflicts with changes and renewals, not with fences.  Tried
-- (SKIP LOCKED), never waited for; held until the transaction (or the
-- subtransaction that took it) ends.  A name with no row (never acquired,
-- or forgotten) has nothing to lock: true, and the change is the insert
-- of its row (insert_row below).
CREATE FUNCTION hoplock_internal.try_term_lock(n text, exclusive boolean)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF exclusive THEN
        PERFORM FROM hoplock_internal.lease AS l WHERE l.name = n FOR UPDATE SKIP LOCKED;
    ELSE
        PERFORM FROM hoplock_internal.lease AS l WHERE l.name = n FOR KEY SHARE SKIP LOCKED;
    END IF;
    IF FOUND THEN
        RETURN true;
    END IF;
    RETURN NOT EXISTS (SELECT FROM hoplock_internal.lease AS l WHERE l.name = n);
END $$;

-- Inserts without waiting.  A name's first row, and a claim (below), are
-- inserted where no row is there to lock; PostgreSQL then waits for a
-- unique index's conflict with a transaction in flight, and no NOWAIT
-- applies.  So an insert of key k into rel first takes a hint, tried: a
-- transaction-level advisory lock of a key derived from k and the
-- database's secret (00_tables.sql), after ROW EXCLUSIVE on rel, and with
-- it a proof, a key derived from the secret, k, the session's pid and its
-- transaction's number.  Another insert of k that finds the hint held by
-- a session that also holds ROW EXCLUSIVE on rel and the proof of its own
-- pid and transaction is contended at once.  No role can compute a key,
-- but any role may see one held in pg_locks, and hold it, in a
-- transaction holding ROW EXCLUSIVE on rel by a call of hoplock's of its
-- own: without the proof, which names its holder, that role could keep
-- another role's inserts of k contended as long as it liked.  The hint
-- decides nothing else: held by anyone else, the insert goes on, and the
-- unique index decides, its wait cut at 1 ms (lock_timeout).
CREATE FUNCTION hoplock_internal.hint_key(k text, OUT k1 integer, OUT k2 integer)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    sec text := (SELECT s.value FROM hoplock_internal.secret AS s);
BEGIN
    k1 := hashtext(sec || E'\x1f' || k);
    k2 := hashtext(k || E'\x1f' || sec);
END $$;

-- The proof of the hint of inserting k into rel held by session pid in
-- transaction x: a key derived from the secret, k, the pid and the
-- transaction (a pid is used again by later sessions, a transaction
-- number not).
CREATE FUNCTION hoplock_internal.hint_proof(k text, rel regclass, pid integer, x xid,
                                            OUT k1 integer, OUT k2 integer)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    h record := hoplock_internal.hint_key(rel::text || E'\x1f' || k || E'\x1f' || pid
                                          || E'\x1f' || x::text);
BEGIN
    k1 := h.k1;
    k2 := h.k2;
END $$;

-- Whether a session other than this one holds the hint of inserting k
-- into rel, ROW EXCLUSIVE on rel and the hint's proof of its pid and
-- transaction: an insert of the same key by hoplock, in flight.
CREATE FUNCTION hoplock_internal.inserting(k text, rel regclass)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    h record := hoplock_internal.hint_key(rel::text || E'\x1f' || k);
    db oid := (SELECT d.oid FROM pg_database AS d WHERE d.datname = current_database());
    c record;
    pr record;
BEGIN
    FOR c IN
        WITH lk AS MATERIALIZED (SELECT * FROM pg_locks AS l0
                                  WHERE l0.granted AND l0.pid <> pg_backend_pid())
        SELECT a.pid, t.transactionid AS x FROM lk AS a
               JOIN lk AS t ON t.pid = a.pid AND t.locktype = 'transactionid'
                           AND t.mode = 'ExclusiveLock'
         WHERE a.locktype = 'advisory' AND a.objsubid = 2 AND a.database = db
           AND a.classid = (h.k1::bigint & 4294967295)::oid
           AND a.objid = (h.k2::bigint & 4294967295)::oid
           AND EXISTS (SELECT FROM lk AS w
                        WHERE w.pid = a.pid AND w.locktype = 'relation'
                          AND w.relation = rel AND w.mode = 'RowExclusiveLock')
    LOOP
        pr := hoplock_internal.hint_proof(k, rel, c.pid, c.x);
        IF EXISTS (SELECT FROM pg_locks AS a
                    WHERE a.pid = c.pid AND a.granted
                      AND a.locktype = 'advisory' AND a.objsubid = 2 AND a.database = db
                      AND a.classid = (pr.k1::bigint & 4294967295)::oid
                      AND a.objid = (pr.k2::bigint & 4294967295)::oid) THEN
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END $$;

-- Take the hint of inserting k into rel, and its proof, for the
-- transaction (which the proof names: it is given its number now, as the
-- insert would); false if an insert of k by hoplock is in flight
-- (contended).
CREATE FUNCTION hoplock_internal.hint(k text, rel regclass)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    h record := hoplock_internal.hint_key(rel::text || E'\x1f' || k);
    pr record;
BEGIN
    EXECUTE format('LOCK TABLE %s IN ROW EXCLUSIVE MODE', rel);
    IF pg_try_advisory_xact_lock(h.k1, h.k2) THEN
        pr := hoplock_internal.hint_proof(k, rel, pg_backend_pid(), pg_current_xact_id()::xid);
        -- (held by another session: no proof, and the insert decides)
        PERFORM pg_try_advisory_xact_lock(pr.k1, pr.k2);
        RETURN true;
    END IF;
    RETURN NOT hoplock_internal.inserting(k, rel);
END $$;

-- Whether no insert of k into rel by hoplock is in flight; takes nothing.
-- (The hint held by a session without its proof says nothing either way:
-- an insert of hoplock's that could not take the hint goes on without
-- it; false then, and the caller asks the unique index.)
CREATE FUNCTION hoplock_internal.no_hint(k text, rel regclass)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    h record := hoplock_internal.hint_key(rel::text || E'\x1f' || k);
BEGIN
    IF pg_try_advisory_lock_shared(h.k1, h.k2) THEN
        PERFORM pg_advisory_unlock_shared(h.k1, h.k2);
        RETURN true;
    END IF;
    RETURN false;
END $$;

-- Insert a name's first row (r), unless another transaction did or is
-- doing it: NULL then (contended).
CREATE FUNCTION hoplock_internal.insert_row(r hoplock_internal.lease)
RETURNS hoplock_internal.lease
LANGUAGE plpgsql VOLATILE SET lock_timeout = '1ms' AS $$
BEGIN
    IF NOT hoplock_internal.hint(r.name, 'hoplock_internal.lease') THEN
        RETURN NULL;
    END IF;
    INSERT INTO hoplock_internal.lease AS l SELECT (r).*
        ON CONFLICT (name) DO NOTHING
        RETURNING * INTO r;
    RETURN r;
EXCEPTION WHEN lock_not_available THEN
    RETURN NULL;
END $$;

-- Claims (00_tables.sql), for what has no lease row to lock: an owner's
-- keepalive, an owner's acquire of a lease with slots.  A claim is a row
-- of hoplock_internal.claim keyed by what is claimed, the role among it,
-- so that no other role's calls can claim the same.
--
-- claim: insert the key's row and delete it at once; until the
-- transaction (or subtransaction) ends, another transaction's insert of
-- the key conflicts with it.  false if another transaction in flight
-- claimed it.  A transaction's own claim is no obstacle.
CREATE FUNCTION hoplock_internal.claim(k text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SET lock_timeout = '1ms' AS $$
BEGIN
    IF NOT hoplock_internal.hint(k, 'hoplock_internal.claim') THEN
        RETURN false;
    END IF;
    INSERT INTO hoplock_internal.claim AS c (key) VALUES (k) ON CONFLICT (key) DO NOTHING;
    DELETE FROM hoplock_internal.claim AS c WHERE c.key = k;
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END $$;

-- hold_claim: lock the key's row FOR UPDATE, tried, until the transaction
-- ends; the row is made (and kept) if it is not there.  false if another
-- transaction in flight holds it or is making it.
CREATE FUNCTION hoplock_internal.hold_claim(k text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SET lock_timeout = '1ms' AS $$
BEGIN
    PERFORM FROM hoplock_internal.claim AS c WHERE c.key = k FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        RETURN true;
    ELSIF EXISTS (SELECT FROM hoplock_internal.claim AS c WHERE c.key = k) THEN
        RETURN false;
    ELSIF NOT hoplock_internal.hint(k, 'hoplock_internal.claim') THEN
        RETURN false;
    END IF;
    INSERT INTO hoplock_internal.claim AS c (key) VALUES (k) ON CONFLICT (key) DO NOTHING;
    RETURN FOUND;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END $$;

-- claim_free: whether no other transaction in flight holds the key by
-- hold_claim, or is making its row; takes nothing.
CREATE FUNCTION hoplock_internal.claim_free(k text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    free boolean;
BEGIN
    -- (no row, none being made: the common case, an owner that never
    -- called hoplock_renew_all, with no subtransaction)
    IF NOT EXISTS (SELECT FROM hoplock_internal.claim AS c WHERE c.key = k)
       AND hoplock_internal.no_hint(k, 'hoplock_internal.claim') THEN
        RETURN true;
    END IF;
    -- (a share lock, tried, in a subtransaction rolled back)
    BEGIN
        PERFORM FROM hoplock_internal.claim AS c WHERE c.key = k FOR SHARE SKIP LOCKED;
        free := FOUND;
        RAISE EXCEPTION USING ERRCODE = 'HLC02';
    EXCEPTION WHEN SQLSTATE 'HLC02' THEN
        NULL;
    END;
    IF free THEN
        RETURN true;
    ELSIF EXISTS (SELECT FROM hoplock_internal.claim AS c WHERE c.key = k) THEN
        RETURN false;                   -- held
    ELSIF hoplock_internal.no_hint(k, 'hoplock_internal.claim') THEN
        RETURN true;                    -- no row, none being made
    END IF;
    -- the hint held: the unique index tells
    RETURN hoplock_internal.claim_insertable(k);
END $$;

-- Whether k's row could be inserted now (a conflict with an insert in
-- flight waited for 1 ms at most); inserts nothing (rolled back).
CREATE FUNCTION hoplock_internal.claim_insertable(k text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SET lock_timeout = '1ms' AS $$
BEGIN
    INSERT INTO hoplock_internal.claim AS c (key) VALUES (k) ON CONFLICT (key) DO NOTHING;
    RAISE EXCEPTION USING ERRCODE = 'HLC02';
EXCEPTION
    WHEN SQLSTATE 'HLC02' THEN
        RETURN true;
    WHEN lock_not_available THEN
        RETURN false;
END $$;

-- The pid of another session holding a lease row up: an open fence, or
-- a change in flight -- a lock of the row, whose xmax (x) is then a
-- transaction, or a multixact of several.  NULL if none.  (The view
-- hoplock_leases passes x: its readers have no right on the table.)
CREATE FUNCTION hoplock_internal.blocker(x xid)
RETURNS integer
LANGUAGE plpgsql VOLATILE STRICT AS $$
DECLARE
    xs text[];
BEGIN
    IF x::text = '0' THEN
        RETURN NULL;
    END IF;
    xs := ARRAY[x::text];
    BEGIN
        -- (SQL cannot tell a multixact's number from a transaction's: its
        -- members count only if one of them is a transaction in flight)
        xs := xs || ARRAY(SELECT m.xid::text FROM pg_get_multixact_members(x) AS m);
    EXCEPTION WHEN OTHERS THEN
        NULL;
    END;
    RETURN (SELECT min(k.pid) FROM pg_locks AS k
             WHERE k.locktype = 'transactionid' AND k.mode = 'ExclusiveLock' AND k.granted
               AND k.pid <> pg_backend_pid() AND k.transactionid::text = ANY (xs));
END $$;

-- A transaction that changed a lease or fenced one cannot be prepared (as
-- in the C edition): a prepared transaction could hold a lease, or keep
-- it from lapsing or changing hands, for as long as it stays prepared.
-- SQL has no hook at PREPARE, but PostgreSQL refuses to prepare a
-- transaction that holds an advisory lock at both session and transaction
-- level in the same mode (0A000): so each session holds one of its own,
-- shared, at session level, taken once, and every change and fence takes
-- it again for the transaction.  (A term change sends a NOTIFY as well, which PREPARE
-- refuses too.)  The session lock is taken again by every call (a count
-- in the backend's own lock table, no shared memory touched): the session
-- may have dropped it (pg_advisory_unlock_all), and a setting would be
-- the session's to forge.  Its keys are hashtext('hoplock: no PREPARE')
-- and the pid; any role may lock any key, so where another session holds
-- that one the session takes a key of its own, chosen at random (tried,
-- never waited for), and remembers it in the setting.
CREATE FUNCTION hoplock_internal.no_prepare(listen boolean DEFAULT true) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    memo text := current_setting('hoplock_sql.no_prepare', true);
    k1 integer := hashtext('hoplock: no PREPARE');
    k2 integer;
BEGIN
    IF split_part(memo, ':', 1) IS DISTINCT FROM pg_backend_pid()::text THEN
        -- (a parallel worker can set nothing: its write fails on its own)
        IF (SELECT a.backend_type FROM pg_stat_get_activity(pg_backend_pid()) AS a) = 'parallel worker' THEN
            RETURN;
        END IF;
        memo := NULL;
    END IF;
    k2 := coalesce(nullif(split_part(memo, ':', 2), '')::integer, pg_backend_pid());
    FOR i IN 1..10 LOOP
        IF pg_try_advisory_lock_shared(k1, k2) THEN
            IF memo IS DISTINCT FROM pg_backend_pid() || ':' || k2 THEN
                PERFORM set_config('hoplock_sql.no_prepare', pg_backend_pid() || ':' || k2, false);
            END IF;
            -- (held by the session: granted at once)
            PERFORM pg_advisory_xact_lock_shared(k1, k2);
            -- The session may drop its lock after this call, in this very
            -- transaction (pg_advisory_unlock_all): a LISTEN and UNLISTEN
            -- of a channel of hoplock's own mark the transaction for good
            -- (PREPARE refuses one that executed LISTEN or UNLISTEN; at
            -- commit they cost no lock but NOTIFY's queue's, briefly, and
            -- leave the session listening to nothing new).  Not in a
            -- parallel query's leader (listen false), which may not LISTEN.
            IF listen AND NOT pg_is_in_recovery() THEN
                LISTEN "hoplock: no PREPARE";
                UNLISTEN "hoplock: no PREPARE";
            END IF;
            RETURN;
        END IF;
        k2 := (floor(random() * 4294967296) - 2147483648)::integer;
    END LOOP;
    RAISE EXCEPTION 'could not lock this session against PREPARE TRANSACTION'
        USING ERRCODE = '55P03';
END $$;
