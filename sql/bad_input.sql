-- bad input: every call raises with the right SQLSTATE and changes nothing.

SELECT show(hoplock_acquire('bad', 'a', '1 h'));
SELECT lease_table_digest() AS before \gset

-- NULL where a value is required: 22004.
SELECT hoplock_acquire(NULL, 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('bad', NULL, '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('bad', 'a', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_renew(NULL, 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_renew('bad', NULL, '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_renew('bad', 'a', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_renew('bad', 'a', '1 h', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_release(NULL, 'a');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_release('bad', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_release('bad', 'a', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_holder(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_read(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_fence(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_fence('bad', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_force_release(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_write(NULL, NULL, 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_write('bad', NULL, NULL, '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_write('bad', NULL, 'a', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_delete(NULL, 'h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_delete('bad', NULL);
\echo :LAST_ERROR_SQLSTATE

-- Names and owners: empty, over 256 bytes, control characters: 22023.
SELECT hoplock_acquire('', 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('bad', '', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire(repeat('n', 257), 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('bad', repeat('o', 257), '1 h');
\echo :LAST_ERROR_SQLSTATE
-- 129 two-byte characters are 258 bytes: the limit is in bytes
SELECT hoplock_acquire(repeat('é', 129), 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire(E'bad\n', 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('bad', E'a\tb', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire(E'\x01', 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire(E'bad\x7f', 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire(E'bad\u0085', 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_holder('');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_fence(repeat('n', 257), 1);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_release('bad', E'a\nb');
\echo :LAST_ERROR_SQLSTATE

-- ttl: zero, negative, month or year part, above hoplock.max_ttl: 22023.
SELECT hoplock_acquire('bad', 'a', '0 s');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('bad', 'a', '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('bad', 'a', '1 day -24 hours');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('bad', 'a', '1 mon');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('bad', 'a', '1 year');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('bad', 'a', '1 mon -30 days');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('bad', 'a', '1 day 1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('bad', 'a', '2147483647 days');
\echo :LAST_ERROR_SQLSTATE
-- (PostgreSQL 13 prints this interval as "@ -2147483648 days ago")
\set VERBOSITY sqlstate
SELECT hoplock_acquire('bad', 'a', '-2147483648 days');
\set VERBOSITY default
SELECT hoplock_renew('bad', 'a', '0 s');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_write('bad', NULL, 'a', '25 h');
\echo :LAST_ERROR_SQLSTATE
SELECT lease_table_digest() = :'before' AS unchanged;
-- exactly hoplock.max_ttl is fine
SELECT show(hoplock_renew('bad', 'a', '1 day'));
SELECT lease_table_digest() AS before \gset

-- generation <= 0: 22023.
SELECT hoplock_renew('bad', 'a', '1 h', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_release('bad', 'a', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_fence('bad', 0);
\echo :LAST_ERROR_SQLSTATE

-- Writes in a read-only transaction: 25006.  Reads work.
BEGIN READ ONLY;
SELECT hoplock_acquire('bad-ro', 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SET default_transaction_read_only = on;
SELECT hoplock_renew('bad', 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_release('bad', 'a');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_force_release('bad');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_write('bad', NULL, 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_delete('bad', 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT show(hoplock_holder('bad'));
RESET default_transaction_read_only;

-- Nothing above changed the lease table.
SELECT lease_table_digest() = :'before' AS unchanged;
SELECT count(*) AS leases_named_bad_ro FROM hoplock_internal.lease WHERE name = 'bad-ro';
