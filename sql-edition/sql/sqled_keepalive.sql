-- sqled_keepalive: with no worker, a call announces lapses; it must not
-- announce the lapse of a term whose keepalive a hoplock_renew_all in
-- flight is renewing (the renewal would return the term as renewed, and
-- then the term would be expired).  Another session renews the owner's
-- keepalive, past its old expiry, and has not committed yet.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;
SELECT show(hoplock_acquire('kx', 'kx-owner', '1 h'));
SELECT count(*) AS renewed FROM hoplock_renew_all('kx-owner', '1 s');
SELECT dblink_connect('kx_renewer',
           format('dbname=%s port=%s host=%s', current_database(),
                  current_setting('port'),
                  split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT dblink_exec('kx_renewer', 'BEGIN');
SELECT * FROM dblink('kx_renewer',
    $$SELECT name FROM hoplock_renew_all('kx-owner', '1 h')$$) AS t(name text);
SELECT pg_sleep(1.2);
SELECT hoplock_internal.expire() >= 0 AS looked;
SELECT state FROM hoplock_internal.lease WHERE name = 'kx';
SELECT dblink_exec('kx_renewer', 'COMMIT');
SELECT show(hoplock_holder('kx')),
       (SELECT remaining > '50 min' FROM hoplock_leases WHERE name = 'kx') AS renewed;
SELECT event FROM hoplock_events(0) WHERE name = 'kx' ORDER BY seq;
SELECT hoplock_release('kx', 'kx-owner');
SELECT dblink_disconnect('kx_renewer');
