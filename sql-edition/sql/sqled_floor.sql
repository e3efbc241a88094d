-- sqled_floor: a name forgotten raises the floor of generations, one row
-- for the database (hoplock_internal.floor), and a name with slots is
-- forgotten by an acquire of no slots once every slot is free -- by any
-- role's acquire.  A transaction that forgot one (alice's acquire, left
-- open) must not make another role's forget wait for it: bob's acquire
-- of another such name, or the owner's hoplock_forget, is contended (or
-- goes on) at once, never held up (statement_timeout would cut a wait).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;
CREATE ROLE regress_sqled_alice LOGIN;
CREATE ROLE regress_sqled_bob;
SELECT dblink_connect('alice',
           format('dbname=%s port=%s host=%s user=regress_sqled_alice', current_database(),
                  current_setting('port'),
                  split_part(current_setting('unix_socket_directories'), ',', 1)));

-- two names with slots, every slot free
SELECT hoplock_release('fl-a', (hoplock_acquire('fl-a', 'x', '1 h', slots => 2)).owner);
SELECT hoplock_release('fl-b', (hoplock_acquire('fl-b', 'x', '1 h', slots => 2)).owner);
SELECT hoplock_release('fl-c', (hoplock_acquire('fl-c', 'x', '1 h')).owner);

-- alice's acquire of one, of no slots, forgets its slots: left open
SELECT dblink_exec('alice', 'BEGIN');
SELECT * FROM dblink('alice', $$
    SELECT (hoplock_acquire('fl-a', 'alice', '1 h')).owner$$) AS t(owner text);

SET statement_timeout = '2s';
SET ROLE regress_sqled_bob;
SELECT (hoplock_acquire('fl-b', 'bob', '1 h')).owner IS DISTINCT FROM 'x' AS bob_not_held_up;
RESET ROLE;
SELECT hoplock_forget('fl-c') IS NOT NULL AS forget_not_held_up;
RESET statement_timeout;

SELECT dblink_exec('alice', 'COMMIT');
SELECT hoplock_release('fl-a', 'alice');
SET ROLE regress_sqled_bob;
SELECT coalesce(hoplock_release('fl-b', 'bob'), true) AS released;
RESET ROLE;
SELECT dblink_disconnect('alice');
DROP ROLE regress_sqled_alice;
DROP ROLE regress_sqled_bob;
