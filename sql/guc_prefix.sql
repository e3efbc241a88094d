-- Names under hoplock. that hoplock does not define.  PostgreSQL 15 and
-- later reserve the prefix: setting such a name is an error, as anyone,
-- anywhere.  PostgreSQL 13 and 14 cannot reserve it: SET accepts the name
-- as a placeholder, with no effect on hoplock (expected/guc_prefix_1.out);
-- ALTER ROLE of a placeholder is still refused to an ordinary role.

SET hoplock.no_such_setting = 1;
\echo :SQLSTATE

CREATE ROLE regress_hoplock_prefix LOGIN;
SET ROLE regress_hoplock_prefix;
ALTER ROLE regress_hoplock_prefix SET hoplock.no_such_setting = 1;
\echo :SQLSTATE
RESET ROLE;

SELECT count(*) AS role_settings
  FROM pg_db_role_setting
 WHERE setrole = 'regress_hoplock_prefix'::regrole;
DROP ROLE regress_hoplock_prefix;
