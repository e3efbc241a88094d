-- sqled_forged: the edition remembers some checks for the rest of a
-- transaction in settings (hoplock_fenced's fence of a lease and
-- generation), but any session may set any setting: a forged memo must not
-- let a zombie's row through the fence.
CREATE TABLE fz_work (id int, g bigint);
CREATE TRIGGER fz_fence BEFORE INSERT OR UPDATE OR DELETE ON fz_work
    FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('fz', 'g');
SELECT generation AS g1 FROM hoplock_acquire('fz', 'a', '1 h') \gset
SELECT hoplock_release('fz', 'a');
SELECT generation AS g2 FROM hoplock_acquire('fz', 'b', '1 h') \gset

-- the zombie (term g1) forges the memo of its fence, then writes
BEGIN;
SELECT set_config('hoplock_sql.f' || md5(concat_ws(':', 'fz_work'::regclass::oid, 'fz_fence', 'INSERT',
                                                   'fz', :g1::text, (SELECT oid FROM pg_roles WHERE rolname = current_user))),
                  'on', true) AS forged;
-- (and holds the fence's advisory lock itself)
SELECT pg_advisory_xact_lock_shared(hashtext('fz'), hashtext('hoplock:fz'));
\set VERBOSITY sqlstate
INSERT INTO fz_work VALUES (1, :g1);
\set VERBOSITY default
ROLLBACK;

-- the running term's writes go on, many in one transaction
BEGIN;
INSERT INTO fz_work SELECT i, :g2 FROM generate_series(1, 3) AS i;
COMMIT;
SELECT count(*) AS rows FROM fz_work;
SELECT hoplock_release('fz', 'b');
DROP TABLE fz_work;
