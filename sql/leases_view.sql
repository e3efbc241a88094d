-- hoplock_leases: one row per lease that is held or expired-not-released.

SELECT show(hoplock_acquire('view-held', 'a', '1 h'));
SELECT show(hoplock_acquire('view-exp', 'b', '50 ms'));
SELECT show(hoplock_acquire('view-rel', 'c', '1 h'));
SELECT hoplock_release('view-rel', 'c');
SELECT pg_sleep(0.1);

SELECT name, owner, gen_label(name, generation) AS generation, expired,
       remaining > interval '59 min' AND remaining <= interval '1 h' AS remaining_about_1h,
       remaining = interval '0' AS remaining_zero,
       acquired_at <= renewed_at AND renewed_at < expires_at AS times_ordered
  FROM hoplock_leases
 WHERE name LIKE 'view-%'
 ORDER BY name;

-- renewed_at moves with a renewal, acquired_at does not.
SELECT acquired_at AS a0, renewed_at AS r0 FROM hoplock_leases WHERE name = 'view-held' \gset
SELECT show(hoplock_renew('view-held', 'a', '1 h'));
SELECT acquired_at = :'a0' AS same_acquired_at, renewed_at > :'r0' AS renewed_later
  FROM hoplock_leases WHERE name = 'view-held';

-- The columns, and that everyone may read the view.
\d hoplock_leases
SELECT has_table_privilege('public', 'hoplock_leases', 'SELECT') AS public_can_read;

-- A security barrier: a function in the caller's WHERE clause, however
-- cheap, never sees the released rows the view leaves out.
CREATE FUNCTION leaky(n text, o text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE COST 0.0001 AS $$
BEGIN
    IF n LIKE 'view-rel%' THEN
        RAISE NOTICE 'leaked %, owned by %', n, o;
    END IF;
    RETURN true;
END $$;
SELECT count(*) FROM hoplock_leases WHERE leaky(name, owner) AND name LIKE 'view-%';
DROP FUNCTION leaky(text, text);

-- Who holds a lease up: blocked_by is the pid of a session with an open
-- fence of the term (or an uncommitted change of it).
CREATE EXTENSION IF NOT EXISTS dblink;
SELECT dblink_connect('fencer',
           format('dbname=%s port=%s host=%s', current_database(),
                  current_setting('port'),
                  split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT pid AS fencer_pid FROM dblink('fencer', 'SELECT pg_backend_pid()') AS t(pid int) \gset
SELECT dblink_exec('fencer', 'BEGIN');
SELECT * FROM dblink('fencer', format($$SELECT hoplock_fence('view-held', %s)$$,
                                       (SELECT generation FROM hoplock_read('view-held'))))
           AS t(f text);
SELECT name, role = current_user AS role_is_mine, session_bound, holder_pid,
       blocked_by = :fencer_pid AS blocked_by_fencer
  FROM hoplock_leases WHERE name LIKE 'view-%' ORDER BY name;
SELECT dblink_exec('fencer', 'COMMIT');
SELECT name, blocked_by FROM hoplock_leases WHERE name = 'view-held';
SELECT dblink_disconnect('fencer');
