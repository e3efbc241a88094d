-- hoplock_leases: one row per lease that is held or expired-not-released.

SELECT show(hoplock_acquire('view-held', 'a', '1 h'));
SELECT show(hoplock_acquire('view-exp', 'b', '50 ms'));
SELECT show(hoplock_acquire('view-rel', 'c', '1 h'));
SELECT hoplock_release('view-rel', 'c');
SELECT pg_sleep(0.1);

SELECT name, owner, generation, expired,
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
