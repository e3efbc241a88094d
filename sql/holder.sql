-- holder and read: the running term, and the stored state.

-- Never acquired: both NULL.
SELECT show(hoplock_holder('hold')), show(hoplock_read('hold'));

-- Held: both return the term, with the same handle.
SELECT show(hoplock_acquire('hold', 'a', '1 h'));
SELECT show(h), show(r), h = r AS same_row
  FROM hoplock_holder('hold') AS h, hoplock_read('hold') AS r;

-- Expired: holder is NULL, read still shows the state.
SELECT show(hoplock_acquire('hold-exp', 'a', '50 ms'));
SELECT pg_sleep(0.1);
SELECT show(hoplock_holder('hold-exp')), show(hoplock_read('hold-exp'));

-- Released: both NULL.
SELECT hoplock_release('hold', 'a');
SELECT show(hoplock_holder('hold')), show(hoplock_read('hold'));

-- Both are read-only: they work in a read-only transaction.
BEGIN READ ONLY;
SELECT show(hoplock_holder('hold-exp')), show(hoplock_read('hold-exp'));
COMMIT;
