-- sqled_hint_seen: the insert hints' keys are secret, but a held hint
-- shows in pg_locks, which any role may read.  mallory, with no rights on
-- hoplock's state, watches alice acquire a slot of a lease with slots (an
-- insert of a claim row, so its hint), copies every advisory key alice's
-- session holds, then holds them all in a transaction that holds ROW
-- EXCLUSIVE on hoplock's tables too (a call of her own: a slot acquire).
-- alice's next acquires must not take her hints for hoplock's (a hint
-- counts only with a proof naming its holder's pid, which mallory cannot
-- compute for her own): no call of alice's waits (statement_timeout) or
-- finds the lease contended.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;
CREATE ROLE regress_sqled_mallory LOGIN;
CREATE ROLE regress_sqled_alice LOGIN;
CREATE FUNCTION pg_temp.conn(who text) RETURNS text LANGUAGE sql AS $$
    SELECT format('dbname=%s port=%s host=%s user=%s', current_database(),
                  current_setting('port'),
                  split_part(current_setting('unix_socket_directories'), ',', 1), who) $$;
SELECT dblink_connect('alice', pg_temp.conn('regress_sqled_alice'));
SELECT dblink_connect('mallory', pg_temp.conn('regress_sqled_mallory'));

-- alice acquires, in a transaction left open
SELECT dblink_exec('alice', 'BEGIN');
SELECT slot IS NOT NULL AS alice_slot FROM dblink('alice', $$
    SELECT (hoplock_acquire('hs-s', 'alice-s', '1 h', slots => 2)).name$$) AS t(slot text);
SELECT slot IS NOT NULL AS alice_first FROM dblink('alice', $$
    SELECT (hoplock_acquire('hs-new', 'alice-n', '1 h')).name$$) AS t(slot text);

-- mallory copies the keys alice holds, then alice commits
SELECT * FROM dblink('mallory', $$
    CREATE TEMP TABLE seen AS
    SELECT l.classid::bigint AS k1, l.objid::bigint AS k2
      FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
     WHERE a.usename = 'regress_sqled_alice' AND l.locktype = 'advisory'
       AND l.objsubid = 2$$) AS t(status text);
SELECT dblink_exec('alice', 'COMMIT');
SELECT n > 0 AS keys_seen FROM dblink('mallory', 'SELECT count(*) FROM seen') AS t(n bigint);

-- mallory: a call of hers, and alice's keys held, in a transaction left open
SELECT dblink_exec('mallory', 'BEGIN');
SELECT slot IS NOT NULL AS mallory_slot FROM dblink('mallory', $$
    SELECT (hoplock_acquire('hs-m', 'mallory', '1 h', slots => 2)).name$$) AS t(slot text);
SELECT held > 0 AS keys_held FROM dblink('mallory', $$
    SELECT count(*) FILTER (WHERE pg_try_advisory_lock((CASE WHEN k1 >= 2147483648 THEN k1 - 4294967296 ELSE k1 END)::integer,
                                  (CASE WHEN k2 >= 2147483648 THEN k2 - 4294967296 ELSE k2 END)::integer))
      FROM seen$$) AS t(held bigint);
SELECT count(*) > 0 AS mallory_holds_row_exclusive
  FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
 WHERE a.usename = 'regress_sqled_mallory' AND l.locktype = 'relation'
   AND l.relation = 'hoplock_internal.claim'::regclass AND l.mode = 'RowExclusiveLock';

-- alice's acquires go on: the slot lease again (its claim), and a name
-- forgotten (its row inserted again)
SET ROLE regress_sqled_alice;
SET statement_timeout = '2s';
SELECT hoplock_release('hs-s', 'alice-s');
SELECT (hoplock_acquire('hs-s', 'alice-s', '1 h', slots => 2)).owner AS again;
SELECT hoplock_release('hs-s', 'alice-s');
SELECT hoplock_release('hs-new', 'alice-n');
RESET statement_timeout;
RESET ROLE;
SELECT hoplock_forget('hs-new');
SET ROLE regress_sqled_alice;
SET statement_timeout = '2s';
SELECT (hoplock_acquire('hs-new', 'alice-n', '1 h')).owner AS after_forget;
SELECT hoplock_release('hs-new', 'alice-n');
RESET statement_timeout;
RESET ROLE;

SELECT dblink_exec('mallory', 'ROLLBACK');

-- A pid is used again by a later session: a proof of the pid alone,
-- seen in pg_locks, is mallory's once her session gets that pid.  (Here
-- the superuser computes it for her pid.)  Not enough: the proof names
-- the holder's transaction too.
SELECT dblink_exec('mallory', 'BEGIN');
SELECT slot IS NOT NULL AS mallory_slot FROM dblink('mallory', $$
    SELECT (hoplock_acquire('hs-m', 'mallory', '1 h', slots => 2)).name$$) AS t(slot text);
SELECT * FROM dblink('mallory', 'SELECT pg_backend_pid()') AS t(pid integer) \gset mallory_
SELECT h.k1 AS h1, h.k2 AS h2, p.k1 AS p1, p.k2 AS p2
  FROM hoplock_internal.hint_key('hoplock_internal.claim' || E'\x1f' || 'slots' || E'\x1f'
                                 || 'regress_sqled_alice'::regrole::oid || E'\x1f' || 'hs-s'
                                 || E'\x1f' || 'alice-s') AS h,
       hoplock_internal.hint_key('hoplock_internal.claim' || E'\x1f' || 'slots' || E'\x1f'
                                 || 'regress_sqled_alice'::regrole::oid || E'\x1f' || 'hs-s'
                                 || E'\x1f' || 'alice-s' || E'\x1f' || :mallory_pid) AS p \gset
SELECT * FROM dblink('mallory', format('SELECT pg_try_advisory_lock(%s, %s) AND pg_try_advisory_lock(%s, %s)',
                                       :h1, :h2, :p1, :p2)) AS t(held boolean);
SET ROLE regress_sqled_alice;
SET statement_timeout = '2s';
SELECT (hoplock_acquire('hs-s', 'alice-s', '1 h', slots => 2)).owner AS pid_reused;
SELECT hoplock_release('hs-s', 'alice-s');
RESET statement_timeout;
RESET ROLE;
SELECT dblink_exec('mallory', 'ROLLBACK');
-- her temp table goes now: a session's own go only as it exits, which
-- can come after the DROP ROLE below
SELECT dblink_exec('mallory', 'DROP TABLE seen');
SELECT dblink_disconnect('mallory');
SELECT dblink_disconnect('alice');
DROP ROLE regress_sqled_mallory;
DROP ROLE regress_sqled_alice;
