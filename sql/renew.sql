-- renew: only the holder, only its running term, with or without generation.

SELECT show(hoplock_acquire('ren', 'a', '1 h'));
SELECT generation AS ren1 FROM hoplock_read('ren') \gset
SELECT acquired_at AS first_acquired, expires_at AS first_expires, handle AS first_handle
  FROM hoplock_read('ren') \gset

-- The holder renews: same generation and acquired_at, expires_at = clock + ttl.
SELECT show(l),
       l.acquired_at = :'first_acquired' AS same_acquired_at,
       l.handle <> :'first_handle' AS new_handle,
       l.expires_at > clock_timestamp() + interval '1 h 59 min' AS expires_in_2h
  FROM hoplock_renew('ren', 'a', '2 h') AS l;

-- A shorter ttl shortens the term.
SELECT l.expires_at < :'first_expires' AS shortened
  FROM hoplock_renew('ren', 'a', '1 min') AS l;

-- Another owner: NULL, nothing changes.
SELECT handle AS before FROM hoplock_read('ren') \gset
SELECT show(hoplock_renew('ren', 'b', '1 h'));
SELECT handle = :'before' AS unchanged FROM hoplock_read('ren');

-- With the generation: the right one renews, any other gives NULL.
SELECT show(hoplock_renew('ren', 'a', '1 h', :ren1));
SELECT handle AS before FROM hoplock_read('ren') \gset
SELECT show(hoplock_renew('ren', 'a', '1 h', :ren1 + 1));
SELECT handle = :'before' AS unchanged FROM hoplock_read('ren');

-- A lease that was never acquired: NULL.
SELECT show(hoplock_renew('ren-never', 'a', '1 h'));
SELECT show(hoplock_read('ren-never'));

-- An expired term is never resurrected, not even by its owner.
SELECT show(hoplock_acquire('ren-exp', 'a', '50 ms'));
SELECT generation AS exp1 FROM hoplock_read('ren-exp') \gset
SELECT pg_sleep(0.1);
SELECT show(hoplock_renew('ren-exp', 'a', '1 h'));
SELECT show(hoplock_renew('ren-exp', 'a', '1 h', :exp1));
SELECT show(hoplock_holder('ren-exp'));

-- A released term neither.
SELECT hoplock_release('ren', 'a');
SELECT show(hoplock_renew('ren', 'a', '1 h'));
SELECT show(hoplock_renew('ren', 'a', '1 h', :ren1));
