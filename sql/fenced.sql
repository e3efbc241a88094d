-- fenced: the trigger function hoplock_fenced(lease, generation_column)
-- rejects, inside the writer's transaction, any row written with a
-- generation other than the term that holds the lease now (55P03), and
-- takes the same lock as hoplock_fence -- once per transaction, lease and
-- generation.  Inserts and updates check the new row, deletes the old one.

CREATE TABLE fw (id int PRIMARY KEY, payload text, generation bigint);
CREATE TRIGGER fw_fenced BEFORE INSERT OR UPDATE OR DELETE ON fw
    FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('fw-lease', 'generation');

-- (Generations are read with \gset: their values are hoplock's business.
-- raises() shows them in its error as g1, g2, ... as show() does.)
SELECT show(hoplock_acquire('fw-lease', 'leader-1', '1 h'));
SELECT generation AS fw1 FROM hoplock_read('fw-lease') \gset

-- The leader's rows, stamped with its generation, go through: one row, and
-- a bulk insert (its own transaction, autocommit).
INSERT INTO fw VALUES (1, 'one', :fw1);
INSERT INTO fw SELECT i, 'bulk', :fw1 FROM generate_series(2, 1000) AS i;
UPDATE fw SET payload = 'updated' WHERE id = 2;

-- Rows claiming another generation: 55P03, and the statement rolls back.
SELECT raises('fw-lease', $$INSERT INTO fw VALUES (1001, 'future', %s)$$, :fw1 + 1);
\echo :LAST_ERROR_SQLSTATE
SELECT raises('fw-lease', $$UPDATE fw SET payload = 'x', generation = %s WHERE id = 1$$,
              :fw1 + 1);
\echo :LAST_ERROR_SQLSTATE
SELECT raises('fw-lease', $$INSERT INTO fw SELECT i, 'mixed', CASE WHEN i < 1500 THEN %s ELSE %s END
  FROM generate_series(1001, 2000) AS i$$, :fw1, :fw1 + 1);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM fw;

-- The writer's transaction holds the fence, as hoplock_fence would: one
-- shared term lock, however many rows.
BEGIN;
INSERT INTO fw SELECT i, 'in a transaction', :fw1 FROM generate_series(1001, 1100) AS i;
SELECT locktype, mode, objsubid, count(*)
  FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype = 'advisory'
 GROUP BY 1, 2, 3;
COMMIT;

-- A new term: the old leader's writes are rejected, whether it inserts,
-- updates or deletes; the new leader stamps old rows to take them over.
SELECT hoplock_force_release('fw-lease');
SELECT show(hoplock_acquire('fw-lease', 'leader-2', '1 h'));
SELECT generation AS fw2 FROM hoplock_read('fw-lease') \gset
SELECT raises('fw-lease', $$INSERT INTO fw VALUES (3001, 'zombie', %s)$$, :fw1);
\echo :LAST_ERROR_SQLSTATE
SELECT raises('fw-lease', $$UPDATE fw SET payload = 'zombie' WHERE id = 3$$);
\echo :LAST_ERROR_SQLSTATE
SELECT raises('fw-lease', $$DELETE FROM fw WHERE id = 3$$);
\echo :LAST_ERROR_SQLSTATE
UPDATE fw SET generation = :fw2 WHERE id = 3;
DELETE FROM fw WHERE id = 3;
SELECT gen_label('fw-lease', generation) AS generation, count(*)
  FROM fw GROUP BY generation ORDER BY generation;

-- A lapsed term's rows are rejected too.  (Two seconds leave the first
-- insert time enough under valgrind.)
SELECT show(hoplock_acquire('fw-short', 'a', '2 s'));
SELECT generation AS short1 FROM hoplock_read('fw-short') \gset
CREATE TABLE fw_short (g bigint);
CREATE TRIGGER fw_short_fenced BEFORE INSERT ON fw_short
    FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('fw-short', 'g');
INSERT INTO fw_short VALUES (:short1);
SELECT pg_sleep(2.1);
\set VERBOSITY terse
SELECT raises('fw-short', $$INSERT INTO fw_short VALUES (%s)$$, :short1);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default

-- A null generation: 22004.
INSERT INTO fw VALUES (4001, 'no generation', NULL);
\echo :LAST_ERROR_SQLSTATE

-- Triggers set up wrong: each call says what is wrong.
CREATE TABLE fw_bad (id bigint, generation text);
CREATE TRIGGER fw_bad_column BEFORE INSERT ON fw_bad
    FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('fw-lease', 'no_such_column');
INSERT INTO fw_bad VALUES (1, '2');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fw_bad_column ON fw_bad;
CREATE TRIGGER fw_bad_type BEFORE INSERT ON fw_bad
    FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('fw-lease', 'generation');
INSERT INTO fw_bad VALUES (1, '2');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fw_bad_type ON fw_bad;
CREATE TRIGGER fw_bad_args BEFORE INSERT ON fw_bad
    FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('fw-lease');
INSERT INTO fw_bad VALUES (1, '2');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fw_bad_args ON fw_bad;
CREATE TRIGGER fw_bad_name BEFORE INSERT ON fw_bad
    FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('', 'id');
INSERT INTO fw_bad VALUES (1, '2');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fw_bad_name ON fw_bad;
CREATE TRIGGER fw_bad_level BEFORE INSERT ON fw_bad
    FOR EACH STATEMENT EXECUTE FUNCTION hoplock_fenced('fw-lease', 'id');
INSERT INTO fw_bad VALUES (1, '2');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fw_bad_level ON fw_bad;
-- An AFTER trigger would check the row only after it was written (and a
-- deferred constraint trigger at commit): 39P01, the row is not written.
CREATE TRIGGER fw_bad_after AFTER INSERT ON fw_bad
    FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('fw-lease', 'id');
INSERT INTO fw_bad VALUES (:fw2, 'the current generation');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fw_bad_after ON fw_bad;
CREATE CONSTRAINT TRIGGER fw_bad_deferred AFTER INSERT ON fw_bad
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('fw-lease', 'id');
INSERT INTO fw_bad VALUES (:fw2, 'the current generation');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fw_bad_deferred ON fw_bad;
SELECT count(*) FROM fw_bad;
SELECT hoplock_fenced();
\echo :LAST_ERROR_SQLSTATE

-- Only members of the role that holds the term may write under it.
CREATE ROLE regress_hoplock_intruder;
GRANT ALL ON fw TO regress_hoplock_intruder;
SET ROLE regress_hoplock_intruder;
INSERT INTO fw VALUES (5001, 'intruder', :fw2);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
REVOKE ALL ON fw FROM regress_hoplock_intruder;
DROP ROLE regress_hoplock_intruder;

-- The check is of the role writing the row: a fence taken in the same
-- transaction by a SECURITY DEFINER function of the leader's (writing one
-- row as the leader) lets none of the intruder's own rows through.
CREATE ROLE regress_hoplock_intruder;
GRANT ALL ON fw TO regress_hoplock_intruder;
CREATE FUNCTION fw_leader_write(g bigint) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS
$$ INSERT INTO public.fw VALUES (5002, 'by the leader''s function', g) $$;
GRANT EXECUTE ON FUNCTION fw_leader_write(bigint) TO regress_hoplock_intruder;
SET ROLE regress_hoplock_intruder;
BEGIN;
SELECT fw_leader_write(:fw2);
INSERT INTO fw VALUES (5003, 'intruder after the leader', :fw2);
COMMIT;
RESET ROLE;
SELECT count(*) FROM fw WHERE id IN (5002, 5003);
DELETE FROM fw WHERE id IN (5002, 5003);
DROP FUNCTION fw_leader_write(bigint);
REVOKE ALL ON fw FROM regress_hoplock_intruder;
DROP ROLE regress_hoplock_intruder;

-- A generated generation column is computed after the BEFORE triggers:
-- the trigger would check the row's old value, so it refuses (0A000).
CREATE TABLE fw_gen (id int, g0 bigint,
                     generation bigint GENERATED ALWAYS AS (g0) STORED);
CREATE TRIGGER fw_gen_fenced BEFORE INSERT OR UPDATE OR DELETE ON fw_gen
    FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('fw-lease', 'generation');
INSERT INTO fw_gen (id, g0) VALUES (1, :fw2);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM fw_gen;

-- A BEFORE row trigger that fires after hoplock_fenced (triggers fire in
-- name order) could change the generation after it was checked: the write
-- is refused (0A000) until that trigger fires first.
CREATE TABLE fw_order (id int, generation bigint);
CREATE TRIGGER fw_order_fenced BEFORE INSERT OR UPDATE OR DELETE ON fw_order
    FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('fw-lease', 'generation');
CREATE FUNCTION fw_keep() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER zz_keep BEFORE UPDATE ON fw_order
    FOR EACH ROW EXECUTE FUNCTION fw_keep();
INSERT INTO fw_order VALUES (1, :fw2);
UPDATE fw_order SET id = 2;
\echo :LAST_ERROR_SQLSTATE
ALTER TRIGGER zz_keep ON fw_order RENAME TO aa_keep;
UPDATE fw_order SET id = 2;
-- disabled, it fires not at all
ALTER TRIGGER aa_keep ON fw_order RENAME TO zz_keep;
ALTER TABLE fw_order DISABLE TRIGGER zz_keep;
UPDATE fw_order SET id = 3;
SELECT id FROM fw_order;
DROP TABLE fw_gen, fw_order;
DROP FUNCTION fw_keep();

-- TRUNCATE fires no row trigger: it empties a fenced table unchecked,
-- unless a BEFORE TRUNCATE trigger refuses it (0A000, nothing removed).
CREATE TABLE fw_trunc (g bigint);
CREATE TRIGGER fw_trunc_fenced BEFORE INSERT OR UPDATE OR DELETE ON fw_trunc
    FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('fw-lease', 'g');
INSERT INTO fw_trunc VALUES (:fw2);
CREATE TRIGGER fw_trunc_truncate BEFORE TRUNCATE ON fw_trunc
    FOR EACH STATEMENT EXECUTE FUNCTION hoplock_fenced('fw-lease', 'g');
TRUNCATE fw_trunc;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM fw_trunc;
DROP TRIGGER fw_trunc_truncate ON fw_trunc;
TRUNCATE fw_trunc;
SELECT count(*) FROM fw_trunc;

DROP TABLE fw, fw_short, fw_bad, fw_trunc;
SELECT hoplock_release('fw-lease', 'leader-2');
