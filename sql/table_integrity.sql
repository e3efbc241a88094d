-- table_integrity: the lease table is written as the executor would write
-- it -- every index ready for inserts gets its entries, NOT NULL and CHECK
-- constraints hold, row-level AFTER triggers fire -- and a table whose shape
-- hoplock cannot trust is refused with 55000, changing nothing.

CREATE EXTENSION IF NOT EXISTS amcheck;

-- Every index of the table, checked against the heap.
CREATE FUNCTION check_lease_indexes() RETURNS TABLE (index name, ok boolean)
LANGUAGE sql AS $$
    SELECT c.relname, bt_index_check(c.oid, true) IS NOT NULL
      FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
     WHERE i.indrelid = 'hoplock_internal.lease'::regclass
     ORDER BY 1
$$;

-- A user's own indexes: plain, on an expression, partial.
CREATE INDEX lease_owner_idx ON hoplock_internal.lease (owner);
CREATE INDEX lease_lower_owner_idx ON hoplock_internal.lease (lower(owner));
CREATE INDEX lease_held_idx ON hoplock_internal.lease (expires_at) WHERE state = 'h';

-- New names (inserts), new terms by other owners and renewals (updates of
-- indexed columns: not heap-only), releases.
SELECT count(show(hoplock_acquire('ti-' || i, 'Owner-' || i, '1 h'))) FROM generate_series(1, 30) AS i;
SELECT count(*) FILTER (WHERE r) FROM (SELECT hoplock_release('ti-' || i, 'Owner-' || i) AS r FROM generate_series(1, 30) AS i) AS s;
SELECT count(show(hoplock_acquire('ti-' || i, 'Other-' || i, '1 h'))) FROM generate_series(1, 30) AS i;
SELECT count(show(hoplock_renew('ti-' || i, 'Other-' || i, '2 h'))) FROM generate_series(1, 30) AS i;
SELECT * FROM check_lease_indexes();

-- The indexes find the rows.
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT name, owner FROM hoplock_internal.lease WHERE owner = 'Other-7';
SELECT name FROM hoplock_internal.lease WHERE lower(owner) = 'other-8';
SELECT count(*) FROM hoplock_internal.lease
 WHERE state = 'h' AND expires_at > now() AND name LIKE 'ti-%';
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP INDEX hoplock_internal.lease_owner_idx, hoplock_internal.lease_lower_owner_idx,
           hoplock_internal.lease_held_idx;

-- A CHECK constraint a superuser added is honoured: 23514, nothing changed.
ALTER TABLE hoplock_internal.lease ADD CONSTRAINT lease_owner_allowed
    CHECK (owner <> 'forbidden');
SELECT lease_table_digest() AS before \gset
\set VERBOSITY terse
SELECT hoplock_acquire('ti-check', 'forbidden', '1 h');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT lease_table_digest() = :'before' AS unchanged;
SELECT show(hoplock_acquire('ti-check', 'short', '1 h'));
ALTER TABLE hoplock_internal.lease DROP CONSTRAINT lease_owner_allowed;

-- So is NOT NULL on a column hoplock may leave null: 23502.
UPDATE hoplock_internal.lease SET session_pid = 0, session_start = now() WHERE session_pid IS NULL;
ALTER TABLE hoplock_internal.lease ALTER COLUMN session_pid SET NOT NULL;
\set VERBOSITY terse
SELECT hoplock_acquire('ti-notnull', 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
ALTER TABLE hoplock_internal.lease ALTER COLUMN session_pid DROP NOT NULL;
UPDATE hoplock_internal.lease SET session_pid = NULL, session_start = NULL WHERE session_pid = 0;

-- Row-level AFTER triggers fire, as the table's owner, with a safe
-- search_path: pg_repack logs changes so.  An ordinary role's call fires
-- them too, though it may not write the log itself.
CREATE TABLE lease_log (name text, generation bigint, by_role name, path text);
REVOKE ALL ON lease_log FROM PUBLIC;
CREATE FUNCTION log_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.lease_log VALUES (NEW.name, NEW.generation, current_user,
                                         current_setting('search_path'));
    RETURN NULL;
END $$;
CREATE TRIGGER lease_logger AFTER INSERT OR UPDATE ON hoplock_internal.lease
    FOR EACH ROW EXECUTE FUNCTION log_lease();
CREATE ROLE regress_hoplock_logged;
SET ROLE regress_hoplock_logged;
SELECT show(hoplock_acquire('ti-trigger', 'a', '1 h'));
SELECT show(hoplock_renew('ti-trigger', 'a', '1 h'));
SELECT hoplock_release('ti-trigger', 'a');
RESET ROLE;
SELECT name, gen_label(name, generation) AS generation,
       by_role = current_user AS as_owner, path FROM lease_log;
DROP TRIGGER lease_logger ON hoplock_internal.lease;

-- The event log is written as the transaction commits; its row-level
-- AFTER triggers fire then, as its owner (pg_repack of the log).
CREATE TABLE event_log (seq bigint, event text, by_role name, path text);
REVOKE ALL ON event_log FROM PUBLIC;
CREATE FUNCTION log_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.event_log VALUES (NEW.seq, NEW.event, current_user,
                                         current_setting('search_path'));
    RETURN NULL;
END $$;
CREATE TRIGGER event_logger AFTER INSERT ON hoplock_internal.event
    FOR EACH ROW EXECUTE FUNCTION log_event();
SELECT hoplock_position() AS ev_from \gset
SET ROLE regress_hoplock_logged;
BEGIN;
SELECT show(hoplock_acquire('ti-trigger', 'a', '1 h'));
SELECT hoplock_release('ti-trigger', 'a');
COMMIT;
RESET ROLE;
SELECT event, by_role = current_user AS as_owner, path FROM event_log ORDER BY seq;
SELECT count(*) AS logged_as_recorded FROM event_log l
  JOIN hoplock_events(:ev_from) e USING (seq, event);
DROP TRIGGER event_logger ON hoplock_internal.event;
DROP TABLE event_log;
DROP FUNCTION log_event();
DROP ROLE regress_hoplock_logged;

-- Tables hoplock cannot trust: 55000, naming what is wrong; nothing changes.
SELECT lease_table_digest() AS before \gset

-- a BEFORE trigger (it could rewrite a lease row)
CREATE TRIGGER lease_before BEFORE UPDATE ON hoplock_internal.lease
    FOR EACH ROW EXECUTE FUNCTION log_lease();
SELECT hoplock_acquire('ti-untrusted', 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER lease_before ON hoplock_internal.lease;

-- a deferrable trigger (hoplock fires triggers at once), such as a
-- deferrable foreign key's referencing this table
CREATE TABLE ti_jobs (lease text REFERENCES hoplock_internal.lease (name)
                      DEFERRABLE INITIALLY DEFERRED);
DO $$
BEGIN
    PERFORM hoplock_acquire('ti-untrusted', 'a', '1 h');
EXCEPTION WHEN object_not_in_prerequisite_state THEN
    -- (the trigger's name holds an OID)
    RAISE NOTICE '55000: %', regexp_replace(SQLERRM, '_[0-9]+"', '_N"');
END $$;
DROP TABLE ti_jobs;

-- a rule
CREATE RULE lease_rule AS ON UPDATE TO hoplock_internal.lease DO ALSO NOTIFY lease_rule;
SELECT hoplock_renew('ti-check', 'short', '1 h');
\echo :LAST_ERROR_SQLSTATE
DROP RULE lease_rule ON hoplock_internal.lease;

-- a nullable column that hoplock reads as NOT NULL
ALTER TABLE hoplock_internal.lease ALTER COLUMN generation DROP NOT NULL;
SELECT hoplock_acquire('ti-untrusted', 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_read('ti-check');
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE hoplock_internal.lease ALTER COLUMN generation SET NOT NULL;

-- an unlogged table (a crash would empty it, and generations start again)
ALTER TABLE hoplock_internal.lease SET UNLOGGED;
SELECT hoplock_acquire('ti-untrusted', 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE hoplock_internal.lease SET LOGGED;

-- no primary key, or one that is not the one hoplock looks leases up with
ALTER TABLE hoplock_internal.lease DROP CONSTRAINT lease_pkey;
SELECT hoplock_acquire('ti-untrusted', 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE hoplock_internal.lease ADD CONSTRAINT lease_pkey PRIMARY KEY (name, generation);
SELECT hoplock_acquire('ti-untrusted', 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE hoplock_internal.lease DROP CONSTRAINT lease_pkey;
ALTER TABLE hoplock_internal.lease ADD CONSTRAINT lease_pkey PRIMARY KEY (name);

SELECT lease_table_digest() = :'before' AS unchanged;
SELECT show(hoplock_acquire('ti-untrusted', 'a', '1 h'));

-- A table that is no longer the extension's own is not hoplock's table
-- (checked when a session first uses it).
ALTER EXTENSION hoplock DROP TABLE hoplock_internal.lease;
\c
SELECT hoplock_holder('ti-untrusted');
\echo :LAST_ERROR_SQLSTATE
ALTER EXTENSION hoplock ADD TABLE hoplock_internal.lease;
\c
SELECT show(hoplock_holder('ti-untrusted'));

-- Autovacuum never truncates the table: truncation locks it exclusively.
SELECT c.relname, c.reloptions
  FROM pg_class AS c
 WHERE c.oid IN ('hoplock_internal.lease'::regclass, 'hoplock_internal.floor'::regclass)
 ORDER BY 1;

SELECT * FROM check_lease_indexes();
DROP TABLE lease_log;
DROP FUNCTION log_lease();
DROP FUNCTION check_lease_indexes();

-- A publication of every table (logical replication): hoplock's updates
-- and deletes satisfy its replica identity checks, as the executor's do.
SET client_min_messages = error;
CREATE PUBLICATION ti_all FOR ALL TABLES;
RESET client_min_messages;
SELECT show(hoplock_acquire('ti-pub', 'a', '1 h'));
SELECT show(hoplock_renew('ti-pub', 'a', '1 h'));
SELECT hoplock_release('ti-pub', 'a');
SELECT relreplident FROM pg_class WHERE oid = 'hoplock_internal.floor'::regclass;
DROP PUBLICATION ti_all;
