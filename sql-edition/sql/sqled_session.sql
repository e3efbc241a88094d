-- sqled_session: a session-bound term ends, with a "released" event, once
-- its session is gone from pg_stat_activity: at the next call that looks
-- (no exit callback runs in the SQL edition).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;
SELECT hoplock_position() AS p \gset
SELECT dblink_connect('holder',
           format('dbname=%s port=%s host=%s', current_database(),
                  current_setting('port'),
                  split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT * FROM dblink('holder',
    $$SELECT (hoplock_acquire('sb', 'gone', '1 h', session_bound => true)).owner$$) AS t(owner text);
SELECT session_bound, holder_pid IS NOT NULL AS has_pid FROM hoplock_leases WHERE name = 'sb';
SELECT holder_pid AS pid FROM hoplock_leases WHERE name = 'sb' \gset

-- held while its session lives
SELECT show(hoplock_acquire('sb', 'b', '1 h'));
SELECT dblink_disconnect('holder');
DO $$
BEGIN
    FOR i IN 1..500 LOOP
        EXIT WHEN NOT EXISTS (SELECT FROM pg_stat_activity
                               WHERE pid = (SELECT holder_pid FROM hoplock_leases WHERE name = 'sb'));
        PERFORM pg_sleep(0.01);
    END LOOP;
END $$;

-- gone: no longer held, and the next acquire ends it and begins its own
SELECT show(hoplock_holder('sb'));
SELECT show(hoplock_acquire('sb', 'b', '1 h'));
SELECT gen_label(name, generation), owner, how FROM hoplock_history WHERE name = 'sb' ORDER BY generation;
SELECT event, owner FROM hoplock_events(:p) WHERE name = 'sb' ORDER BY seq;

-- the holder's own session-bound term holds as long as it lives
SELECT show(hoplock_acquire('sb2', 'me', '1 h', session_bound => true));
SELECT show(hoplock_holder('sb2'));
SELECT hoplock_release('sb2', 'me');
SELECT hoplock_release('sb', 'b');
