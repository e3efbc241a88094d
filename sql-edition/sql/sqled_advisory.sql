-- sqled_advisory: advisory locks are no one's -- any role may take any
-- key -- so no lock of the edition may be one.  A role with no rights on
-- hoplock's state (mallory) holds, in a session of its own, advisory locks
-- on every key the edition's locks were once derived from: a name's term
-- lock (hashtext of the name and of 'hoplock:' || name), exclusive and
-- shared; an owner's keepalive lock; an owner's lock on a lease with
-- slots; the event numbers a writer publishes its bound at.  Another
-- role's calls (alice's) go on as if it held nothing: she acquires,
-- renews, releases, fences, renews all, takes a slot, and no call waits
-- (statement_timeout would cut a wait short).  Nor can mallory lock the
-- lease rows, the edition's locks now.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;
CREATE ROLE regress_sqled_mallory LOGIN;
CREATE ROLE regress_sqled_alice;
SELECT dblink_connect('mallory',
           format('dbname=%s port=%s host=%s user=regress_sqled_mallory', current_database(),
                  current_setting('port'),
                  split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT * FROM dblink('mallory', 'SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user')
    AS t(who name, super boolean);

-- alice's terms, begun before mallory locks anything
SET ROLE regress_sqled_alice;
SELECT show(hoplock_acquire('adv-r', 'alice-1', '1 h'));
SELECT show(hoplock_acquire('adv-f', 'alice-1', '1 h'));
SELECT show(hoplock_acquire('adv-k', 'alice-k', '1 h'));
RESET ROLE;

-- the keys, computed as the edition once did (the event numbers: from
-- the number of an event of mallory's own, the newest)
SELECT * FROM dblink('mallory', $$
    SELECT hoplock_release('adv-m', (hoplock_acquire('adv-m', 'mallory', '1 h')).owner)$$) AS t(released boolean);
SELECT * FROM dblink('mallory', $$
    SELECT pg_advisory_lock(hashtext('adv-a'), hashtext('hoplock:adv-a'))::text,
           pg_advisory_lock_shared(hashtext('adv-r'), hashtext('hoplock:adv-r'))::text,
           pg_advisory_lock(hashtext('adv-f'), hashtext('hoplock:adv-f'))::text,
           pg_advisory_lock(hashtext('hoplock keepalive ' || 'regress_sqled_alice'::regrole::oid || ' alice-k'),
                            hashtext('alice-k ' || 'regress_sqled_alice'::regrole::oid))::text,
           pg_advisory_lock(hashtext(E'\x02adv-s\x1falice-s'), hashtext(E'alice-s\x1fadv-s\x02'))::text,
           (SELECT count(pg_advisory_lock(hoplock_position() + i)) FROM generate_series(0, 99) AS i)::text
$$) AS t(term_x text, term_s text, fence_x text, keepalive text, slot_owner text, event_keys text);
SELECT count(*) AS mallorys_locks FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
 WHERE a.usename = 'regress_sqled_mallory' AND l.locktype = 'advisory';

-- the rows are not mallory's to lock: no right on hoplock_internal, and
-- the public view may be read, not locked
SELECT dblink_exec('mallory', 'SELECT FROM hoplock_internal.lease FOR KEY SHARE', false);
SELECT dblink_exec('mallory', 'SELECT FROM hoplock_leases FOR KEY SHARE', false);
SELECT dblink_exec('mallory', 'SELECT FROM hoplock_history FOR KEY SHARE', false);

SET ROLE regress_sqled_alice;
SET statement_timeout = '2s';
SELECT show(hoplock_acquire('adv-a', 'alice-1', '1 h'));
SELECT show(hoplock_renew('adv-a', 'alice-1', '1 h'));
SELECT hoplock_release('adv-a', 'alice-1');
SELECT hoplock_release('adv-r', 'alice-1');
BEGIN;
SELECT hoplock_fence('adv-f', (SELECT generation FROM hoplock_read('adv-f'))) IS NOT NULL AS fenced;
COMMIT;
SELECT hoplock_release('adv-f', 'alice-1');
SELECT name, slot FROM hoplock_renew_all('alice-k', '1 h');
SELECT show(hoplock_renew('adv-k', 'alice-k', '1 h'));
SELECT hoplock_release('adv-k', 'alice-k');
SELECT show(hoplock_acquire('adv-s', 'alice-s', '1 h', slots => 2));
SELECT hoplock_release('adv-s', 'alice-s');
SELECT show(hoplock_wait('adv-w', 'alice-1', '1 h', '1 s'));
SELECT hoplock_release('adv-w', 'alice-1');
RESET ROLE;

-- (a fence locks the row: not in a read-only transaction, which has no
-- writes to protect)
SELECT show(hoplock_acquire('adv-ro', 'su', '1 h'));
BEGIN READ ONLY;
\set VERBOSITY terse
SELECT hoplock_fence('adv-ro', (SELECT generation FROM hoplock_read('adv-ro')));
\set VERBOSITY default
ROLLBACK;
SELECT hoplock_release('adv-ro', 'su');

RESET statement_timeout;
SELECT dblink_disconnect('mallory');
DROP ROLE regress_sqled_mallory;
DROP ROLE regress_sqled_alice;
