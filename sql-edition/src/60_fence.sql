/* 60_fence.sql: hoplock_fence and the trigger hoplock_fenced.  A fence
 * takes the name's term lock shared -- its lease row FOR KEY SHARE
 * (10_args.sql) -- until its transaction ends: no term can begin or end
 * meanwhile (that takes the row FOR UPDATE), and renewals (FOR NO KEY
 * UPDATE) go on.  Under REPEATABLE READ and SERIALIZABLE a fence of a row
 * renewed since the transaction's snapshot raises 40001, as any lock of
 * a row changed since does. */

-- Raise 55P03 unless term g holds lease n now (r: its row, or NULL).
CREATE FUNCTION hoplock_internal.fence_check(n text, g bigint, r hoplock_internal.lease)
RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF r.name IS NULL THEN
        RAISE EXCEPTION 'lease "%" is not held by generation %', n, g
            USING ERRCODE = '55P03', DETAIL = 'The lease has never been acquired.';
    ELSIF r.generation <> g THEN
        RAISE EXCEPTION 'lease "%" is at generation %, not %', n, r.generation, g
            USING ERRCODE = '55P03';
    ELSIF r.state = 'r' THEN
        RAISE EXCEPTION 'lease "%" is no longer held by generation %', n, g
            USING ERRCODE = '55P03', DETAIL = 'The term was released.';
    ELSIF r.state = 'x' OR r.expires_at <= clock_timestamp() THEN
        RAISE EXCEPTION 'lease "%" is no longer held by generation %', n, g
            USING ERRCODE = '55P03', DETAIL = format('The term expired at %s.', r.expires_at);
    ELSIF hoplock_internal.session_gone(r.session_pid, r.session_start) THEN
        RAISE EXCEPTION 'lease "%" is no longer held by generation %', n, g
            USING ERRCODE = '55P03', DETAIL = 'The session the term was bound to has ended.';
    END IF;
    PERFORM hoplock_internal.check_role(n, r.owner_roleid, r.owner_role);
END $$;

-- The fence itself: check, lock, check again on the state as it is now.
-- Of a lease with slots, the slot whose term is at generation g.
-- (listen: false in the leader of a parallel query, 10_args.sql)
CREATE FUNCTION hoplock_internal.fence(n text, g bigint, listen boolean DEFAULT true) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r hoplock_internal.lease;
    key text := n;
BEGIN
    SELECT * INTO r FROM hoplock_internal.lease AS l WHERE l.name = n;
    IF r.name IS NULL AND current_setting('transaction_isolation') <> 'read committed' THEN
        -- (the transaction's snapshot may predate the name's first term)
        RAISE EXCEPTION 'lease "%" has no term in the snapshot of this transaction', n
            USING ERRCODE = '55P03',
                  DETAIL = 'Under REPEATABLE READ and SERIALIZABLE the SQL edition of hoplock reads the transaction''s snapshot, which may predate the term.',
                  HINT = 'Fence in a READ COMMITTED transaction.';
    END IF;
    IF hoplock_internal.marker(r) > 1 THEN
        r := hoplock_internal.row_of(n, g);
        IF r.name IS NULL THEN
            RAISE EXCEPTION 'lease "%" is not held by generation %', n, g
                USING ERRCODE = '55P03', DETAIL = 'None of the lease''s slots is at that generation.';
        END IF;
        key := r.name;
    END IF;
    r := hoplock_internal.fold(r);
    PERFORM hoplock_internal.fence_check(hoplock_internal.display_name(key), g, r);
    IF current_setting('transaction_read_only') = 'on' OR pg_is_in_recovery() THEN
        RAISE EXCEPTION 'cannot execute hoplock_fence() in a read-only transaction'
            USING ERRCODE = '25006',
                  DETAIL = 'A fence locks the lease''s row; a read-only transaction has no writes to protect.';
    END IF;
    PERFORM hoplock_internal.no_prepare(listen);
    IF NOT listen THEN
        -- (where this may be a parallel query's leader: in parallel mode no
        -- row can be locked -- a lock needs a transaction id -- nor a
        -- subtransaction begun, which fails first, with PostgreSQL's 25000,
        -- "cannot start subtransactions during a parallel operation", as a
        -- change does)
        BEGIN
            PERFORM;
        EXCEPTION WHEN SQLSTATE 'HLC03' THEN
            NULL;
        END;
    END IF;
    IF NOT hoplock_internal.try_term_lock(key, false) THEN
        RAISE EXCEPTION 'could not fence lease "%"', hoplock_internal.display_name(key)
            USING ERRCODE = '55P03',
                  DETAIL = 'Another transaction is beginning or ending a term of the lease.';
    END IF;
    SELECT * INTO r FROM hoplock_internal.lease AS l WHERE l.name = key;
    PERFORM hoplock_internal.fence_check(hoplock_internal.display_name(key), g, hoplock_internal.fold(r));
END $$;

CREATE FUNCTION @extschema@.hoplock_fence(name text, generation bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hoplock_internal.check_text('name', name);
    PERFORM hoplock_internal.check_generation(generation);
    -- a parallel worker's lock would end with the worker, leaving the
    -- transaction unprotected
    IF (SELECT a.backend_type FROM pg_stat_get_activity(pg_backend_pid()) AS a) = 'parallel worker' THEN
        RAISE EXCEPTION 'cannot execute hoplock_fence() during a parallel operation'
            USING ERRCODE = '25000';
    END IF;
    -- (no LISTEN where this may be the leader of a parallel query: its
    -- workers in pg_stat_activity, or parallel query forced.  A leader
    -- whose workers are gone fails on PostgreSQL's "cannot execute LISTEN
    -- during a parallel operation", 25000.)
    PERFORM hoplock_internal.fence(name, generation,
        current_setting(CASE WHEN current_setting('server_version_num')::integer >= 160000
                             THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END) = 'off'
        AND NOT EXISTS (SELECT FROM pg_stat_get_activity(NULL) AS a
                         WHERE a.leader_pid = pg_backend_pid()));
END $$;

COMMENT ON FUNCTION @extschema@.hoplock_fence(text, bigint) IS
    'raise 55P03 unless the generation holds the lease; otherwise keep any new term from starting until this transaction ends';

-- The trigger: hoplock_fenced('lease', 'generation column').  The checks
-- of the trigger's setup and the fence are done once per transaction,
-- table, trigger, lease, generation and role (remembered in a setting
-- local to the transaction), not once per row.
CREATE FUNCTION @extschema@.hoplock_fenced()
RETURNS trigger
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n text;
    col text;
    att record;
    later name;
    g bigint;
    tbl text := quote_ident(TG_TABLE_NAME);
    bit integer;
    memo text;
BEGIN
    IF TG_LEVEL = 'STATEMENT' AND TG_OP = 'TRUNCATE' THEN
        RAISE EXCEPTION 'cannot truncate table "%" fenced by hoplock_fenced', TG_TABLE_NAME
            USING ERRCODE = '0A000',
                  DETAIL = 'TRUNCATE writes no rows whose generation could be checked.',
                  HINT = 'Delete the rows in a transaction that called hoplock_fence.';
    END IF;
    IF TG_NARGS <> 2 THEN
        RAISE EXCEPTION 'trigger "%" on table "%" must give hoplock_fenced two arguments', TG_NAME, TG_TABLE_NAME
            USING ERRCODE = '22023', HINT = 'Use hoplock_fenced(''lease name'', ''generation column'').';
    END IF;
    n := TG_ARGV[0];
    col := TG_ARGV[1];
    PERFORM hoplock_internal.check_text('name', n);
    IF TG_LEVEL <> 'ROW' THEN
        RAISE EXCEPTION 'hoplock_fenced: must be fired for each row' USING ERRCODE = '39P01';
    END IF;
    IF TG_WHEN <> 'BEFORE' THEN
        RAISE EXCEPTION 'hoplock_fenced: must be fired before the row is written'
            USING ERRCODE = '39P01',
                  HINT = 'Create the trigger as BEFORE INSERT OR UPDATE OR DELETE ... FOR EACH ROW.';
    END IF;
    -- The generation column alone is read, once its type is known to be an
    -- integer: this function runs with the extension owner's rights, and a
    -- conversion of the whole row (to_jsonb) or of a column of another type
    -- could call functions of the table's owner (a cast to json of a type
    -- of theirs) with those rights.
    SELECT a.atttypid, a.attgenerated INTO att
      FROM pg_attribute AS a
     WHERE a.attrelid = TG_RELID AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of table "%" does not exist', col, TG_TABLE_NAME
            USING ERRCODE = '42703',
                  HINT = 'The second argument of hoplock_fenced names the column that holds each row''s generation.';
    END IF;
    IF att.atttypid NOT IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype) THEN
        RAISE EXCEPTION 'column "%" of table "%" is of type %, not an integer type',
                        col, TG_TABLE_NAME, format_type(att.atttypid, NULL)
            USING ERRCODE = '42804';
    END IF;
    IF TG_OP = 'DELETE' THEN
        EXECUTE format('SELECT ($1).%I::pg_catalog.int8', col) INTO g USING OLD;
    ELSE
        EXECUTE format('SELECT ($1).%I::pg_catalog.int8', col) INTO g USING NEW;
    END IF;
    memo := 'hoplock_sql.f' || md5(concat_ws(':', TG_RELID, TG_NAME, TG_OP, n, g, hoplock_internal.caller()));
    -- (the memo is the session's to forge: it spares the setup's checks,
    -- but the fence it stands for is checked again, cheaply -- a running
    -- term of the lease at generation g, the caller's to fence, whose term
    -- lock this transaction holds; while held, no term begins or ends)
    IF current_setting(memo, true) = 'on'
       AND EXISTS (SELECT FROM hoplock_internal.lease AS l
                    WHERE (l.name = n OR (l.name > n || E'\x1f' AND l.name < n || E'\x20'))
                      AND l.generation = g AND l.state = 'h'
                      AND hoplock_internal.is_member(l.owner_roleid)
                      AND hoplock_internal.try_term_lock(l.name, false)) THEN
        RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    IF att.attgenerated <> '' THEN
        RAISE EXCEPTION 'column "%" of table "%" is a generated column', col, TG_TABLE_NAME
            USING ERRCODE = '0A000',
                  DETAIL = 'A generated column is computed after BEFORE triggers, so hoplock_fenced would check a value other than the one written.',
                  HINT = 'Stamp the generation into a plain column.';
    END IF;
    bit := CASE TG_OP WHEN 'INSERT' THEN 4 WHEN 'DELETE' THEN 8 ELSE 16 END;
    SELECT t.tgname INTO later
      FROM pg_trigger AS t
     WHERE t.tgrelid = TG_RELID AND NOT t.tgisinternal AND t.tgenabled <> 'D'
       AND t.tgtype & 1 = 1 AND t.tgtype & 2 = 2 AND t.tgtype & bit = bit
       AND t.tgname::text COLLATE "C" > TG_NAME::text COLLATE "C"
     ORDER BY t.tgname LIMIT 1;
    IF later IS NOT NULL THEN
        RAISE EXCEPTION 'trigger "%" on table "%" fires after trigger "%", which fences the table',
                        later, TG_TABLE_NAME, TG_NAME
            USING ERRCODE = '0A000',
                  DETAIL = 'A BEFORE trigger that fires after hoplock_fenced could change the generation it checked.',
                  HINT = 'Rename the triggers so that the one calling hoplock_fenced sorts last: BEFORE triggers fire in name order.';
    END IF;
    IF g IS NULL THEN
        RAISE EXCEPTION 'a row of table "%" written under lease "%" has a null generation', TG_TABLE_NAME, n
            USING ERRCODE = '22004';
    END IF;
    PERFORM hoplock_internal.fence(n, g);
    PERFORM set_config(memo, 'on', true);
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END $$;

COMMENT ON FUNCTION @extschema@.hoplock_fenced() IS
    'trigger: hoplock_fenced(lease, generation_column) rejects rows whose generation does not hold the lease now';
