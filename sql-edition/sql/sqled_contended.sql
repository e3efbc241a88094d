-- sqled_contended: a call that finds the lease contended holds nothing
-- afterwards, even in a transaction that goes on: no term lock (a lock of
-- the lease row, 10_args.sql) that would keep the holder from fencing, or
-- another session from taking the name.  (The locker's session, whose
-- FOR SHARE is the only other lock, can lock the row FOR UPDATE NOWAIT.)
-- (A lease row locked by another transaction, between the call's first
-- look and its lock of the row, is such a case; FOR SHARE makes it last.)
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;
SELECT show(hoplock_acquire('ct', 'a', '1 h'));
SELECT hoplock_release('ct', 'a');
SELECT dblink_connect('ct_locker',
           format('dbname=%s port=%s host=%s', current_database(),
                  current_setting('port'),
                  split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT dblink_exec('ct_locker', 'BEGIN');
SELECT * FROM dblink('ct_locker',
    $$SELECT name FROM hoplock_internal.lease WHERE name = 'ct' FOR SHARE$$) AS t(name text);

BEGIN;
SELECT show(hoplock_acquire('ct', 'b', '1 h'));
SELECT * FROM dblink('ct_locker',
    $$SELECT name FROM hoplock_internal.lease WHERE name = 'ct' FOR UPDATE NOWAIT$$) AS t(not_locked_here text);
-- a wait, which tries again and again in its one transaction
SELECT show(hoplock_wait('ct', 'b', '1 h', '0.1 s'));
SELECT * FROM dblink('ct_locker',
    $$SELECT name FROM hoplock_internal.lease WHERE name = 'ct' FOR UPDATE NOWAIT$$) AS t(not_locked_here text);
COMMIT;

SELECT dblink_exec('ct_locker', 'COMMIT');
SELECT show(hoplock_acquire('ct', 'b', '1 h'));
SELECT hoplock_release('ct', 'b');

-- a name's first term in flight (its row inserted, not committed yet):
-- another first acquire of the name is contended at once, not held up
-- until that transaction ends (PostgreSQL would wait for the unique
-- index's conflict: the insert's hint, 10_args.sql, tells it first)
SELECT dblink_exec('ct_locker', 'BEGIN');
SELECT * FROM dblink('ct_locker', $$SELECT (hoplock_acquire('ct-first', 'a', '1 h')).owner$$) AS t(owner text);
SET statement_timeout = '1s';
SELECT show(hoplock_acquire('ct-first', 'b', '1 h'));
SELECT show(hoplock_wait('ct-first', 'b', '1 h', '0.1 s'));
RESET statement_timeout;
SELECT dblink_exec('ct_locker', 'COMMIT');
SELECT show(hoplock_holder('ct-first'));
SELECT hoplock_release('ct-first', 'a');
SELECT dblink_disconnect('ct_locker');
