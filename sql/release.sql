-- release and force_release.

SELECT show(hoplock_acquire('rel', 'a', '1 h'));
SELECT generation AS rel1 FROM hoplock_read('rel') \gset

-- Another owner cannot release it.
SELECT hoplock_release('rel', 'b');
SELECT show(hoplock_holder('rel'));

-- The wrong generation neither.
SELECT hoplock_release('rel', 'a', :rel1 + 1);
SELECT show(hoplock_holder('rel'));

-- The holder can, once.
SELECT hoplock_release('rel', 'a', :rel1);
SELECT hoplock_release('rel', 'a', :rel1);
SELECT hoplock_release('rel', 'a');
SELECT show(hoplock_holder('rel')), show(hoplock_read('rel'));

-- Without the generation.
SELECT show(hoplock_acquire('rel', 'a', '1 h'));
SELECT hoplock_release('rel', 'a');

-- Releasing an expired term is refused: it has already ended.
SELECT show(hoplock_acquire('rel', 'a', '50 ms'));
SELECT pg_sleep(0.1);
SELECT hoplock_release('rel', 'a');
SELECT show(hoplock_read('rel'));

-- Never acquired.
SELECT hoplock_release('rel-never', 'a');

-- force_release ends the running term whoever holds it...
SELECT show(hoplock_acquire('rel', 'b', '1 h'));
SELECT hoplock_force_release('rel');
SELECT show(hoplock_holder('rel'));
-- ...and is false when there is none: released, expired, never acquired.
SELECT hoplock_force_release('rel');
SELECT show(hoplock_acquire('rel', 'b', '50 ms'));
SELECT pg_sleep(0.1);
SELECT hoplock_force_release('rel');
SELECT hoplock_force_release('rel-never');

-- Generations never go back: release, force_release and expiry each end a
-- term, and the next one is higher.
SELECT show(hoplock_acquire('rel', 'c', '1 h'));
