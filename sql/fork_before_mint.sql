-- fork_before_mint: rows of hoplock's tables written by SQL (an in-place
-- restore, pg_restore --clean, a superuser's DELETE) leave a "written"
-- marker; a number a client saw and that the write took away is no place
-- to resume from, at once -- not only after the next term change begins a
-- branch.  (Until the next mint, hoplock_events and hoplock_watch took
-- the lost number for one of this history and returned nothing; a
-- hoplock_watch begun then returned the events after the fork as if
-- nothing had been lost.)
SELECT hoplock_release('fbm', 'a') FROM hoplock_acquire('fbm', 'a', '1 h');
SELECT hoplock_position() AS kept \gset
SELECT (hoplock_acquire('fbm', 'b', '1 h')).owner;
SELECT hoplock_position() AS lost \gset
-- the "restore" of an earlier dump: the event the client saw is gone
DELETE FROM hoplock_internal.event WHERE seq > :kept;
UPDATE hoplock_internal.delivery SET delivered = :kept WHERE delivered > :kept;
DELETE FROM hoplock_internal.lease WHERE name = 'fbm';
\set VERBOSITY sqlstate
SELECT count(*) FROM hoplock_events(:lost);
SELECT count(*) FROM hoplock_watch(:lost, '0');
-- after the next mint it is refused
SELECT (hoplock_acquire('fbm', 'c', '1 h')).owner;
SELECT count(*) FROM hoplock_events(:lost);
\set VERBOSITY default
