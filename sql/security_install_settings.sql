-- security_install_settings: an ordinary role changes none of hoplock's
-- settings but hoplock.notify_renewals, by any route PostgreSQL offers.
--
-- Runs after setup, on the extension it installed, and leaves it as it
-- was.  One of the topics of the old security_install test, with
-- security_install_schema, security_install_planted and
-- security_install_access.

SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;

CREATE ROLE regress_hoplock_leader;
CREATE ROLE regress_hoplock_intruder LOGIN;

--------------------------------------------------------------------------
-- Settings: an ordinary role changes none but hoplock.notify_renewals, by
-- SET, SET LOCAL, set_config, ALTER ROLE (itself or another), ALTER
-- DATABASE (not its owner, then its owner), ALTER SYSTEM, or options at
-- connection.  guc.sql and security.sql cover SET of max_ttl, channel,
-- log_events and max_names_per_role.
SET ROLE regress_hoplock_intruder;
BEGIN;
SET LOCAL hoplock.max_ttl = '100 d';
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT set_config('hoplock.max_ttl', '100d', false);
\echo :LAST_ERROR_SQLSTATE
SELECT set_config('hoplock.log_events', 'on', true);
\echo :LAST_ERROR_SQLSTATE
SET hoplock.history_size = 0;
\echo :LAST_ERROR_SQLSTATE
SET hoplock.released_retention = 1;
\echo :LAST_ERROR_SQLSTATE
SET hoplock.hung_holder_timeout = 0;
\echo :LAST_ERROR_SQLSTATE
SET hoplock.naptime = 1;
\echo :LAST_ERROR_SQLSTATE
SET hoplock.databases = 'nothing';
\echo :LAST_ERROR_SQLSTATE
SET hoplock.max_tracked_leases = 100;
\echo :LAST_ERROR_SQLSTATE
SET hoplock.max_databases = 1;
\echo :LAST_ERROR_SQLSTATE
SET hoplock.queue_size = 16;
\echo :LAST_ERROR_SQLSTATE
ALTER ROLE regress_hoplock_intruder SET hoplock.max_ttl = '100 d';
\echo :LAST_ERROR_SQLSTATE
ALTER ROLE regress_hoplock_intruder SET hoplock.log_events = on;
\echo :LAST_ERROR_SQLSTATE
ALTER ROLE regress_hoplock_intruder SET hoplock.max_names_per_role = 0;
\echo :LAST_ERROR_SQLSTATE
ALTER ROLE regress_hoplock_intruder SET hoplock.channel = 'other';
\echo :LAST_ERROR_SQLSTATE
ALTER ROLE regress_hoplock_intruder SET hoplock.history_size = 0;
\echo :LAST_ERROR_SQLSTATE
ALTER ROLE regress_hoplock_intruder SET hoplock.queue_size = 16;
\echo :LAST_ERROR_SQLSTATE
ALTER ROLE regress_hoplock_intruder IN DATABASE contrib_regression SET hoplock.max_ttl = '100 d';
\echo :LAST_ERROR_SQLSTATE
-- notify_renewals is any session's to choose, for its own renewals
ALTER ROLE regress_hoplock_intruder SET hoplock.notify_renewals = on;
ALTER ROLE regress_hoplock_intruder RESET hoplock.notify_renewals;
-- (the wording of this refusal differs between PostgreSQL versions)
\set VERBOSITY sqlstate
ALTER ROLE regress_hoplock_leader SET hoplock.notify_renewals = on;
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
ALTER DATABASE contrib_regression SET hoplock.notify_renewals = on;
\echo :LAST_ERROR_SQLSTATE
-- (before PostgreSQL 15 ALTER SYSTEM is refused to every ordinary role, in
-- other words)
\set VERBOSITY sqlstate
ALTER SYSTEM SET hoplock.max_ttl = '100 d';
ALTER SYSTEM SET hoplock.channel = 'other';
\set VERBOSITY default
RESET ROLE;

-- The owner of a database: ALTER DATABASE SET only what any session may
-- SET.
SELECT datdba::regrole AS dbowner FROM pg_database WHERE datname = current_database() \gset
ALTER DATABASE contrib_regression OWNER TO regress_hoplock_intruder;
SET ROLE regress_hoplock_intruder;
ALTER DATABASE contrib_regression SET hoplock.max_ttl = '100 d';
\echo :LAST_ERROR_SQLSTATE
ALTER DATABASE contrib_regression SET hoplock.log_events = on;
\echo :LAST_ERROR_SQLSTATE
ALTER DATABASE contrib_regression SET hoplock.max_names_per_role = 0;
\echo :LAST_ERROR_SQLSTATE
ALTER DATABASE contrib_regression SET hoplock.channel = 'other';
\echo :LAST_ERROR_SQLSTATE
ALTER DATABASE contrib_regression SET hoplock.hung_holder_timeout = 0;
\echo :LAST_ERROR_SQLSTATE
ALTER DATABASE contrib_regression SET hoplock.notify_renewals = on;
ALTER DATABASE contrib_regression RESET hoplock.notify_renewals;
RESET ROLE;
ALTER DATABASE contrib_regression OWNER TO :"dbowner";

-- Options at connection (PGOPTIONS): refused before the session starts.
CREATE FUNCTION try_options(options text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    detail text;
BEGIN
    PERFORM dblink_connect('si_options',
        format('dbname=%s port=%s host=%s user=regress_hoplock_intruder options=%L',
               current_database(), current_setting('port'),
               split_part(current_setting('unix_socket_directories'), ',', 1),
               options));
    PERFORM dblink_disconnect('si_options');
    RETURN 'connected';
EXCEPTION WHEN sqlclient_unable_to_establish_sqlconnection THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RETURN substring(detail FROM 'FATAL:\s+([^\n]*)');
END $$;
SELECT try_options('-c hoplock.max_ttl=100d');
SELECT try_options('-c hoplock.log_events=on');
SELECT try_options('-c hoplock.max_names_per_role=0');
SELECT try_options('-c hoplock.channel=other');
SELECT try_options('-c hoplock.notify_renewals=on');
DROP FUNCTION try_options(text);

-- Nothing was stored, and the settings and their effect are as before.
SELECT count(*) AS stored_hoplock_settings
  FROM pg_db_role_setting, unnest(setconfig) AS s
 WHERE s LIKE 'hoplock.%';
SET ROLE regress_hoplock_intruder;
SHOW hoplock.max_ttl;
SHOW hoplock.log_events;
SHOW hoplock.max_names_per_role;
SHOW hoplock.history_size;
SELECT hoplock_acquire('si-ttl', 'i', '25 h');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

--------------------------------------------------------------------------
-- Clean up.
DROP OWNED BY regress_hoplock_leader;
DROP OWNED BY regress_hoplock_intruder;
DROP ROLE regress_hoplock_leader, regress_hoplock_intruder;
SELECT * FROM hoplock_internal.lease WHERE name LIKE 'si-%' AND state = 'h';
