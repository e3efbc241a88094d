/* 70_stream.sql: reading the event log -- hoplock_events, hoplock_watch,
 * hoplock_position.  They return an event only once no transaction still
 * open can commit a smaller number (30_events.sql).  With no worker,
 * hoplock_events and hoplock_watch first announce what lapsed (the
 * expired terms, the ended sessions and holds), unless read-only. */

-- 22023 for a negative number; HL001 for one that is not of this history.
CREATE FUNCTION hoplock_internal.check_since(since bigint, horizon bigint) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF since < 0 THEN
        RAISE EXCEPTION 'event number % is negative', since USING ERRCODE = '22023';
    END IF;
    IF since > 0 AND NOT EXISTS (SELECT FROM hoplock_internal.event AS e WHERE e.seq = since) THEN
        RAISE EXCEPTION 'event number % is not in this history', since USING ERRCODE = 'HL001';
    END IF;
END $$;

CREATE FUNCTION hoplock_internal.events_after(since bigint,
    OUT seq bigint, OUT event text, OUT name text, OUT owner text,
    OUT generation bigint, OUT at timestamptz, OUT value text, OUT free_at timestamptz,
    OUT slot integer)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    h bigint;
BEGIN
    PERFORM hoplock_internal.expire();
    h := hoplock_internal.horizon();
    PERFORM hoplock_internal.check_since(since, h);
    RETURN QUERY
        SELECT e.seq, e.event, hoplock_internal.base_name(e.name), e.owner::text, e.generation, e.at,
               e.value::text, e.free_at, hoplock_internal.slot_of(e.name)
          FROM hoplock_internal.event AS e
         WHERE e.seq > since AND e.seq <= h
         ORDER BY e.seq;
END $$;

CREATE FUNCTION @extschema@.hoplock_events(since bigint DEFAULT 0)
RETURNS SETOF @extschema@.hoplock_event
LANGUAGE sql VOLATILE STRICT PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
    SELECT * FROM hoplock_internal.events_after(since)
$$;

COMMENT ON FUNCTION @extschema@.hoplock_events(bigint) IS
    'the events after number since, from the event log: acquired, renewed (with hoplock.notify_renewals), released, expired, proclaimed, step_down, freed';

-- No worker wakes a watcher: it reads again every 10 ms (100 ms after its
-- first second of waiting) until an event comes or the timeout passes.
CREATE FUNCTION @extschema@.hoplock_watch(after bigint, timeout interval)
RETURNS SETOF @extschema@.hoplock_event
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    deadline timestamptz;
    started timestamptz := clock_timestamp();
    got boolean;
    e @extschema@.hoplock_event;
BEGIN
    IF after IS NULL THEN
        RAISE EXCEPTION 'argument "after" must not be null' USING ERRCODE = '22004';
    END IF;
    PERFORM hoplock_internal.check_interval('timeout', timeout, 'timeout');
    IF after < 0 THEN
        RAISE EXCEPTION 'event number % is negative', after USING ERRCODE = '22023';
    END IF;
    deadline := started + timeout;
    LOOP
        got := false;
        FOR e IN SELECT * FROM hoplock_internal.events_after(after)
        LOOP
            got := true;
            RETURN NEXT e;
        END LOOP;
        EXIT WHEN got OR clock_timestamp() >= deadline;
        PERFORM pg_sleep(least(CASE WHEN clock_timestamp() - started < interval '1 s' THEN 0.01 ELSE 0.1 END,
                               greatest(extract(epoch FROM deadline - clock_timestamp()), 0)));
    END LOOP;
END $$;

COMMENT ON FUNCTION @extschema@.hoplock_watch(bigint, interval) IS
    'the events after number after, waiting up to timeout for the first: the event stream for a client that cannot LISTEN';

CREATE FUNCTION @extschema@.hoplock_position()
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    h bigint := hoplock_internal.horizon();
BEGIN
    RETURN coalesce((SELECT max(e.seq) FROM hoplock_internal.event AS e WHERE e.seq <= h), 0);
END $$;

COMMENT ON FUNCTION @extschema@.hoplock_position() IS
    'the newest event number a reader may resume from: no event at or below it can still appear';
