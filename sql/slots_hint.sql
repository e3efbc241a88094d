-- slots_hint: a session remembers the slot it last found an owner's term
-- of a name in (slothint.c), and a renew, release or proclaim looks there
-- first.  A remembered slot that no longer holds the term must change
-- nothing: every call here gives what a session that remembers nothing
-- gives, and counts the same.

CREATE FUNCTION slh_counts() RETURNS text LANGUAGE sql AS $$
    SELECT format('terms_begun=%s renewals=%s releases=%s contended=%s',
                  terms_begun, renewals, releases, contended)
      FROM hoplock_stats WHERE datname = current_database()
$$;
-- Take a lease once its running terms have lapsed, retrying while the
-- worker announces a lapse (a takeover right at expiry may meet it).
CREATE FUNCTION slh_take(n text, o text, ttl interval, k int) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..3000 LOOP
        IF NOT EXISTS (SELECT FROM hoplock_leases AS l
                        WHERE l.name = n AND NOT l.expired) AND
           hoplock_acquire(n, o, ttl, slots => k) IS NOT NULL THEN
            RETURN true;
        END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
    RETURN false;
END $$;

-- The SQLSTATE of a statement that must fail ('no error' if it does not)
CREATE FUNCTION slh_sqlstate(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;

-- Names that sort next to each other, and one the prefix of the others:
-- each has its own slots, the same owner in each.
SELECT hoplock_acquire(n, 'a', '1 h', slots => 2) IS NOT NULL AS took,
       quote_literal(left(n, 8)) AS n, octet_length(n) AS bytes
  FROM unnest(ARRAY['slh-e', 'slh-e ', 'slh-e!', 'slh-', 'slh-e~',
                    repeat('x', 250), repeat('x', 251)]) AS n;
SELECT quote_literal(left(name, 8)) AS n, octet_length(name) AS bytes,
       count(*) AS terms, min(slot) >= 1 AND max(slot) <= 2 AS numbered
  FROM hoplock_leases WHERE name LIKE 'slh-%' OR name LIKE 'xxx%'
 GROUP BY name ORDER BY name COLLATE "C";
SELECT hoplock_release('slh-e', 'a') AS released;
SELECT hoplock_renew(n, 'a', '1 h') IS NOT NULL AS renewed,
       quote_literal(left(n, 8)) AS n, octet_length(n) AS bytes
  FROM unnest(ARRAY['slh-e', 'slh-e ', 'slh-e!', 'slh-', 'slh-e~',
                    repeat('x', 250), repeat('x', 251)]) AS n;
SELECT hoplock_release(n, 'a') AS released,
       quote_literal(left(n, 8)) AS n, octet_length(n) AS bytes
  FROM unnest(ARRAY['slh-e', 'slh-e ', 'slh-e!', 'slh-', 'slh-e~',
                    repeat('x', 250), repeat('x', 251)]) AS n;
SELECT count(*) AS running FROM hoplock_leases
 WHERE name LIKE 'slh-%' OR name LIKE 'xxx%';

-- A term taken in a subtransaction rolled back: the slot remembered holds
-- nothing of the owner's.
SELECT slh_counts() AS before \gset
BEGIN;
SAVEPOINT s;
SELECT hoplock_acquire('slh-sub', 'a', '1 h', slots => 3) IS NOT NULL AS took;
ROLLBACK TO SAVEPOINT s;
SELECT hoplock_renew('slh-sub', 'a', '1 h') IS NULL AS not_renewed;
SELECT hoplock_release('slh-sub', 'a') AS released;
COMMIT;
SELECT count(*) AS running FROM hoplock_leases WHERE name = 'slh-sub';
-- (the acquire counted a term begun; the calls after it, nothing)
SELECT slh_counts() AS after \gset
\c -
SELECT hoplock_renew('slh-sub', 'a', '1 h') IS NULL AS fresh_not_renewed;
SELECT hoplock_release('slh-sub', 'a') AS fresh_released;
SELECT slh_counts() = :'after' AS fresh_counted_the_same;

-- Forgotten, and taken again with fewer slots: the owner's new term is
-- found and acted on where it is, within the new number.
SELECT hoplock_acquire('slh-n', o, '1 h', slots => 6) IS NOT NULL AS took, o
  FROM unnest(ARRAY['b1', 'b2', 'b3', 'b4', 'b5', 'a']) AS o;
SELECT slot AS a_slot FROM hoplock_leases WHERE name = 'slh-n' AND owner = 'a' \gset
SELECT hoplock_renew('slh-n', 'a', '1 h') IS NOT NULL AS renewed;
SELECT hoplock_force_release('slh-n') AS forced;
SELECT hoplock_forget('slh-n') AS forgotten;
SELECT count(*) AS rows FROM hoplock_internal.lease WHERE name LIKE 'slh-n%';
SELECT hoplock_renew('slh-n', 'a', '1 h') IS NULL AS not_renewed;
SELECT hoplock_acquire('slh-n', 'b1', '1 h', slots => 2) IS NOT NULL AS took;
SELECT hoplock_acquire('slh-n', 'a', '1 h', slots => 2) IS NOT NULL AS took;
SELECT hoplock_renew('slh-n', 'a', '1 h') IS NOT NULL AS renewed;
SELECT owner, slot BETWEEN 1 AND 2 AS numbered FROM hoplock_leases
 WHERE name = 'slh-n' ORDER BY owner;
SELECT hoplock_release('slh-n', 'a') AS released;
SELECT hoplock_release('slh-n', 'a') AS released_again;
SELECT hoplock_force_release('slh-n') AS forced;
-- ... and without slots
SELECT hoplock_acquire('slh-n', 'a', '1 h') IS NOT NULL AS took;
SELECT hoplock_renew('slh-n', 'a', '1 h') IS NOT NULL AS renewed;
SELECT owner, slot FROM hoplock_leases WHERE name = 'slh-n';
SELECT hoplock_release('slh-n', 'a') AS released;

-- Another role takes over the owner's lapsed term under the same owner
-- text: the first role's session, which remembers the slot, may neither
-- renew nor release the new term (42501, as for any session), and the
-- new term's role may.
CREATE ROLE regress_slh_alice;
CREATE ROLE regress_slh_bob;
SET ROLE regress_slh_alice;
SELECT hoplock_acquire('slh-role', 'w', '100 ms', slots => 2) IS NOT NULL AS took;
SELECT hoplock_renew('slh-role', 'w', '100 ms') IS NOT NULL AS renewed;
SET ROLE regress_slh_bob;
SELECT slh_take('slh-role', 'w', '1 h', 2) AS taken_over;
SET ROLE regress_slh_alice;
SELECT slh_sqlstate($$SELECT hoplock_renew('slh-role', 'w', '1 h')$$) AS renew;
SELECT slh_sqlstate($$SELECT hoplock_release('slh-role', 'w')$$) AS release;
SET ROLE regress_slh_bob;
SELECT hoplock_renew('slh-role', 'w', '1 h') IS NOT NULL AS renewed;
RESET ROLE;
SELECT owner, role FROM hoplock_leases WHERE name = 'slh-role' AND NOT expired;
SET ROLE regress_slh_bob;
SELECT hoplock_release('slh-role', 'w') AS released;
RESET ROLE;
SELECT count(*) AS running FROM hoplock_leases
 WHERE name = 'slh-role' AND NOT expired;
DROP ROLE regress_slh_alice;
DROP ROLE regress_slh_bob;
DROP FUNCTION slh_counts();
DROP FUNCTION slh_take(text, text, interval, int);
DROP FUNCTION slh_sqlstate(text);
