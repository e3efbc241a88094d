-- hoplock_wait: the blocking acquire.  (Being woken by another session is
-- in specs/wait.spec.)

-- A free lease: at once.
SELECT show(hoplock_wait('wt', 'a', '1 h', '10 s'));

-- Held by the same owner: extended, like acquire.
SELECT show(hoplock_wait('wt', 'a', '1 h', '0 s'));

-- Held by another: NULL once the timeout has passed, and not before.
SELECT clock_timestamp() AS t0 \gset
SELECT show(hoplock_wait('wt', 'b', '1 h', '300 ms'));
SELECT clock_timestamp() - :'t0' >= interval '300 ms' AS waited_the_timeout,
       clock_timestamp() - :'t0' < interval '5 s' AS but_not_much_longer;

-- A timeout of zero is a single try.
SELECT show(hoplock_wait('wt', 'b', '1 h', '0 s'));

-- A lapsing term: the waiter takes over when it lapses, well before the
-- timeout, with a higher generation.
SELECT show(hoplock_acquire('wt-lapse', 'a', '300 ms'));
SELECT clock_timestamp() AS t0 \gset
SELECT show(hoplock_wait('wt-lapse', 'b', '1 h', '30 s'));
SELECT clock_timestamp() - :'t0' < interval '5 s' AS woke_at_the_lapse;

-- session_bound is accepted, as on acquire.
SELECT show(hoplock_wait('wt-bound', 'a', '1 h', '1 s', session_bound => true));
SELECT session_pid = pg_backend_pid() AS bound_to_this_session
  FROM hoplock_internal.lease WHERE name = 'wt-bound';
SELECT hoplock_release('wt-bound', 'a');

-- Bad input: the same checks as acquire, and the timeout's.
SELECT hoplock_wait(NULL, 'a', '1 h', '1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_wait('wt', NULL, '1 h', '1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_wait('wt', 'a', NULL, '1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_wait('wt', 'a', '1 h', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_wait('wt', 'a', '1 h', '1 s', session_bound => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_wait('wt', 'a', '1 h', '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_wait('wt', 'a', '1 h', '1 mon');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_wait('', 'a', '1 h', '1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_wait('wt', 'a', '0 s', '1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('wt', 'a', '1 h', session_bound => NULL);
\echo :LAST_ERROR_SQLSTATE
BEGIN READ ONLY;
SELECT hoplock_wait('wt', 'a', '1 h', '1 s');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

-- statement_timeout ends a wait, and the session can wait again after.
SET statement_timeout = '200ms';
SELECT hoplock_wait('wt', 'b', '1 h', '1 min');
\echo :LAST_ERROR_SQLSTATE
RESET statement_timeout;
SELECT show(hoplock_wait('wt', 'b', '1 h', '100 ms'));
SELECT hoplock_release('wt', 'a');
SELECT show(hoplock_wait('wt', 'b', '1 h', '1 s'));
