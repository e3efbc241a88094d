-- two_phase: a transaction that changed a lease (or any row of hoplock's
-- tables), fenced one, or created or dropped the extension cannot be
-- prepared: a prepared transaction could hold a lease, or keep it from
-- lapsing or changing hands, for as long as it stays prepared, and the
-- work hoplock does at commit would be lost.

SELECT show(hoplock_acquire('2pc', 'a', '1 h'));
SELECT generation AS pc1 FROM hoplock_read('2pc') \gset

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

-- a release (which sends an event too)
BEGIN;
SELECT hoplock_release('2pc', 'a');
PREPARE TRANSACTION 'hoplock_released';
\echo :LAST_ERROR_SQLSTATE

-- a call that wrote the generation floor, then found the lease row held
-- by another transaction (FOR SHARE, here a prepared one) and changed
-- nothing else: the floor row, and its lock, must not stay prepared
SELECT show(hoplock_acquire('2pc-floor', 'a', '1 h'));
SELECT hoplock_release('2pc-floor', 'a');
BEGIN;
SELECT name FROM hoplock_internal.lease WHERE name = '2pc-floor' FOR SHARE;
PREPARE TRANSACTION 'hoplock_row_locker';

-- a forget, which raises the floor's "forgotten" before deleting the row
BEGIN;
SELECT hoplock_forget('2pc-floor');
SELECT gen_label('2pc-floor', forgotten) AS forgotten FROM hoplock_internal.floor;
PREPARE TRANSACTION 'hoplock_forget_floor';
SELECT count(*) = 1 AS prepared FROM pg_prepared_xacts
 WHERE gid = 'hoplock_forget_floor' \gset
\echo :prepared
\if :prepared
ROLLBACK PREPARED 'hoplock_forget_floor';
\endif

-- a new term where the floor has no row (a database upgraded from
-- 1.0.0), in a new session: 1.2 writes the floor's row only for a new
-- name or a forget, so none is written here, and the term's own write
-- keeps the transaction from being prepared
\c
BEGIN;
DELETE FROM hoplock_internal.floor;
SELECT show(hoplock_acquire('2pc-floor', 'b', '1 h'));
SELECT count(*) AS floor_rows FROM hoplock_internal.floor;
PREPARE TRANSACTION 'hoplock_term_floor';
SELECT count(*) = 1 AS prepared FROM pg_prepared_xacts
 WHERE gid = 'hoplock_term_floor' \gset
\echo :prepared
\if :prepared
ROLLBACK PREPARED 'hoplock_term_floor';
\endif

ROLLBACK PREPARED 'hoplock_row_locker';
SELECT count(*) AS floor_rows FROM hoplock_internal.floor;

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
