-- privileges: the state is written only through the functions; a term is
-- changed or fenced only by members of the role that began it.

CREATE ROLE regress_hoplock_alice;
CREATE ROLE regress_hoplock_bob;
CREATE ROLE regress_hoplock_carol IN ROLE regress_hoplock_alice;
CREATE ROLE regress_hoplock_operator;
GRANT EXECUTE ON FUNCTION hoplock_force_release(text) TO regress_hoplock_operator;

-- Ordinary roles cannot touch the internal table, not even read it.
SET ROLE regress_hoplock_bob;
SELECT * FROM hoplock_internal.lease;
\echo :LAST_ERROR_SQLSTATE
UPDATE hoplock_internal.lease SET generation = 1;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO hoplock_internal.lease VALUES ('x', 'h', 'x', 'regress_hoplock_bob', 1, now(), now(), now());
\echo :LAST_ERROR_SQLSTATE
-- but they may use the functions and read the view
SELECT show(hoplock_acquire('priv-bob', 'bob', '1 h'));
SELECT name, owner FROM hoplock_leases WHERE name = 'priv-bob';
RESET ROLE;

-- alice begins a term.
SET ROLE regress_hoplock_alice;
SELECT show(hoplock_acquire('priv', 'worker-1', '1 h'));
RESET ROLE;
SELECT generation AS priv1 FROM hoplock_read('priv') \gset

-- bob, not a member of alice, cannot renew, extend, release or fence it,
-- even knowing the owner string: 42501.
SET ROLE regress_hoplock_bob;
SELECT hoplock_renew('priv', 'worker-1', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('priv', 'worker-1', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_release('priv', 'worker-1');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_fence('priv', :priv1);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_delete('priv', (SELECT handle FROM hoplock_read('priv')));
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_write('priv', (SELECT handle FROM hoplock_read('priv')), 'bob', '1 h');
\echo :LAST_ERROR_SQLSTATE
-- with another owner string it is plain contention: NULL / false
SELECT show(hoplock_acquire('priv', 'bob', '1 h'));
SELECT hoplock_release('priv', 'bob');
-- and force_release is not granted to PUBLIC
SELECT hoplock_force_release('priv');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT show(hoplock_holder('priv'));

-- carol is a member of alice: she may renew, fence and release.
SET ROLE regress_hoplock_carol;
SELECT show(hoplock_renew('priv', 'worker-1', '1 h'));
BEGIN;
SELECT hoplock_fence('priv', :priv1);
COMMIT;
SELECT hoplock_release('priv', 'worker-1');
RESET ROLE;

-- Once a term has ended, anyone may begin the next: bob takes it.
SET ROLE regress_hoplock_bob;
SELECT show(hoplock_acquire('priv', 'bob', '50 ms'));
RESET ROLE;

-- An expired term of bob's may be taken over by alice (it is not running).
SELECT pg_sleep(0.1);
SET ROLE regress_hoplock_alice;
SELECT show(hoplock_acquire('priv', 'worker-1', '1 h'));
RESET ROLE;

-- A superuser may do anything.
SELECT show(hoplock_renew('priv', 'worker-1', '1 h'));

-- The operator role, granted EXECUTE, may force-release anyone's term.
SET ROLE regress_hoplock_operator;
SELECT hoplock_force_release('priv');
RESET ROLE;

-- The role is remembered by name, so pg_dump and restore keep it.
SELECT owner_role FROM hoplock_internal.lease WHERE name = 'priv-bob';

-- A term whose role was dropped can still be ended by a superuser.
SET ROLE regress_hoplock_bob;
SELECT show(hoplock_acquire('priv-orphan', 'o', '1 h'));
RESET ROLE;
SELECT hoplock_release('priv-bob', 'bob');
DROP ROLE regress_hoplock_bob;
CREATE ROLE regress_hoplock_dave;
SET ROLE regress_hoplock_dave;
SELECT hoplock_renew('priv-orphan', 'o', '1 h');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT hoplock_release('priv-orphan', 'o');

DROP ROLE regress_hoplock_alice, regress_hoplock_carol, regress_hoplock_dave;
REVOKE EXECUTE ON FUNCTION hoplock_force_release(text) FROM regress_hoplock_operator;
DROP ROLE regress_hoplock_operator;
