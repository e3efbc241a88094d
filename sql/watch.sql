-- watch: the event stream without LISTEN.  hoplock_watch(after, timeout)
-- returns the events after a number as soon as there are any;
-- hoplock_position() is where to resume from; both read the event log
-- that every term change writes in its own transaction.

SELECT hoplock_position() AS start \gset

-- Nothing after the newest: it waits out its timeout and returns nothing.
SELECT count(*) AS none FROM hoplock_watch(:start, '20 ms');

-- A term begins and ends: both events, in number order, at once.
SELECT show(hoplock_acquire('w', 'a', '1 h'));
SELECT hoplock_release('w', 'a');
SELECT event, name, owner, gen_label(name, generation) AS generation,
       seq > :start AS after_start
  FROM hoplock_watch(:start, '10 s');

-- The same as hoplock_events from that number, and hoplock_position moved
-- to the last of them.
SELECT array_agg(seq ORDER BY seq) = (SELECT array_agg(seq ORDER BY seq)
                                        FROM hoplock_events(:start)) AS same_as_events,
       max(seq) = hoplock_position() AS position_is_newest
  FROM hoplock_watch(:start, '0');

-- Renewals are events too when hoplock.notify_renewals is on, and only then.
SELECT hoplock_position() AS p \gset
SELECT show(hoplock_acquire('w', 'b', '1 h'));
SELECT show(hoplock_renew('w', 'b', '1 h'));
SET hoplock.notify_renewals = on;
SELECT show(hoplock_renew('w', 'b', '1 h'));
RESET hoplock.notify_renewals;
SELECT event, owner FROM hoplock_watch(:p, '1 s');

-- A rolled-back change leaves no event.
SELECT hoplock_position() AS p \gset
BEGIN;
SELECT hoplock_release('w', 'b');
ROLLBACK;
SELECT count(*) AS none FROM hoplock_watch(:p, '0');
SELECT hoplock_position() = :p AS position_unchanged;

-- Events are numbered and recorded as their transaction commits: not
-- before, so an open transaction shows none of its own yet, and holds back
-- no one else's (specs/watch_order.spec).
BEGIN;
SELECT hoplock_release('w', 'b');
SELECT count(*) AS not_yet FROM hoplock_watch(:p, '0');
COMMIT;
SELECT event FROM hoplock_watch(:p, '0');

-- Bad input changes nothing and says why.
\set VERBOSITY terse
SELECT * FROM hoplock_watch(NULL, '1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM hoplock_watch(0, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM hoplock_watch(-1, '1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM hoplock_watch(0, '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM hoplock_watch(0, '1 mon');
\echo :LAST_ERROR_SQLSTATE
-- a number of no history: HL001, as hoplock_events
SELECT * FROM hoplock_watch(12345, '1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM hoplock_watch(9000000000000000000, '1 s');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default

-- statement_timeout ends a long watch like any statement.
SET statement_timeout = '50ms';
SELECT count(*) FROM hoplock_watch(hoplock_position(), '1 h');
RESET statement_timeout;

-- Any role may read the stream, as it may read hoplock_leases; the log
-- itself is hoplock's.
CREATE ROLE regress_hoplock_watcher;
SET ROLE regress_hoplock_watcher;
SELECT count(*) > 0 AS reads FROM hoplock_watch(0, '0');
SELECT count(*) FROM hoplock_internal.event;
INSERT INTO hoplock_internal.event VALUES (1, 'acquired', 'forged', 'x', 1, now(), now());
SELECT * FROM hoplock_internal.delivery;
RESET ROLE;
DROP ROLE regress_hoplock_watcher;
