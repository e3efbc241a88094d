-- sqled_horizon: events are numbered when recorded, so a reader must not
-- return a number while a transaction still open can commit a smaller one.
-- Each writing transaction publishes a lower bound of its numbers (a
-- shared advisory lock); readers stop below the smallest bound of others.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;
SELECT dblink_connect('writer',
           format('dbname=%s port=%s host=%s', current_database(),
                  current_setting('port'),
                  split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT hoplock_position() AS p \gset

-- an open transaction takes a number; a later one commits a greater one
SELECT dblink_exec('writer', 'BEGIN');
SELECT * FROM dblink('writer',
    $$SELECT (hoplock_acquire('hz1', 'a', '1 h')).owner$$) AS t(owner text);
SELECT show(hoplock_acquire('hz2', 'b', '1 h'));

-- readers hold it back: nothing of either yet, and the position stays
SELECT count(*) AS seen FROM hoplock_events(:p) WHERE name IN ('hz1', 'hz2');
SELECT hoplock_position() = :p AS position_held;
SELECT count(*) AS seen FROM hoplock_watch(:p, '50 ms') WHERE name IN ('hz1', 'hz2');

-- the open one commits: both, in number order
SELECT dblink_exec('writer', 'COMMIT');
SELECT name, event FROM hoplock_events(:p) WHERE name IN ('hz1', 'hz2') ORDER BY seq;
SELECT hoplock_position() > :p AS position_moved;

-- a rolled-back one leaves a gap in the numbers, and holds nothing back
SELECT hoplock_position() AS p \gset
SELECT dblink_exec('writer', 'BEGIN');
SELECT * FROM dblink('writer',
    $$SELECT hoplock_release('hz1', 'a')$$) AS t(released boolean);
SELECT dblink_exec('writer', 'ROLLBACK');
SELECT hoplock_release('hz2', 'b');
SELECT name, event FROM hoplock_events(:p) WHERE name IN ('hz1', 'hz2') ORDER BY seq;
SELECT hoplock_release('hz1', 'a');

-- a session's own advisory locks, whatever their keys, hold nothing
-- back: only a transaction that is writing hoplock's events publishes a
-- bound (an application's lock of a 64-bit key, or one taken to stall
-- the readers, is not one)
SELECT hoplock_position() AS p \gset
SELECT dblink_exec('writer', 'BEGIN');
SELECT * FROM dblink('writer',
    $$SELECT pg_advisory_lock_shared(1::bigint << 52),
             pg_advisory_xact_lock_shared((1::bigint << 52) + 1)$$) AS t(a text, b text);
SELECT show(hoplock_acquire('hz3', 'c', '1 h'));
SELECT name, event FROM hoplock_events(:p) WHERE name = 'hz3';
SELECT hoplock_position() > :p AS position_moved;
SELECT count(*) AS seen FROM hoplock_events() WHERE name = 'hz3';
SELECT hoplock_release('hz3', 'c');
SELECT dblink_exec('writer', 'COMMIT');

-- nor does a setting saying the transaction published its bound (the
-- setting is the session's own): its numbers are held back all the same
SELECT hoplock_position() AS p \gset
SELECT dblink_exec('writer', 'BEGIN');
SELECT * FROM dblink('writer',
    $$SELECT set_config('hoplock_sql.published', 'on', true),
             (hoplock_acquire('hz4', 'a', '1 h')).owner$$) AS t(forged text, owner text);
SELECT show(hoplock_acquire('hz5', 'b', '1 h'));
SELECT count(*) AS seen FROM hoplock_events(:p) WHERE name IN ('hz4', 'hz5');
SELECT dblink_exec('writer', 'COMMIT');
SELECT name, event FROM hoplock_events(:p) WHERE name IN ('hz4', 'hz5') ORDER BY seq;
SELECT hoplock_release('hz4', 'a'), hoplock_release('hz5', 'b');
SELECT dblink_disconnect('writer');
