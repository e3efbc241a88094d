-- slots: slots => N lets up to N terms of a lease run at once, each in a
-- slot of its own with its own generation.  Every caller of a name gives
-- the same N; without slots a lease is what it always was.

-- Bad input: refused, nothing changes.
SELECT lease_table_digest() AS digest_before \gset
\set VERBOSITY terse
SELECT hoplock_acquire('sl', 'a', '1 h', slots => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('sl', 'a', '1 h', slots => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('sl', 'a', '1 h', slots => -3);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire('sl', 'a', '1 h', slots => 1001);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_wait('sl', 'a', '1 h', '0 s', slots => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_acquire(repeat('n', 252), 'a', '1 h', slots => 2);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT hoplock_acquire(repeat('n', 252), 'a', '1 h', slots => 2);
SELECT lease_table_digest() = :'digest_before' AS nothing_changed;

-- slots => 1 is the default: the same row as without it, no slot.
SELECT show(hoplock_acquire('sl1', 'a', '1 h', slots => 1));
SELECT show(hoplock_acquire('sl1', 'a', '1 h'));
SELECT name, owner, slot FROM hoplock_leases WHERE name = 'sl1';
SELECT count(*) AS rows FROM hoplock_internal.lease WHERE name LIKE 'sl1%';
SELECT hoplock_release('sl1', 'a');

-- Three slots: three owners hold a term each, a fourth gets NULL.
SELECT show(hoplock_acquire('sl', 'w1', '1 h', slots => 3));
SELECT show(hoplock_acquire('sl', 'w2', '1 h', slots => 3));
SELECT show(hoplock_acquire('sl', 'w3', '1 h', slots => 3));
SELECT show(hoplock_acquire('sl', 'w4', '1 h', slots => 3));
SELECT show(hoplock_wait('sl', 'w4', '1 h', '0.1 s', slots => 3));
-- An owner holds at most one slot: its acquire extends its own term.
SELECT show(hoplock_acquire('sl', 'w2', '2 h', slots => 3));
SELECT count(*) AS running, count(DISTINCT slot) AS slots,
       count(DISTINCT generation) AS generations,
       bool_and(slot BETWEEN 1 AND 3) AS numbered
  FROM hoplock_leases WHERE name = 'sl';
SELECT owner, remaining > '1 h' AS extended FROM hoplock_leases
 WHERE name = 'sl' ORDER BY owner;
SELECT generation AS w1 FROM hoplock_leases WHERE name = 'sl' AND owner = 'w1' \gset
SELECT generation AS w2 FROM hoplock_leases WHERE name = 'sl' AND owner = 'w2' \gset

-- Every caller agrees on N: any other is an error naming both values.
SELECT hoplock_acquire('sl', 'w9', '1 h');
SELECT hoplock_acquire('sl', 'w9', '1 h', slots => 2);
SELECT hoplock_wait('sl', 'w9', '1 h', '0 s', slots => 4);
SELECT hoplock_write('sl', NULL, 'w9', '1 h');
-- A running term without slots is one slot: another N waits until it ends.
SELECT show(hoplock_acquire('sl-one', 'a', '1 h'));
SELECT hoplock_acquire('sl-one', 'b', '1 h', slots => 2);
SELECT hoplock_release('sl-one', 'a');
SELECT show(hoplock_acquire('sl-one', 'b', '1 h', slots => 2));
SELECT show(hoplock_acquire('sl-one', 'c', '1 h', slots => 2));
SELECT name, owner, slot FROM hoplock_leases WHERE name = 'sl-one' ORDER BY owner;
SELECT hoplock_force_release('sl-one') AS forced;

-- renew, release, proclaim, fence: per term, found by owner (and
-- generation).
SELECT show(hoplock_renew('sl', 'w1', '1 h'));
SELECT show(hoplock_renew('sl', 'w1', '1 h', :w1));
SELECT show(hoplock_renew('sl', 'w1', '1 h', :w2));
SELECT show(hoplock_renew('sl', 'w9', '1 h'));
SELECT hoplock_proclaim('sl', 'w1', :w1, 'host-1') AS proclaimed;
SELECT owner, value FROM hoplock_leases WHERE name = 'sl' AND value IS NOT NULL;
BEGIN;
SELECT hoplock_fence('sl', :w1) AS fenced_w1;
SELECT hoplock_fence('sl', :w2) AS fenced_w2;
COMMIT;
SELECT hoplock_release('sl', 'w1', :w2) AS wrong_generation;
SELECT hoplock_release('sl', 'w1', :w1) AS released;
SELECT hoplock_release('sl', 'w1') AS again;
SELECT raises('sl', 'SELECT hoplock_fence(''sl'', %s)', :w1);
SELECT hoplock_fence('sl', 1);
-- the freed slot goes to the next owner, with a generation above all
SELECT show(hoplock_acquire('sl', 'w4', '1 h', slots => 3));
SELECT generation > :w2 AS above_every_other
  FROM hoplock_leases WHERE name = 'sl' AND owner = 'w4';

-- hoplock_fenced: a row is written by the term of its generation, in
-- whichever slot it runs.
CREATE TABLE sl_work (generation bigint, what text);
CREATE TRIGGER sl_work_fenced BEFORE INSERT ON sl_work
    FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('sl', 'generation');
INSERT INTO sl_work VALUES (:w2, 'by w2');
SELECT raises('sl', 'INSERT INTO sl_work VALUES (%s, ''by w1, released'')', :w1);
SELECT what FROM sl_work;
DROP TABLE sl_work;
-- ... and a zombie write, by a term whose slot has had a newer term since,
-- is counted against that term, as one still in its slot is: the fence
-- refused before w4 took the slot, the row refused and a fence after.
SELECT raises('sl', 'SELECT hoplock_fence(''sl'', %s)', :w1);
SELECT refused_writes FROM hoplock_history WHERE name = 'sl' AND generation = :w1;

-- holder: the running term of the lowest slot; read: the name has no term
-- of its own; the low-level calls are not for a name with slots in use,
-- nor is forget.
SELECT (hoplock_holder('sl')).owner IN ('w2', 'w3', 'w4') AS holder;
SELECT hoplock_read('sl') IS NULL AS no_state;
SELECT hoplock_delete('sl', 'x');
SELECT hoplock_forget('sl') AS forgotten;

-- Events and history name the lease, not its slot's row, and give the
-- slot of a lease with slots only.
SELECT name, count(slot) > 0 AS with_slot, count(*) FILTER (WHERE slot IS NULL) > 0 AS without
  FROM hoplock_events(0) WHERE name LIKE 'sl%' GROUP BY name ORDER BY 1;
SELECT name, count(*) AS terms, count(DISTINCT slot) AS slots
  FROM hoplock_history WHERE name LIKE 'sl%' GROUP BY name ORDER BY name;

-- The payloads a listener receives: "slot" after the name, for a lease
-- with slots only.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;
SELECT dblink_connect('slot_listener',
           format('dbname=%s port=%s host=%s', current_database(),
                  current_setting('port'),
                  split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT dblink_exec('slot_listener', 'LISTEN hoplock');
CREATE FUNCTION slot_payloads(n int) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    got int := 0;
    r record;
BEGIN
    FOR i IN 1..3000 LOOP
        FOR r IN SELECT * FROM dblink_get_notify('slot_listener') LOOP
            IF r.extra::json->>'name' LIKE 'slp%' THEN
                RETURN NEXT regexp_replace(r.extra, '^.*("event": "[a-z]+", "name": "[a-z-]+"(, "slot": [0-9]+)?).*$', '\1');
                got := got + 1;
            END IF;
        END LOOP;
        EXIT WHEN got >= n;
        PERFORM pg_sleep(0.01);
    END LOOP;
END $$;
SELECT show(hoplock_acquire('slp', 'a', '1 h', slots => 2));
SELECT show(hoplock_acquire('slp-one', 'a', '1 h'));
SELECT hoplock_release('slp', 'a') AND hoplock_release('slp-one', 'a') AS released;
SELECT * FROM slot_payloads(4);
-- A fence in a transaction whose snapshot is older than the name's slots
-- finds the slot all the same (the newest rows decide a fence).
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) >= 0 AS snapshot_taken FROM hoplock_leases;
SELECT g AS rr FROM dblink('slot_listener',
    $$SELECT generation FROM hoplock_acquire('sl-rr', 'a', '1 h', slots => 2)$$) AS t(g bigint) \gset
SELECT hoplock_fence('sl-rr', :rr) IS NOT NULL AS fenced;
COMMIT;
SELECT hoplock_force_release('sl-rr') AS forced;
SELECT dblink_disconnect('slot_listener');
DROP FUNCTION slot_payloads(int);

-- Privileges: a slot's term is its role's.
CREATE ROLE regress_slots_alice;
CREATE ROLE regress_slots_bob;
SET ROLE regress_slots_alice;
SELECT show(hoplock_acquire('sl-priv', 'a', '1 h', slots => 2));
RESET ROLE;
SELECT generation AS pa FROM hoplock_leases WHERE name = 'sl-priv' \gset
SET ROLE regress_slots_bob;
SELECT show(hoplock_acquire('sl-priv', 'b', '1 h', slots => 2));
SELECT hoplock_renew('sl-priv', 'a', '1 h');
\echo :LAST_ERROR_SQLSTATE
SELECT hoplock_release('sl-priv', 'a');
\echo :LAST_ERROR_SQLSTATE
SELECT raises('sl-priv', 'SELECT hoplock_fence(''sl-priv'', %s)', :pa);
SELECT hoplock_force_release('sl-priv');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT owner, role FROM hoplock_leases WHERE name = 'sl-priv' ORDER BY owner;

-- force_release ends every slot's term.
SELECT hoplock_force_release('sl') AS forced;
SELECT hoplock_force_release('sl-priv') AS forced;
SELECT count(*) AS running FROM hoplock_leases WHERE name LIKE 'sl%';
DROP ROLE regress_slots_alice;
DROP ROLE regress_slots_bob;

-- Every slot free: the name is a released name again (its number of
-- slots bound it only while a term ran): taken without slots, above every
-- generation it had, or forgotten, every row of it together.
SELECT max(generation) AS before FROM hoplock_history WHERE name = 'sl' \gset
SELECT show(hoplock_acquire('sl', 'plain', '1 h'));
SELECT slot, generation > :before AS above FROM hoplock_leases WHERE name = 'sl';
SELECT count(*) AS rows FROM hoplock_internal.lease WHERE name LIKE 'sl' || E'\x1f' || '%';
SELECT hoplock_release('sl', 'plain');
SELECT show(hoplock_acquire('sl', 'again', '1 h', slots => 2));
SELECT hoplock_release('sl', 'again');
SELECT hoplock_forget('sl') AS forgotten;
SELECT count(*) AS rows FROM hoplock_internal.lease WHERE name LIKE 'sl' || E'\x1f' || '%' OR name = 'sl';

-- The compare-and-swap calls on a name with slots: refused while a slot
-- is in use; once all are free, a delete finds no state and a write of no
-- handle takes the name without slots.
SELECT show(hoplock_acquire('sl-w', 'a', '1 h', slots => 2));
SELECT hoplock_delete('sl-w', 'x');
SELECT hoplock_release('sl-w', 'a');
SELECT hoplock_delete('sl-w', 'x') AS deleted;
SELECT show(hoplock_write('sl-w', NULL, 'b', '1 h'));
SELECT owner, slot FROM hoplock_leases WHERE name = 'sl-w';
SELECT hoplock_force_release('sl-w') AS forced;

-- A session looks for its owner's term first in the slot it last found it
-- in; nothing else is taken from that: a renew of another generation is
-- NULL, and a name taken without slots since is renewed and released as
-- a lease without slots.
SELECT show(hoplock_acquire('sl-h', 'a', '1 h', slots => 2));
SELECT hoplock_renew('sl-h', 'a', '1 h',
    (SELECT generation + 1 FROM hoplock_leases WHERE name = 'sl-h')) IS NULL AS other_generation;
SELECT hoplock_renew('sl-h', 'a', '1 h') IS NOT NULL AS renewed;
SELECT hoplock_release('sl-h', 'a') AS released;
SELECT hoplock_release('sl-h', 'a') AS released_again;
SELECT show(hoplock_acquire('sl-h', 'a', '1 h'));
SELECT hoplock_renew('sl-h', 'a', '1 h') IS NOT NULL AS renewed;
SELECT slot FROM hoplock_leases WHERE name = 'sl-h';
SELECT hoplock_release('sl-h', 'a') AS released;
