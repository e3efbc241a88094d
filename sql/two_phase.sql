-- two_phase: a transaction that changed a lease, fenced one, or created or
-- dropped the extension cannot be prepared: a prepared transaction could
-- hold a lease, or keep it from lapsing or changing hands, for as long as
-- it stays prepared, and the work hoplock does at commit would be lost.

SELECT show(hoplock_acquire('2pc', 'a', '1 h'));

-- a renewal
BEGIN;
SELECT show(hoplock_renew('2pc', 'a', '1 h'));
PREPARE TRANSACTION 'hoplock_renewed';
\echo :LAST_ERROR_SQLSTATE

-- a fence
BEGIN;
SELECT hoplock_fence('2pc', 1);
PREPARE TRANSACTION 'hoplock_fenced';
\echo :LAST_ERROR_SQLSTATE

-- a release (which sends an event too)
BEGIN;
SELECT hoplock_release('2pc', 'a');
PREPARE TRANSACTION 'hoplock_released';
\echo :LAST_ERROR_SQLSTATE

-- dropping the extension
BEGIN;
DROP EXTENSION hoplock CASCADE;
PREPARE TRANSACTION 'hoplock_dropped';
\echo :LAST_ERROR_SQLSTATE

SELECT count(*) AS prepared FROM pg_prepared_xacts;
SELECT show(hoplock_holder('2pc'));

-- a transaction that only read leases can be prepared
BEGIN;
SELECT show(hoplock_holder('2pc'));
PREPARE TRANSACTION 'hoplock_read';
COMMIT PREPARED 'hoplock_read';
