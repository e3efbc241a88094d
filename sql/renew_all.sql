-- hoplock_renew_all(owner, ttl): the running terms of an owner, begun by
-- the calling role, renewed with one write of the owner's keepalive; the
-- terms not attached to it yet are attached (a write each, once).

SELECT coalesce(max(seq), 0) AS ra_seq FROM hoplock_events(0) \gset
SELECT show(hoplock_acquire('ra' || i, 'ra', '1 h')) FROM generate_series(1, 3) AS i;
SELECT show(hoplock_acquire('rb1', 'rb', '1 h'));
SELECT expires_at AS rb1_expires FROM hoplock_read('rb1') \gset

-- Bad input: refused, nothing changes.
\set VERBOSITY terse
SELECT * FROM hoplock_renew_all(NULL, '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM hoplock_renew_all('', '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM hoplock_renew_all(repeat('x', 257), '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM hoplock_renew_all(E'r\na', '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM hoplock_renew_all('ra', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM hoplock_renew_all('ra', '0 s');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM hoplock_renew_all('ra', '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM hoplock_renew_all('ra', '1 mon');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM hoplock_renew_all('ra', '2 days');
\echo :LAST_ERROR_SQLSTATE
BEGIN READ ONLY;
SELECT * FROM hoplock_renew_all('ra', '1 min');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
\set VERBOSITY default
SELECT count(*) AS keepalives FROM hoplock_internal.keepalive;
SELECT count(*) AS attached FROM hoplock_internal.lease WHERE keepalive IS NOT NULL;

-- The owner's three terms, renewed: one slot each, their generations.
SELECT r.name, r.slot, r.generation = l.generation AS same_generation,
       r.expires_at - clock_timestamp() BETWEEN '59 min' AND '1 h' AS ttl
  FROM hoplock_renew_all('ra', '1 h') AS r
       JOIN hoplock_read(r.name) AS l ON true
 ORDER BY r.name;
-- ... attached to one keepalive; another owner's term is untouched.
SELECT count(*) AS keepalives FROM hoplock_internal.keepalive;
SELECT name, keepalive IS NOT NULL AS attached
  FROM hoplock_internal.lease WHERE name ~ '^r[ab]' ORDER BY name;
SELECT expires_at = :'rb1_expires' AS rb1_untouched FROM hoplock_read('rb1');

-- Every reader takes the keepalive's expiry: holder, read, the view.
SELECT handle AS ra1_handle, expires_at AS ra1_expires FROM hoplock_read('ra1') \gset
SELECT name, expires_at AS ra_expires FROM hoplock_renew_all('ra', '30 min') WHERE name = 'ra1' \gset
SELECT (hoplock_holder('ra1')).expires_at = :'ra_expires' AS holder,
       (hoplock_read('ra2')).expires_at = :'ra_expires' AS read,
       (SELECT count(*) FROM hoplock_leases
         WHERE name ~ '^ra' AND expires_at = :'ra_expires'
           AND remaining > '29 min' AND NOT expired) AS in_view;
-- ... a renewal through the keepalive is a new handle: a write with the
-- old one is refused.
SELECT (hoplock_read('ra1')).handle <> :'ra1_handle' AS new_handle;
SELECT show(hoplock_write('ra1', :'ra1_handle', 'ra', '1 h'));
-- ... and the fence holds for the term.
SELECT generation AS ra1_gen FROM hoplock_read('ra1') \gset
BEGIN;
SELECT hoplock_fence('ra1', :ra1_gen);
COMMIT;

-- In the steady state a renewal writes the keepalive alone: the lease rows
-- stay as they were.
SELECT count(*) AS rows_before FROM hoplock_internal.lease
 WHERE name ~ '^ra' AND xmin::text = (SELECT xmin::text FROM hoplock_internal.lease WHERE name = 'ra1') \gset
SELECT xmin AS k_xmin FROM hoplock_internal.keepalive \gset
SELECT count(*) FROM hoplock_renew_all('ra', '1 h');
SELECT count(*) AS unchanged FROM hoplock_internal.lease
 WHERE name ~ '^ra' AND xmin::text = (SELECT xmin::text FROM hoplock_internal.lease WHERE name = 'ra1');
SELECT xmin::text <> :'k_xmin' AS keepalive_written FROM hoplock_internal.keepalive;

-- hoplock_renew of an attached term takes it off the keepalive (its own
-- ttl from then on, minus the keepalive's id in its keepalive column);
-- the next renew_all finds it there and attaches it again.
SELECT show(hoplock_renew('ra1', 'ra', '10 min'));
SELECT (hoplock_holder('ra1')).expires_at - clock_timestamp() < '11 min' AS own_ttl,
       keepalive < 0 AS detached
  FROM hoplock_internal.lease WHERE name = 'ra1';
SELECT name FROM hoplock_renew_all('ra', '1 h') ORDER BY name;

-- Release, force_release: that term alone ends.
SELECT hoplock_release('ra2', 'ra');
SELECT name FROM hoplock_renew_all('ra', '1 h') ORDER BY name;
SELECT hoplock_force_release('ra3');
SELECT name FROM hoplock_renew_all('ra', '1 h') ORDER BY name;
SELECT name, owner FROM hoplock_leases WHERE name ~ '^ra' ORDER BY name;

-- Racing a release in the same transaction: the released term is not
-- renewed; rolled back, it is again.
BEGIN;
SELECT hoplock_release('ra1', 'ra');
SELECT name FROM hoplock_renew_all('ra', '1 h') ORDER BY name;
ROLLBACK;
SELECT name FROM hoplock_renew_all('ra', '1 h') ORDER BY name;

-- No term, nothing renewed; a keepalive is begun all the same, so that
-- the owner's next terms attach to it as they begin.
SELECT count(*) FROM hoplock_renew_all('nobody', '1 h');
SELECT count(*) AS keepalives FROM hoplock_internal.keepalive;

-- Privileges: only the calling role's terms of the owner.  Another role
-- with the same owner text renews its own terms alone, never the
-- superuser's, nor does a member of the role renew the role's terms.
CREATE ROLE ra_other;
CREATE ROLE ra_member;
GRANT ra_other TO ra_member;
SET ROLE ra_other;
SELECT show(hoplock_acquire('ro1', 'ra', '1 h'));
SELECT name FROM hoplock_renew_all('ra', '1 h') ORDER BY name;
RESET ROLE;
SET ROLE ra_member;
SELECT count(*) FROM hoplock_renew_all('ra', '1 h');
-- (the member may renew the role's term one by one, as always)
SELECT show(hoplock_renew('ro1', 'ra', '1 h'));
RESET ROLE;
SELECT name FROM hoplock_renew_all('ra', '1 h') ORDER BY name;
SELECT count(*) AS keepalives, count(DISTINCT owner_roleid) AS roles
  FROM hoplock_internal.keepalive;
SET ROLE ra_other;
SELECT hoplock_release('ro1', 'ra');
RESET ROLE;
-- Revoked, it is not executable.
REVOKE EXECUTE ON FUNCTION hoplock_renew_all(text, interval) FROM PUBLIC;
SET ROLE ra_other;
\set VERBOSITY terse
SELECT * FROM hoplock_renew_all('ra', '1 h');
\set VERBOSITY default
RESET ROLE;
GRANT EXECUTE ON FUNCTION hoplock_renew_all(text, interval) TO PUBLIC;
DROP ROLE ra_member, ra_other;

-- Expiry: a lapsed keepalive is never renewed again; its terms lapse
-- together, the worker announces each (its own "expired" event) and
-- deletes it.
SELECT show(hoplock_acquire('rx' || i, 'rx', '1 h')) FROM generate_series(1, 3) AS i;
SELECT count(*) FROM hoplock_renew_all('rx', '1 s');
SELECT pg_sleep(1.2);
SELECT count(*) AS renewed_after_lapse FROM hoplock_renew_all('rx', '1 h');
SELECT show(hoplock_holder('rx1'));
-- another owner may take a lapsed term at once
SELECT show(hoplock_acquire('rx1', 'other', '1 h'));
DO $$
BEGIN
    FOR i IN 1 .. 200 LOOP
        EXIT WHEN NOT EXISTS (SELECT FROM hoplock_internal.lease
                               WHERE name ~ '^rx' AND state = 'h' AND owner = 'rx');
        PERFORM pg_sleep(0.05);
    END LOOP;
END $$;
SELECT name, state, keepalive FROM hoplock_internal.lease WHERE name ~ '^rx' ORDER BY name;
SELECT count(*) AS rx_keepalives FROM hoplock_internal.keepalive
 WHERE owner = 'rx';
SELECT event, name, owner FROM hoplock_events(:ra_seq)
 WHERE name ~ '^rx' ORDER BY seq;
-- the lapsed terms' expiry is the keepalive's, in the events and history
SELECT count(DISTINCT at) AS one_instant FROM hoplock_events(:ra_seq)
 WHERE name ~ '^rx' AND event = 'expired';
-- a new call begins a new keepalive for the owner's running terms
SELECT show(hoplock_acquire('rx2', 'rx', '1 h'));
SELECT name FROM hoplock_renew_all('rx', '1 h') ORDER BY name;

-- With hoplock.notify_renewals, a "renewed" event each.
SET hoplock.notify_renewals = on;
SELECT coalesce(max(seq), 0) AS ra_seq2 FROM hoplock_events(0) \gset
SELECT count(*) FROM hoplock_renew_all('ra', '1 h');
SELECT event, name FROM hoplock_events(:ra_seq2) ORDER BY seq;
RESET hoplock.notify_renewals;

SELECT hoplock_release('ra1', 'ra'), hoplock_release('rb1', 'rb'),
       hoplock_release('rx1', 'other'), hoplock_release('rx2', 'rx');
