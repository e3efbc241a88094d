-- durability: the lease table is logged and kept by pg_dump.
-- (Crash and restore tests are TAP tests: t/001_durability.pl.)

SELECT c.relpersistence, c.reloptions
  FROM pg_class AS c
 WHERE c.oid = 'hoplock_internal.lease'::regclass;

SELECT e.extconfig::regclass[] AS dumped_tables, e.extcondition
  FROM pg_extension AS e
 WHERE e.extname = 'hoplock';

-- A grant forces a synchronous commit even with synchronous_commit = off:
-- the commit record is flushed before the call's transaction returns.
SET synchronous_commit = off;
CREATE TEMP TABLE lsn (lsn pg_lsn);
BEGIN;
SELECT show(hoplock_acquire('dur', 'a', '1 h'));
INSERT INTO lsn SELECT pg_current_wal_insert_lsn();
COMMIT;
SELECT pg_current_wal_flush_lsn() >= lsn AS flushed FROM lsn;
RESET synchronous_commit;
