-- procedure_memory: a procedure that begins and ends terms, committing
-- after each call, does not grow.  The event rows a transaction writes at
-- its commit are built in the transaction's memory, not in the memory
-- current at the commit, which in a procedure is the procedure's own and
-- lives as long as it runs (it grew by some 1.6 kB an event: 1.6 MB
-- here; now by PL/pgSQL's own few kB).

-- (pg_backend_memory_contexts is PostgreSQL 14's: on 13 nothing is measured)
CREATE FUNCTION pm_spi_bytes() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    b bigint := 0;
BEGIN
    IF current_setting('server_version_num')::int >= 140000 THEN
        EXECUTE $q$SELECT coalesce(sum(total_bytes), 0) FROM pg_backend_memory_contexts
                    WHERE name = 'SPI Proc'$q$ INTO b;
    END IF;
    RETURN b;
END $$;

CREATE TABLE pm_result (grew_over_512kb boolean, terms int);

CREATE PROCEDURE pm_loop(n int) LANGUAGE plpgsql AS $$
DECLARE
    before bigint;
    done int := 0;
BEGIN
    PERFORM hoplock_acquire('pm-0', 'pm', '1 h');
    COMMIT;
    before := pm_spi_bytes();
    FOR i IN 1..n LOOP
        IF (hoplock_acquire('pm-' || i, 'pm', '1 h')).name IS NOT NULL THEN
            done := done + 1;
        END IF;
        COMMIT;
        PERFORM hoplock_release('pm-' || i, 'pm');
        COMMIT;
    END LOOP;
    INSERT INTO pm_result VALUES (pm_spi_bytes() - before > 524288, done);
    COMMIT;
END $$;

CALL pm_loop(500);
SELECT * FROM pm_result;

SELECT hoplock_release('pm-0', 'pm');
DROP PROCEDURE pm_loop(int);
DROP FUNCTION pm_spi_bytes();
DROP TABLE pm_result;
