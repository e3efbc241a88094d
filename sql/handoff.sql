-- hoplock_handoff and the candidates, in one session: with nobody
-- waiting there is no candidate, the handoff returns NULL and the term
-- goes on; bad input is refused and changes nothing.  (Handoffs to
-- waiting candidates, across sessions: t/055_handoff.pl.)

SELECT count(*) AS candidates FROM hoplock_candidates;
SELECT show(hoplock_acquire('ho', 'a', '1 h'));
SELECT generation AS ho1 FROM hoplock_read('ho') \gset

-- No candidate: NULL, the term goes on; the wrong owner or generation,
-- or a name nobody holds, also NULL.
SELECT hoplock_handoff('ho', 'a', :ho1) IS NULL AS no_candidate;
SELECT hoplock_handoff('ho', 'a', :ho1, 'b') IS NULL AS no_such_candidate;
SELECT hoplock_handoff('ho', 'b', :ho1) IS NULL AS not_the_holder;
SELECT hoplock_handoff('ho', 'a', :ho1 + 1) IS NULL AS not_the_term;
SELECT hoplock_handoff('ho-none', 'a', 1) IS NULL AS never_held;
SELECT show(hoplock_holder('ho'));

-- Bad input.
\set VERBOSITY terse
SELECT hoplock_handoff(NULL, 'a', :ho1);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_handoff('ho', NULL, :ho1);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_handoff('ho', 'a', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_handoff('ho', 'a', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_handoff('ho', 'a', :ho1, '');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_handoff('ho', 'a', :ho1, repeat('x', 300));
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_wait('ho', 'b', '1 h', '0', false, NULL);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT show(hoplock_holder('ho'));
SELECT count(*) AS candidates FROM hoplock_candidates;

-- A wait that times out was a candidate only while it waited.
SELECT hoplock_wait('ho', 'b', '1 h', '10 ms', priority => 7) IS NULL AS timed_out;
SELECT count(*) AS candidates FROM hoplock_candidates;
SELECT hoplock_release('ho', 'a');
