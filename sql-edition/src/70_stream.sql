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
    IF since > 0 AND NOT EXISTS (SELECT FROM hoplock_internal.event AS e WHERE e.seq = since)
       -- or one a row carries below its own (a C edition's mass expiry)
       AND NOT EXISTS (SELECT
                         FROM (SELECT e.seq, cardinality(e.earlier_names) AS n
                                 FROM hoplock_internal.event AS e
                                WHERE e.seq > since ORDER BY e.seq LIMIT 1) AS r
                        WHERE r.seq - (r.n::bigint << 11) <= since
                          AND (r.seq - since) % 2048 = 0) THEN
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
    bad_seq bigint;
    bad_detail text;
BEGIN
    PERFORM hoplock_internal.expire();
    h := hoplock_internal.horizon();
    PERFORM hoplock_internal.check_since(since, h);
    -- a row whose columns earlier_* disagree is damaged: an error, as in
    -- the C edition, never fewer events or a number twice
    SELECT d.seq, d.detail INTO bad_seq, bad_detail
      FROM (SELECT e.seq,
           CASE WHEN num_nulls(e.earlier_names, e.earlier_owners, e.earlier_generations,
                               e.earlier_expires_at, e.earlier_values) > 0
                THEN 'Some of its columns earlier_* are null, and some are not.'
                WHEN array_ndims(e.earlier_names) IS DISTINCT FROM 1
                  OR array_ndims(e.earlier_owners) IS DISTINCT FROM 1
                  OR array_ndims(e.earlier_generations) IS DISTINCT FROM 1
                  OR array_ndims(e.earlier_expires_at) IS DISTINCT FROM 1
                  OR array_ndims(e.earlier_values) IS DISTINCT FROM 1
                THEN 'Its columns earlier_* are not the one-dimensional arrays hoplock writes.'
                WHEN cardinality(e.earlier_owners) <> cardinality(e.earlier_names)
                  OR cardinality(e.earlier_generations) <> cardinality(e.earlier_names)
                  OR cardinality(e.earlier_expires_at) <> cardinality(e.earlier_names)
                  OR cardinality(e.earlier_values) <> cardinality(e.earlier_names)
                THEN 'Its columns earlier_* are arrays of different lengths.'
                WHEN array_position(e.earlier_names, NULL) IS NOT NULL
                  OR array_position(e.earlier_owners, NULL) IS NOT NULL
                  OR array_position(e.earlier_generations, NULL) IS NOT NULL
                  OR array_position(e.earlier_expires_at, NULL) IS NOT NULL
                THEN 'One of its earlier names, owners, generations or expiries is null.'
                WHEN cardinality(e.earlier_names) > 999
                THEN 'It carries more events than hoplock writes to a row.'
                WHEN e.seq >> 11 <= cardinality(e.earlier_names)
                THEN 'It carries more events than there are numbers below its own.'
                WHEN e.seq - (cardinality(e.earlier_names)::bigint << 11)
                     <= coalesce((SELECT max(p.seq) FROM hoplock_internal.event AS p WHERE p.seq < e.seq), 0)
                THEN 'The numbers of the events it carries reach down to the row before it.'
           END AS detail
              FROM hoplock_internal.event AS e
             WHERE e.seq > since
               AND num_nulls(e.earlier_names, e.earlier_owners, e.earlier_generations,
                             e.earlier_expires_at, e.earlier_values) < 5) AS d
     WHERE d.detail IS NOT NULL
     ORDER BY d.seq
     LIMIT 1;
    IF bad_detail IS NOT NULL THEN
        RAISE EXCEPTION 'the row of event % of table "hoplock_internal.event" is damaged', bad_seq
            USING ERRCODE = 'XX001', DETAIL = bad_detail,
                  HINT = 'The table was altered or damaged; delete the row or restore the table.';
    END IF;
    -- a row's own event, and those it carries below it (a C edition's mass
    -- expiry: the i-th of n numbered seq - ((n - i + 1) << 11))
    RETURN QUERY
        SELECT u.seq, e.event, hoplock_internal.base_name(u.name), u.owner::text, u.generation, u.at,
               u.value::text, u.free_at, hoplock_internal.slot_of(u.name)
          FROM hoplock_internal.event AS e
         CROSS JOIN LATERAL (
                SELECT e.seq - ((cardinality(e.earlier_names) - x.i + 1) << 11) AS seq,
                       x.name, x.owner, x.generation, x.expires_at AS at, x.value,
                       NULL::timestamptz AS free_at
                  FROM unnest(e.earlier_names, e.earlier_owners, e.earlier_generations,
                              e.earlier_expires_at, e.earlier_values)
                       WITH ORDINALITY AS x(name, owner, generation, expires_at, value, i)
                UNION ALL
                SELECT e.seq, e.name, e.owner, e.generation, e.at, e.value, e.free_at) AS u
         WHERE e.seq > since AND u.seq > since AND u.seq <= h
         ORDER BY u.seq;
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
