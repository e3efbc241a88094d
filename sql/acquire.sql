-- acquire: free, held by the same owner, held by another, released, expired.

-- A free lease: a new term, the name's first generation (g1), expires_at =
-- clock + ttl.
SELECT show(l), l.handle IS NOT NULL AS has_handle,
       l.expires_at - l.acquired_at AS ttl
  FROM hoplock_acquire('acq', 'host-a:1', '15 s') AS l;

-- Held by another owner: NULL, and nothing changes.
SELECT show(hoplock_acquire('acq', 'host-b:2', '15 s'));
SELECT show(hoplock_holder('acq'));

-- Held by the same owner: extended like a renewal, same generation and
-- acquired_at, later expires_at, new handle.
SELECT acquired_at AS first_acquired, expires_at AS first_expires, handle AS first_handle
  FROM hoplock_read('acq') \gset
SELECT show(l),
       l.acquired_at = :'first_acquired' AS same_acquired_at,
       l.expires_at > :'first_expires' AS later_expiry,
       l.handle <> :'first_handle' AS new_handle
  FROM hoplock_acquire('acq', 'host-a:1', '1 h') AS l;

-- Released: the next acquire starts a higher generation.
SELECT hoplock_release('acq', 'host-a:1');
SELECT show(hoplock_acquire('acq', 'host-b:2', '1 h'));

-- Force-released: higher again.
SELECT hoplock_force_release('acq');
SELECT show(hoplock_acquire('acq', 'host-a:1', '50 ms'));

-- Expired: anyone may take it, with a higher generation.
SELECT pg_sleep(0.1);
SELECT show(hoplock_holder('acq'));
SELECT wait_expired('acq');
SELECT show(hoplock_acquire('acq', 'host-b:2', '50 ms'));

-- Expired and taken again by the same owner: still a new term.
SELECT pg_sleep(0.1);
SELECT wait_expired('acq');
SELECT show(hoplock_acquire('acq', 'host-b:2', '1 h'));

-- Time is the clock at the call, not the transaction's start.
BEGIN;
SELECT pg_sleep(0.2);
SELECT l.acquired_at >= now() + interval '0.2 s' AS clock_not_xact_start,
       l.expires_at = l.acquired_at + interval '10 s' AS expires_is_clock_plus_ttl
  FROM hoplock_acquire('acq-clock', 'x', '10 s') AS l;
COMMIT;

-- ttl granularity: microseconds count, days are 24 hours.
SELECT l.expires_at - l.acquired_at AS ttl
  FROM hoplock_acquire('acq-us', 'x', '0.000001 s') AS l;
SELECT l.expires_at - l.acquired_at AS ttl
  FROM hoplock_acquire('acq-day', 'x', '1 day') AS l;

-- Names and owners are compared byte for byte: case and trailing space matter.
SELECT show(hoplock_acquire('Acq', 'host-a:1', '1 h'));
SELECT show(hoplock_acquire('acq ', 'host-a:1', '1 h'));
SELECT show(hoplock_acquire('Acq', 'HOST-A:1', '1 h'));

-- The longest name and owner (256 bytes) are accepted; any text works.
SELECT length(show(hoplock_acquire(repeat('n', 256), repeat('o', 256), '1 h')));
SELECT show(hoplock_acquire('ünïcödé "quoted" \back\slash', 'ö', '1 h'));

-- A call in a transaction that rolls back leaves nothing behind.
BEGIN;
SELECT show(hoplock_acquire('acq-rollback', 'x', '1 h'));
ROLLBACK;
SELECT show(hoplock_read('acq-rollback'));

-- Several calls in one transaction see each other.
BEGIN;
SELECT show(hoplock_acquire('acq-multi', 'x', '1 h'));
SELECT show(hoplock_acquire('acq-multi', 'y', '1 h'));
SELECT hoplock_release('acq-multi', 'x');
SELECT show(hoplock_acquire('acq-multi', 'y', '1 h'));
COMMIT;
SELECT show(hoplock_holder('acq-multi'));

-- And so does a subtransaction that rolls back undo only its own part.
BEGIN;
SELECT show(hoplock_acquire('acq-sub', 'x', '1 h'));
SAVEPOINT s;
SELECT hoplock_release('acq-sub', 'x');
SELECT show(hoplock_acquire('acq-sub', 'y', '1 h'));
ROLLBACK TO SAVEPOINT s;
SELECT show(hoplock_holder('acq-sub'));
COMMIT;
