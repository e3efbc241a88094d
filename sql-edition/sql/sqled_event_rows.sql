-- sqled_event_rows: a row of the log that carries the events numbered just
-- below its own, as the C edition's worker writes a mass expiry's
-- "expired" events (its columns earlier_*, the i-th of n numbered
-- seq - ((n - i + 1) << 11)), as a restore of a C edition's database
-- brings it: the readers unfold it where its numbers fall.
SELECT hoplock_position() AS p \gset
SELECT coalesce(max(seq), 0) AS s0 FROM hoplock_internal.event \gset

-- three events carried by the row of a fourth, then one of a row of its own
INSERT INTO hoplock_internal.event
    (seq, event, name, owner, generation, expires_at, at,
     earlier_names, earlier_owners, earlier_generations, earlier_expires_at, earlier_values)
VALUES (:s0 + 4 * 2048, 'expired', 'er-4', 'o4', 4, '2026-01-01 00:00:04+00', '2026-01-01 00:00:04+00',
        ARRAY['er-1', 'er-2', 'er-3'], ARRAY['o1', 'o2', 'o3'], ARRAY[1, 2, 3]::bigint[],
        ARRAY['2026-01-01 00:00:01+00', '2026-01-01 00:00:02+00', '2026-01-01 00:00:03+00']::timestamptz[],
        ARRAY[NULL, 'v2', NULL]);
INSERT INTO hoplock_internal.event (seq, event, name, owner, generation, expires_at, at)
VALUES (:s0 + 5 * 2048, 'released', 'er-5', 'o5', 5, '2026-01-01 00:00:05+00', '2026-01-01 00:00:05+00');

-- each event by its own number, in number order
SELECT (seq - :s0) / 2048 AS k, event, name, owner, generation, at, value, free_at
  FROM hoplock_events(:p) WHERE name LIKE 'er-%' ORDER BY seq;
-- resuming from a number inside the row: the rest of it, then what follows
SELECT (seq - :s0) / 2048 AS k, name FROM hoplock_events(:s0 + 2 * 2048) ORDER BY seq;
SELECT (seq - :s0) / 2048 AS k, name FROM hoplock_watch(:s0 + 3 * 2048, '1 s') ORDER BY seq;
-- a number between two of the row's is of no event
\set VERBOSITY sqlstate
SELECT count(*) FROM hoplock_events(:s0 + 2 * 2048 + 1);
\set VERBOSITY default

-- a row whose columns earlier_* disagree is an error, never fewer events
-- or a number twice (as in the C edition: t/100)
CREATE FUNCTION pg_temp.read_all() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    d text;
BEGIN
    PERFORM count(*) FROM hoplock_events(0);
    RETURN 'read';
EXCEPTION WHEN data_corrupted THEN
    GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL;
    RETURN 'XX001: ' || d;
END $$;
BEGIN;
UPDATE hoplock_internal.event SET earlier_owners = earlier_owners[1:2] WHERE seq = :s0 + 4 * 2048;
SELECT pg_temp.read_all();
ROLLBACK;
BEGIN;
UPDATE hoplock_internal.event SET earlier_names = NULL WHERE seq = :s0 + 4 * 2048;
SELECT pg_temp.read_all();
ROLLBACK;
BEGIN;
UPDATE hoplock_internal.event SET earlier_generations[2] = NULL WHERE seq = :s0 + 4 * 2048;
SELECT pg_temp.read_all();
ROLLBACK;
BEGIN;
UPDATE hoplock_internal.event SET earlier_names = '{}' WHERE seq = :s0 + 4 * 2048;
SELECT pg_temp.read_all();
ROLLBACK;
BEGIN;
UPDATE hoplock_internal.event SET seq = :s0 + 3 * 2048 WHERE seq = :s0 + 5 * 2048;
SELECT pg_temp.read_all();
ROLLBACK;
SELECT pg_temp.read_all();

DELETE FROM hoplock_internal.event WHERE seq IN (:s0 + 4 * 2048, :s0 + 5 * 2048);
