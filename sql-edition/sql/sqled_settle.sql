-- sqled_settle: run before the shared files that read the event stream
-- (events, watch).  With no worker, a term an earlier file began lapses
-- unannounced until some call looks, and which call that is would depend
-- on timing.  So let every running term with less than a minute left lapse,
-- and announce the lapses now: what events and watch read is theirs.
DO $$
DECLARE
    until timestamptz := (SELECT max(expires_at) FROM hoplock_internal.lease
                           WHERE state = 'h' AND expires_at < clock_timestamp() + interval '1 min');
BEGIN
    IF until IS NOT NULL THEN
        PERFORM pg_sleep(greatest(extract(epoch FROM until - clock_timestamp()), 0) + 0.05);
    END IF;
END $$;
SELECT hoplock_internal.expire() >= 0 AS settled;
SELECT count(*) AS lapsed_unannounced
  FROM hoplock_internal.lease WHERE state = 'h' AND expires_at <= clock_timestamp();
