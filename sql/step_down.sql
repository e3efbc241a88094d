-- hoplock_request_step_down: the holder is asked to hand its term over.
-- It learns it from a step_down event and from step_down in the lease
-- its next renewal returns; it keeps the lease until it acts.  Not
-- executable by PUBLIC.

SELECT show(hoplock_acquire('sd', 'a', '1 h'));
SELECT generation AS sd1 FROM hoplock_read('sd') \gset
SELECT coalesce(max(seq), 0) AS sd_seq FROM hoplock_events(0) \gset
SELECT step_down FROM hoplock_renew('sd', 'a', '1 h', :sd1);

SELECT hoplock_request_step_down('sd', 'b') AS requested;
SELECT step_down, gen_label('sd', generation) AS generation FROM hoplock_renew('sd', 'a', '1 h', :sd1);
SELECT step_down_at IS NOT NULL AS asked, step_down_to FROM hoplock_leases WHERE name = 'sd';
SELECT step_down FROM hoplock_holder('sd');
SELECT event, owner, value AS to_owner FROM hoplock_events(:sd_seq) WHERE name = 'sd' ORDER BY seq;

-- Asked again, without a successor.
SELECT hoplock_request_step_down('sd') AS requested;
SELECT step_down_to IS NULL AS anyone FROM hoplock_leases WHERE name = 'sd';

-- Not held: false.
SELECT hoplock_request_step_down('sd-none') AS requested;

-- Bad input, and PUBLIC may not.
\set VERBOSITY terse
SELECT hoplock_request_step_down(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_request_step_down('sd', '');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT has_function_privilege('public', 'hoplock_request_step_down(text, text)', 'EXECUTE') AS public_may;

-- A new term begins without it.
SELECT hoplock_release('sd', 'a', :sd1);
SELECT step_down FROM hoplock_acquire('sd', 'c', '1 h');
SELECT step_down_at IS NULL AS cleared FROM hoplock_leases WHERE name = 'sd';
SELECT hoplock_release('sd', 'c');
