-- sqled_two_phase: as in the C edition, a transaction that changed a
-- lease or fenced one cannot be prepared (0A000), though with
-- PostgreSQL's own message: each call that changes or fences executes a
-- LISTEN and UNLISTEN of a channel of hoplock's own, which PREPARE
-- refuses (a term change sends a NOTIFY as well), and takes, for its
-- transaction, an advisory lock its session holds too, which PREPARE
-- refuses at both levels.  A call that changed
-- nothing, or only read, leaves the transaction free to be prepared.
-- (Unlike the C edition, PREPARE after DROP EXTENSION hoplock is not
-- refused: no SQL runs at a DROP EXTENSION.)

SELECT show(hoplock_acquire('2pc', 'a', '1 h'));
SELECT generation AS pc1 FROM hoplock_read('2pc') \gset
\set VERBOSITY terse

-- a renewal
BEGIN;
SELECT show(hoplock_renew('2pc', 'a', '1 h'));
PREPARE TRANSACTION 'hoplock_renewed';
\echo :LAST_ERROR_SQLSTATE

-- a fence
BEGIN;
SELECT hoplock_fence('2pc', :pc1);
PREPARE TRANSACTION 'hoplock_fenced';
\echo :LAST_ERROR_SQLSTATE

-- hoplock_renew_all
SELECT show(hoplock_acquire('2pc-k', '2pc-k', '1 h'));
BEGIN;
SELECT count(*) AS renewed FROM hoplock_renew_all('2pc-k', '1 h');
PREPARE TRANSACTION 'hoplock_renewed_all';
\echo :LAST_ERROR_SQLSTATE

-- a release (a NOTIFY too)
BEGIN;
SELECT hoplock_release('2pc', 'a'), hoplock_release('2pc-k', '2pc-k');
PREPARE TRANSACTION 'hoplock_released';
\echo :LAST_ERROR_SQLSTATE

-- a forget
SELECT show(hoplock_acquire('2pc-f', 'a', '1 h'));
SELECT hoplock_release('2pc-f', 'a');
BEGIN;
SELECT hoplock_forget('2pc-f');
PREPARE TRANSACTION 'hoplock_forgot';
\echo :LAST_ERROR_SQLSTATE

-- a contended acquire changed nothing: it may be prepared
BEGIN;
SELECT show(hoplock_acquire('2pc', 'b', '1 h'));
PREPARE TRANSACTION 'hoplock_contended';
COMMIT PREPARED 'hoplock_contended';

-- so may a transaction that only read leases
BEGIN;
SELECT show(hoplock_holder('2pc'));
PREPARE TRANSACTION 'hoplock_read';
COMMIT PREPARED 'hoplock_read';

-- and in a new session, the first call refuses as well
\c
BEGIN;
SELECT show(hoplock_renew('2pc', 'a', '1 h'));
PREPARE TRANSACTION 'hoplock_renewed_first';
\echo :LAST_ERROR_SQLSTATE

-- the session's own settings do not free it: a setting naming the
-- session's pid (the edition's memo that its session lock is taken) does
-- not keep the next call from taking that lock
\c
SELECT set_config('hoplock_sql.no_prepare', pg_backend_pid()::text, false) IS NOT NULL AS forged;
BEGIN;
SELECT show(hoplock_renew('2pc', 'a', '1 h'));
PREPARE TRANSACTION 'hoplock_renewed_forged';
\echo :LAST_ERROR_SQLSTATE

-- nor does dropping the session's advisory locks between two calls
SELECT pg_advisory_unlock_all();
BEGIN;
SELECT hoplock_fence('2pc', :pc1);
PREPARE TRANSACTION 'hoplock_fenced_unlocked';
\echo :LAST_ERROR_SQLSTATE

-- another session holding the lock's key exclusively (any role may take
-- any advisory lock) neither hangs the session's calls nor frees its
-- transactions: the session takes a key of its own instead
\c
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;
SELECT dblink_connect('other',
           format('dbname=%s port=%s host=%s', current_database(),
                  current_setting('port'),
                  split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT * FROM dblink('other',
    format('SELECT pg_advisory_lock(hashtext(%L), %s)', 'hoplock: no PREPARE', pg_backend_pid()))
    AS t(locked text);
SET statement_timeout = '5s';
BEGIN;
SELECT show(hoplock_renew('2pc', 'a', '1 h'));
PREPARE TRANSACTION 'hoplock_renewed_key_taken';
\echo :LAST_ERROR_SQLSTATE
RESET statement_timeout;
SELECT dblink_disconnect('other');

-- nor does dropping the session's advisory locks after the call, in the
-- transaction itself
BEGIN;
SELECT show(hoplock_renew('2pc', 'a', '1 h'));
SELECT pg_advisory_unlock_all();
PREPARE TRANSACTION 'hoplock_renewed_unlocked';
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT hoplock_fence('2pc', :pc1);
SELECT pg_advisory_unlock_all();
PREPARE TRANSACTION 'hoplock_fenced_unlocked_after';
\echo :LAST_ERROR_SQLSTATE

\set VERBOSITY default
SELECT count(*) AS prepared FROM pg_prepared_xacts;
SELECT show(hoplock_holder('2pc'));
SELECT hoplock_release('2pc', 'a'), hoplock_release('2pc-k', '2pc-k');
