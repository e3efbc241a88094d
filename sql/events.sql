-- events: the NOTIFY payloads a listener receives, sent by the worker once
-- the change has committed.  A second connection, opened with dblink, is
-- the listener.

CREATE EXTENSION IF NOT EXISTS dblink;
SELECT dblink_connect('listener',
           format('dbname=%s port=%s host=%s', current_database(),
                  current_setting('port'),
                  split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT dblink_exec('listener', 'LISTEN hoplock');

-- Once the worker has sent every event committed (up to hoplock_position(),
-- as another session sees it), a second connection sends a "sync"
-- notification; once the listener has it, it has all events before it
-- (notifications are delivered in commit order).
SELECT dblink_connect('sender',
           format('dbname=%s port=%s host=%s', current_database(),
                  current_setting('port'),
                  split_part(current_setting('unix_socket_directories'), ',', 1)));

CREATE FUNCTION received_payloads() RETURNS TABLE (channel text, payload json)
LANGUAGE plpgsql AS $$
DECLARE
    n record;
    synced boolean := false;
BEGIN
    FOR i IN 1..1000 LOOP
        EXIT WHEN (SELECT coalesce(max(d.delivered), 0)
                     FROM hoplock_internal.delivery AS d) >=
                  (SELECT p FROM dblink('sender', 'SELECT hoplock_position()') AS t(p bigint));
        PERFORM pg_sleep(0.01);
    END LOOP;
    PERFORM dblink_exec('sender', $q$NOTIFY hoplock, 'sync'$q$);
    FOR i IN 1..1000 LOOP
        FOR n IN SELECT * FROM dblink_get_notify('listener') LOOP
            IF n.extra = 'sync' THEN
                synced := true;
            ELSE
                channel := n.notify_name;
                payload := n.extra::json;
                RETURN NEXT;
            END IF;
        END LOOP;
        EXIT WHEN synced;
        PERFORM pg_sleep(0.01);
    END LOOP;
    IF NOT synced THEN
        RAISE EXCEPTION 'the listener did not catch up';
    END IF;
END $$;

-- What the listener got since last time, one line per event, its
-- generation shown as show() does.  The payload must parse as JSON with
-- exactly the contract's keys.
CREATE FUNCTION received() RETURNS TABLE (channel text, event text, name text,
                                          owner text, generation text,
                                          keys text)
LANGUAGE sql AS $$
    SELECT r.channel,
           r.payload->>'event', r.payload->>'name', r.payload->>'owner',
           gen_label(r.payload->>'name', (r.payload->>'generation')::bigint),
           (SELECT string_agg(k, ',' ORDER BY k) FROM json_object_keys(r.payload) AS k)
      FROM received_payloads() AS r
$$;

-- acquired, at commit.
SELECT show(hoplock_acquire('ev', 'a', '1 h'));
SELECT * FROM received();

-- The payload's expires_at is the lease's, in UTC.
SELECT (hoplock_renew('ev', 'a', '1 h')).expires_at AS exp \gset
SET hoplock.notify_renewals = on;
SELECT (hoplock_renew('ev', 'a', '1 h')).expires_at AS exp \gset
RESET hoplock.notify_renewals;
SELECT payload->>'event' AS event,
       (payload->>'expires_at')::timestamptz = :'exp' AS same_expires_at,
       payload->>'expires_at' LIKE '%+00:00' AS utc
  FROM received_payloads();

-- renewed only with hoplock.notify_renewals, which any session may set.
SELECT show(hoplock_renew('ev', 'a', '1 h'));
SELECT * FROM received();

-- released.
SELECT hoplock_release('ev', 'a');
SELECT * FROM received();

-- Nothing when the transaction rolls back.
BEGIN;
SELECT show(hoplock_acquire('ev', 'b', '1 h'));
SELECT * FROM received();
ROLLBACK;
SELECT * FROM received();

-- Nothing from a subtransaction that rolls back; the rest is sent.
BEGIN;
SELECT show(hoplock_acquire('ev', 'b', '1 h'));
SAVEPOINT s;
SELECT hoplock_release('ev', 'b');
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT * FROM received();

-- Taking over a lapsed term that nobody announced yet sends "expired" first.
SELECT hoplock_force_release('ev');
SELECT show(hoplock_acquire('ev', 'c', '50 ms'));
SELECT pg_sleep(0.1);
SELECT show(hoplock_acquire('ev', 'd', '1 h'));
SELECT * FROM received();

-- hoplock_write over a running term: the old term is "released".  (The
-- new one lives long enough to be read back before it lapses, under
-- valgrind too.)
SELECT show(hoplock_write('ev', (SELECT handle FROM hoplock_read('ev')), 'e', '2 s'));
SELECT * FROM received();

-- hoplock_delete of a lapsed term: "expired", no "released".
SELECT pg_sleep(2.1);
SELECT hoplock_delete('ev', (SELECT handle FROM hoplock_read('ev')));
SELECT * FROM received();

-- Names and owners with quotes, backslashes and non-ASCII text come out as
-- valid JSON, unchanged.
SELECT show(hoplock_acquire(E'ev "q" \\ \u00e9\u4e2d', E'o\'w"n\\er', '1 h'));
SELECT name = E'ev "q" \\ \u00e9\u4e2d' AS name_ok, owner = E'o\'w"n\\er' AS owner_ok
  FROM received();

-- Every event carries its number in the database's sequence of events:
-- increasing, and the same hoplock_events() gives for it.
-- The numbers come as strings too, digit for digit (above 2^53 a
-- JavaScript client's JSON.parse loses digits of the numbers).
SELECT show(hoplock_acquire('ev-seq', 'a', '1 h'));
SELECT hoplock_release('ev-seq', 'a');
SELECT show(hoplock_acquire('ev-seq', 'b', '1 h'));
SELECT r.payload->>'event' AS event, r.payload->>'owner' AS owner,
       (r.payload->>'seq')::bigint = e.seq AS same_seq,
       r.payload->>'seq_text' = e.seq::text AS same_seq_text,
       r.payload->>'generation_text' = e.generation::text AS same_generation_text,
       (r.payload->>'seq')::bigint > 9007199254740992 AS above_2_53,
       (r.payload->>'seq')::bigint > lag((r.payload->>'seq')::bigint, 1, 0::bigint)
           OVER (ORDER BY (r.payload->>'seq')::bigint) AS increasing
  FROM received_payloads() AS r
  LEFT JOIN hoplock_events() AS e
         ON e.name = r.payload->>'name'
        AND e.generation = (r.payload->>'generation')::bigint
        AND e.event = r.payload->>'event'
 ORDER BY (r.payload->>'seq')::bigint;
SELECT hoplock_release('ev-seq', 'b');
SELECT count(*) FROM received();

-- The channel is hoplock.channel, set for the whole server (a session
-- cannot split a lease's stream of events).
ALTER SYSTEM SET hoplock.channel = 'elsewhere';
SELECT pg_reload_conf();
SELECT pg_sleep(0.5);
SHOW hoplock.channel;
SELECT dblink_exec('listener', 'LISTEN elsewhere');
SELECT hoplock_force_release(E'ev "q" \\ \u00e9\u4e2d');
SELECT * FROM received();
ALTER SYSTEM RESET hoplock.channel;
SELECT pg_reload_conf();
SELECT pg_sleep(0.5);
SHOW hoplock.channel;

SELECT dblink_disconnect('listener'), dblink_disconnect('sender');

-- EXPLAIN of a statement that would write hoplock's tables writes nothing:
-- not even the branch row of an SQL write (it would be a write in a
-- read-only transaction, and an error on a standby)
BEGIN READ ONLY;
EXPLAIN (COSTS OFF) DELETE FROM hoplock_internal.lease WHERE false;
SELECT pg_current_xact_id_if_assigned() IS NULL AS wrote_nothing;
COMMIT;

-- A number no event of this database can have (far in the future), or of
-- no history at all, is no place to resume from: HL001, not an empty set
\set VERBOSITY terse
SELECT * FROM hoplock_events(9000000000000000000);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM hoplock_events(12345);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
-- while resuming from the newest number there is works
SELECT count(*) AS after_newest
  FROM hoplock_events((SELECT max(seq) FROM hoplock_events(0)));
