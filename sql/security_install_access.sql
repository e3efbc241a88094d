-- security_install_access: an ordinary role cannot change another role's
-- term by the forms privileges.sql leaves out, nor write, lock or alter
-- hoplock's tables and sequence, nor add objects to its schema.
--
-- Runs after setup, on the extension it installed, and leaves it as it
-- was.  One of the topics of the old security_install test, with
-- security_install_schema, security_install_planted and
-- security_install_settings.

CREATE ROLE regress_hoplock_leader;
CREATE ROLE regress_hoplock_intruder LOGIN;

--------------------------------------------------------------------------
-- Another role's term: not with the forms privileges.sql leaves out (renew
-- and release naming the generation, wait, a session-bound acquire, the
-- trigger on a table of one's own), whatever the owner string.
SET ROLE regress_hoplock_leader;
SELECT hoplock_acquire('si-term', 'w', '1 h') IS NOT NULL AS acquired;
SELECT generation AS g FROM hoplock_read('si-term') \gset
RESET ROLE;
-- hoplock's tables, whole, to show that the refused calls below change nothing.
CREATE FUNCTION state_digest() RETURNS text
LANGUAGE sql AS $$
    SELECT md5(concat_ws('|',
        (SELECT string_agg(l::text, ',' ORDER BY l.name) FROM hoplock_internal.lease AS l),
        (SELECT string_agg(f::text, ',') FROM hoplock_internal.floor AS f),
        (SELECT string_agg(h::text, ',' ORDER BY h.name, h.generation) FROM hoplock_internal.history AS h)))
$$;

SELECT state_digest() AS before \gset
SET ROLE regress_hoplock_intruder;
SELECT hoplock_renew('si-term', 'w', '1 h', :g);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_release('si-term', 'w', :g);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_wait('si-term', 'w', '1 h', '0');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_wait('si-term', 'w', '1 h', '10 ms', session_bound => true);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('si-term', 'w', '1 h', session_bound => true);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
CREATE TABLE si_intruder (generation bigint);
ALTER TABLE si_intruder OWNER TO regress_hoplock_intruder;
SET ROLE regress_hoplock_intruder;
CREATE TRIGGER si_intruder_fenced BEFORE INSERT ON si_intruder
    FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('si-term', 'generation');
INSERT INTO si_intruder VALUES (:g);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT state_digest() = :'before' AS unchanged;
SELECT count(*) AS intruder_rows FROM si_intruder;
DROP TABLE si_intruder;

--------------------------------------------------------------------------
-- hoplock's tables and sequence: no write of any kind, no lock, no DDL,
-- no objects added to its schema -- first refused at the schema, then,
-- were USAGE on it granted by mistake, at each object.
SET ROLE regress_hoplock_intruder;
DELETE FROM hoplock_internal.lease;
\echo :LAST_ERROR_SQLSTATE
TRUNCATE hoplock_internal.lease;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO hoplock_internal.floor VALUES (1, 1, 0, 1, 1, 0);
\echo :LAST_ERROR_SQLSTATE
UPDATE hoplock_internal.floor SET forgotten = 0;
\echo :LAST_ERROR_SQLSTATE
DELETE FROM hoplock_internal.floor;
\echo :LAST_ERROR_SQLSTATE
TRUNCATE hoplock_internal.floor;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO hoplock_internal.history VALUES ('x', 1, 'x', 'x', now(), 1);
\echo :LAST_ERROR_SQLSTATE
UPDATE hoplock_internal.history SET how = 'released';
\echo :LAST_ERROR_SQLSTATE
DELETE FROM hoplock_internal.history;
\echo :LAST_ERROR_SQLSTATE
TRUNCATE hoplock_internal.history;
\echo :LAST_ERROR_SQLSTATE
SELECT setval('hoplock_internal.event_seq', 1);
\echo :LAST_ERROR_SQLSTATE
BEGIN;
LOCK TABLE hoplock_internal.lease IN ACCESS SHARE MODE;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
ALTER TABLE hoplock_internal.lease DISABLE TRIGGER ALL;
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE hoplock_internal.extra (x int);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_internal.serve_this_database();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT USAGE ON SCHEMA hoplock_internal TO regress_hoplock_intruder;
SET ROLE regress_hoplock_intruder;
SELECT count(*) FROM hoplock_internal.lease;
\echo :LAST_ERROR_SQLSTATE
DELETE FROM hoplock_internal.lease;
\echo :LAST_ERROR_SQLSTATE
TRUNCATE hoplock_internal.lease;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO hoplock_internal.floor VALUES (1, 1, 0, 1, 1, 0);
\echo :LAST_ERROR_SQLSTATE
UPDATE hoplock_internal.floor SET forgotten = 0;
\echo :LAST_ERROR_SQLSTATE
DELETE FROM hoplock_internal.floor;
\echo :LAST_ERROR_SQLSTATE
TRUNCATE hoplock_internal.floor;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO hoplock_internal.history VALUES ('x', 1, 'x', 'x', now(), 1);
\echo :LAST_ERROR_SQLSTATE
UPDATE hoplock_internal.history SET how = 'released';
\echo :LAST_ERROR_SQLSTATE
DELETE FROM hoplock_internal.history;
\echo :LAST_ERROR_SQLSTATE
TRUNCATE hoplock_internal.history;
\echo :LAST_ERROR_SQLSTATE
SELECT nextval('hoplock_internal.event_seq');
\echo :LAST_ERROR_SQLSTATE
SELECT setval('hoplock_internal.event_seq', 1);
\echo :LAST_ERROR_SQLSTATE
BEGIN;
LOCK TABLE hoplock_internal.lease IN ACCESS SHARE MODE;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
LOCK TABLE hoplock_internal.history IN ACCESS EXCLUSIVE MODE;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
CREATE TABLE hoplock_internal.extra (x int);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_internal.serve_this_database();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
REVOKE USAGE ON SCHEMA hoplock_internal FROM regress_hoplock_intruder;
SELECT state_digest() = :'before' AS unchanged;

--------------------------------------------------------------------------
-- Clean up.
SELECT hoplock_force_release('si-term');
DROP FUNCTION state_digest();
DROP OWNED BY regress_hoplock_leader;
DROP OWNED BY regress_hoplock_intruder;
DROP ROLE regress_hoplock_leader, regress_hoplock_intruder;
SELECT * FROM hoplock_internal.lease WHERE name LIKE 'si-%' AND state = 'h';
