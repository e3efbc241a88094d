-- DISCARD ALL ends the terms bound to the session, as it releases the
-- session's advisory locks (a pooler's server_reset_query); unbound
-- terms are left alone.

SELECT show(hoplock_acquire('dc-bound', 'a', '1 h', session_bound => true));
SELECT show(hoplock_acquire('dc-free', 'a', '1 h'));
SELECT show(hoplock_wait('dc-waited', 'a', '1 h', '1 s', session_bound => true));
DISCARD ALL;
SELECT show(hoplock_holder('dc-bound')) AS bound,
       show(hoplock_holder('dc-free')) AS free,
       show(hoplock_holder('dc-waited')) AS waited;
SELECT name, owner, how FROM hoplock_history
 WHERE name LIKE 'dc-%' ORDER BY name, generation;

-- Its events: the bound terms ended as released.
SELECT e.event, e.name, e.owner FROM hoplock_events(0) AS e
 WHERE e.name IN ('dc-bound', 'dc-waited') ORDER BY e.seq;

-- Nothing bound: nothing to do.
DISCARD ALL;

-- Not in a transaction block (PostgreSQL's own error): the term stays.
SELECT show(hoplock_acquire('dc-bound', 'a', '1 h', session_bound => true));
BEGIN;
DISCARD ALL;
ROLLBACK;
SELECT show(hoplock_holder('dc-bound'));

-- Nor in a function (not top level): the term stays.
CREATE FUNCTION discard_all() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    DISCARD ALL;
END
$$;
SELECT discard_all();
SELECT show(hoplock_holder('dc-bound'));

-- A read-only transaction: DISCARD ALL succeeds with a warning, and the
-- term stays (it ends with the session, or at its ttl).
SET default_transaction_read_only = on;
DISCARD ALL;
SELECT show(hoplock_holder('dc-bound'));

-- The next DISCARD ALL (the setting was reset) ends it; a term bound
-- again after that is ended by the next one.
DISCARD ALL;
SELECT show(hoplock_holder('dc-bound'));
SELECT show(hoplock_acquire('dc-bound', 'a', '1 h', session_bound => true));
DISCARD ALL;
SELECT show(hoplock_holder('dc-bound'));

-- DISCARD of anything less (PLANS, SEQUENCES, TEMP) leaves it.
SELECT show(hoplock_acquire('dc-bound', 'a', '1 h', session_bound => true));
DISCARD PLANS;
DISCARD SEQUENCES;
DISCARD TEMP;
SELECT show(hoplock_holder('dc-bound'));
DISCARD ALL;
SELECT show(hoplock_holder('dc-bound'));

-- A term the same owner moved to this session's binding, from an unbound
-- one, ends too; the unbound renewal of a bound term keeps the binding.
SELECT show(hoplock_acquire('dc-free', 'a', '1 h', session_bound => true));
SELECT generation AS dcg FROM hoplock_read('dc-free') \gset
SELECT show(hoplock_renew('dc-free', 'a', '1 h', :dcg));
DISCARD ALL;
SELECT show(hoplock_holder('dc-free'));

-- What DISCARD ALL found no longer bound here (ended, released) is
-- forgotten, and what it ended, with its commit: a read-only DISCARD ALL
-- afterwards (a role whose default is read-only) has nothing to warn of.
SELECT show(hoplock_acquire('dc-ro', 'a', '1 h', session_bound => true));
DISCARD ALL;
SET default_transaction_read_only = on;
DISCARD ALL;
SELECT show(hoplock_acquire('dc-ro', 'a', '1 h', session_bound => true));
SELECT hoplock_release('dc-ro', 'a');
DISCARD ALL;
SET default_transaction_read_only = on;
DISCARD ALL;
-- ... but a term still bound is remembered, and warned of.
SELECT show(hoplock_acquire('dc-ro', 'a', '1 h', session_bound => true));
SET default_transaction_read_only = on;
DISCARD ALL;
SET default_transaction_read_only = on;
DISCARD ALL;
DISCARD ALL;
SELECT show(hoplock_holder('dc-ro'));

DROP FUNCTION discard_all();
