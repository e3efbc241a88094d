-- The leader's value: given at acquire (value =>) or proclaimed during
-- the term (hoplock_proclaim), shown by hoplock_holder, hoplock_leases
-- and the events; a new term or the end of one clears it.

SELECT show(hoplock_acquire('pv', 'a', '1 h', value => 'host-a:4242'));
SELECT value FROM hoplock_holder('pv');
SELECT value FROM hoplock_leases WHERE name = 'pv';
SELECT generation AS pv1 FROM hoplock_read('pv') \gset
SELECT coalesce(max(seq), 0) AS pv_seq FROM hoplock_events(0) \gset

-- A renewal keeps it; a proclaim replaces it, without a new term.
SELECT show(hoplock_renew('pv', 'a', '1 h', :pv1));
SELECT value FROM hoplock_holder('pv');
SELECT hoplock_proclaim('pv', 'a', :pv1, 'host-a:4343') AS proclaimed;
SELECT gen_label('pv', generation) AS generation, value FROM hoplock_holder('pv');

-- Not the holder, not its term, not held: false, and nothing changes.
SELECT hoplock_proclaim('pv', 'b', :pv1, 'host-b') AS proclaimed;
SELECT hoplock_proclaim('pv', 'a', :pv1 + 1, 'host-b') AS proclaimed;
SELECT hoplock_proclaim('pv-none', 'a', 1, 'host-b') AS proclaimed;
SELECT value FROM hoplock_holder('pv');

-- Bad input: refused, nothing changes.
\set VERBOSITY terse
SELECT hoplock_proclaim('pv', 'a', :pv1, '');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_proclaim('pv', 'a', :pv1, repeat('v', 257));
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_proclaim('pv', 'a', :pv1, E'a\nb');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_proclaim('pv', 'a', NULL, 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('pv2', 'a', '1 h', value => '');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT value FROM hoplock_holder('pv');

-- NULL clears it; a lease with no value shows an empty one in
-- hoplock_lease (so that "lease IS NOT NULL" stays true), NULL in the view.
SELECT hoplock_proclaim('pv', 'a', :pv1, NULL) AS proclaimed;
SELECT value = '' AS empty, hoplock_holder('pv') IS NOT NULL AS not_null FROM hoplock_holder('pv');
SELECT value IS NULL AS null_in_view FROM hoplock_leases WHERE name = 'pv';
SELECT hoplock_proclaim('pv', 'a', :pv1, 'host-a:5000') AS proclaimed;

-- The events: the value in acquired and proclaimed (and in the release
-- of a term that had one).
SELECT hoplock_release('pv', 'a', :pv1);
SELECT value FROM hoplock_read('pv');
SELECT event, value FROM hoplock_events(:pv_seq) WHERE name = 'pv' ORDER BY seq;
SELECT event, value FROM hoplock_events(0) WHERE name = 'pv' AND event = 'acquired';

-- A new term begins without the old value.
SELECT show(hoplock_acquire('pv', 'b', '1 h'));
SELECT value = '' AS no_value FROM hoplock_holder('pv');
SELECT hoplock_release('pv', 'b');

-- The holder's acquire (or wait) with a new value proclaims it: a
-- proclaimed event, as hoplock_proclaim sends; the same value again, or
-- none, sends nothing.
SELECT coalesce(max(seq), 0) AS pv3_seq FROM hoplock_events(0) \gset
SELECT value FROM hoplock_acquire('pv3', 'c', '1 h', value => 'host-c:1');
SELECT value FROM hoplock_acquire('pv3', 'c', '1 h', value => 'host-c:2');
SELECT value FROM hoplock_acquire('pv3', 'c', '1 h', value => 'host-c:2');
SELECT value FROM hoplock_acquire('pv3', 'c', '1 h');
SELECT event, value FROM hoplock_events(:pv3_seq) WHERE name = 'pv3' ORDER BY seq;
SELECT hoplock_release('pv3', 'c');
