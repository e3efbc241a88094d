-- bench/plpgsql_lease_logged.sql: bench/plpgsql_lease.sql's acquire and
-- release written for the contract as it stands since 1.2, the way a
-- competent user would: each event a numbered row of an event table (not a
-- NOTIFY in the transaction of the change: a NOTIFY there takes a lock
-- that every NOTIFYing commit of the cluster waits for), and each ended
-- term a row of a history table.  Everything else is plpgsql_lease.sql's:
-- the same row locks that never wait, clock_timestamp() throughout, static
-- SQL, one table per kind of row with its primary key.
--
-- The numbers come from a sequence, so they are not in commit order: a
-- reader can miss a row committed later below a number it has seen, which
-- hoplock's event numbers rule out.  The comparison is of the writes a
-- change makes, not of that guarantee.
--
-- Loaded into its own schema, plpg_log, by bench/bench.pl; renewals,
-- fences and holders write no event and no history, and are
-- plpgsql_lease.sql's.

CREATE SCHEMA plpg_log;

CREATE TABLE plpg_log.lease (LIKE plpg.lease INCLUDING ALL) WITH (fillfactor = 50);

CREATE TABLE plpg_log.event (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event       text NOT NULL,
    name        text NOT NULL,
    owner       text NOT NULL,
    generation  bigint NOT NULL,
    expires_at  timestamptz NOT NULL,
    at          timestamptz NOT NULL
);

CREATE TABLE plpg_log.history (
    name        text NOT NULL,
    generation  bigint NOT NULL,
    owner       text NOT NULL,
    role        name NOT NULL,
    acquired_at timestamptz NOT NULL,
    ended_at    timestamptz NOT NULL,
    how         text NOT NULL,
    PRIMARY KEY (name, generation)
) WITH (fillfactor = 80);

CREATE FUNCTION plpg_log.acquire(p_name text, p_owner text, p_ttl interval)
RETURNS plpg.lease_t LANGUAGE plpgsql AS $$
DECLARE
    r plpg_log.lease;
    t timestamptz := clock_timestamp();
BEGIN
    PERFORM plpg.check_args(p_name, p_owner, p_ttl);
    SELECT * INTO r FROM plpg_log.lease WHERE name = p_name FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- no row yet, or one being changed right now
        INSERT INTO plpg_log.lease VALUES (p_name, p_owner, 1, t, t, t + p_ttl)
            ON CONFLICT (name) DO NOTHING
            RETURNING * INTO r;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        INSERT INTO plpg_log.event (event, name, owner, generation, expires_at, at)
        VALUES ('acquired', r.name, r.owner, r.generation, r.expires_at, t);
        RETURN (r.name, r.owner, r.generation, r.acquired_at, r.expires_at);
    END IF;

    IF NOT r.released AND r.expires_at > t THEN
        IF r.owner <> p_owner THEN
            RETURN NULL;
        END IF;
        UPDATE plpg_log.lease SET renewed_at = t, expires_at = t + p_ttl
         WHERE name = p_name RETURNING * INTO r;
        RETURN (r.name, r.owner, r.generation, r.acquired_at, r.expires_at);
    END IF;

    IF NOT r.released AND NOT r.expiry_sent THEN
        INSERT INTO plpg_log.history
        VALUES (r.name, r.generation, r.owner, current_user, r.acquired_at,
                r.expires_at, 'expired');
        INSERT INTO plpg_log.event (event, name, owner, generation, expires_at, at)
        VALUES ('expired', r.name, r.owner, r.generation, r.expires_at, r.expires_at);
    END IF;
    UPDATE plpg_log.lease
       SET owner = p_owner, generation = r.generation + 1, acquired_at = t,
           renewed_at = t, expires_at = t + p_ttl, released = false,
           expiry_sent = false
     WHERE name = p_name RETURNING * INTO r;
    INSERT INTO plpg_log.event (event, name, owner, generation, expires_at, at)
    VALUES ('acquired', r.name, r.owner, r.generation, r.expires_at, t);
    RETURN (r.name, r.owner, r.generation, r.acquired_at, r.expires_at);
END $$;

CREATE FUNCTION plpg_log.release(p_name text, p_owner text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    r plpg_log.lease;
    t timestamptz := clock_timestamp();
BEGIN
    PERFORM plpg.check_args(p_name, p_owner, interval '1 s');
    PERFORM 1 FROM plpg_log.lease
     WHERE name = p_name AND owner = p_owner AND NOT released AND expires_at > t
       FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE plpg_log.lease SET released = true, expires_at = t
     WHERE name = p_name RETURNING * INTO r;
    INSERT INTO plpg_log.history
    VALUES (r.name, r.generation, r.owner, current_user, r.acquired_at, t, 'released');
    INSERT INTO plpg_log.event (event, name, owner, generation, expires_at, at)
    VALUES ('released', r.name, r.owner, r.generation, r.expires_at, t);
    RETURN true;
END $$;
