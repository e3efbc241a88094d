/* 90_owner.sql: everything the script created belongs to the role that
 * installed the extension (a trusted extension's script runs as a
 * superuser): hoplock's SECURITY DEFINER functions run with that owner's
 * rights, never a superuser's. */

DO $owner$
DECLARE
    o record;
    ext oid := (SELECT e.oid FROM pg_catalog.pg_extension AS e
                 WHERE e.extname OPERATOR(pg_catalog.=) 'hoplock');
BEGIN
    IF '@extowner@'::pg_catalog.regrole OPERATOR(pg_catalog.=) pg_catalog.current_user()::pg_catalog.regrole THEN
        RETURN;
    END IF;
    EXECUTE 'ALTER SCHEMA hoplock_internal OWNER TO @extowner@';
    FOR o IN SELECT d.classid, d.objid FROM pg_catalog.pg_depend AS d
              WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
                AND d.refobjid OPERATOR(pg_catalog.=) ext AND d.deptype OPERATOR(pg_catalog.=) 'e'
    LOOP
        IF o.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass THEN
            EXECUTE pg_catalog.format('ALTER ROUTINE %s OWNER TO @extowner@', o.objid::pg_catalog.regprocedure);
        ELSIF o.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass THEN
            IF (SELECT c.relkind FROM pg_catalog.pg_class AS c WHERE c.oid OPERATOR(pg_catalog.=) o.objid)
               OPERATOR(pg_catalog.<>) 'i' THEN
                EXECUTE pg_catalog.format('ALTER TABLE %s OWNER TO @extowner@', o.objid::pg_catalog.regclass);
            END IF;
        ELSIF o.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass THEN
            IF (SELECT t.typtype FROM pg_catalog.pg_type AS t WHERE t.oid OPERATOR(pg_catalog.=) o.objid)
               OPERATOR(pg_catalog.=) 'c'
               AND (SELECT t.typrelid FROM pg_catalog.pg_type AS t WHERE t.oid OPERATOR(pg_catalog.=) o.objid)
                   IN (SELECT c.oid FROM pg_catalog.pg_class AS c WHERE c.relkind OPERATOR(pg_catalog.=) 'c') THEN
                EXECUTE pg_catalog.format('ALTER TYPE %s OWNER TO @extowner@', o.objid::pg_catalog.regtype);
            END IF;
        END IF;
    END LOOP;
END
$owner$;
