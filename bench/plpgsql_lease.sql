-- bench/plpgsql_lease.sql: the same lease contract written the way a
-- competent user would in PL/pgSQL, to compare hoplock against.  Correct
-- under concurrency and never waiting (SKIP LOCKED / NOWAIT row locks, the
-- fence a FOR KEY SHARE lock that renewals do not conflict with), the same
-- events as JSON NOTIFYs, clock_timestamp() throughout.  No deliberate
-- slowness: one table, its primary key, static SQL.
--
-- Loaded into its own schema, plpg, by bench/bench.pl.

CREATE SCHEMA plpg;

CREATE TABLE plpg.lease (
    name        text PRIMARY KEY,
    owner       text NOT NULL,
    generation  bigint NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    released    boolean NOT NULL DEFAULT false,
    expiry_sent boolean NOT NULL DEFAULT false
) WITH (fillfactor = 50);

CREATE TYPE plpg.lease_t AS (
    name text, owner text, generation bigint,
    acquired_at timestamptz, expires_at timestamptz
);

CREATE FUNCTION plpg.check_args(p_name text, p_owner text, p_ttl interval)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_name IS NULL OR p_owner IS NULL OR p_ttl IS NULL THEN
        RAISE EXCEPTION 'arguments must not be null' USING ERRCODE = '22004';
    END IF;
    IF p_ttl <= interval '0' OR p_ttl > interval '1 day' THEN
        RAISE EXCEPTION 'ttl out of range' USING ERRCODE = '22023';
    END IF;
END $$;

CREATE FUNCTION plpg.event(p_event text, r plpg.lease)
RETURNS void LANGUAGE sql AS $$
    SELECT pg_notify('plpg', json_build_object(
        'event', p_event, 'name', r.name, 'owner', r.owner,
        'generation', r.generation, 'expires_at', r.expires_at)::text)
$$;

CREATE FUNCTION plpg.acquire(p_name text, p_owner text, p_ttl interval)
RETURNS plpg.lease_t LANGUAGE plpgsql AS $$
DECLARE
    r plpg.lease;
    t timestamptz := clock_timestamp();
BEGIN
    PERFORM plpg.check_args(p_name, p_owner, p_ttl);
    SELECT * INTO r FROM plpg.lease WHERE name = p_name FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- no row yet, or one being changed right now
        INSERT INTO plpg.lease VALUES (p_name, p_owner, 1, t, t, t + p_ttl)
            ON CONFLICT (name) DO NOTHING
            RETURNING * INTO r;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        PERFORM plpg.event('acquired', r);
        RETURN (r.name, r.owner, r.generation, r.acquired_at, r.expires_at);
    END IF;

    IF NOT r.released AND r.expires_at > t THEN
        IF r.owner <> p_owner THEN
            RETURN NULL;
        END IF;
        UPDATE plpg.lease SET renewed_at = t, expires_at = t + p_ttl
         WHERE name = p_name RETURNING * INTO r;
        RETURN (r.name, r.owner, r.generation, r.acquired_at, r.expires_at);
    END IF;

    IF NOT r.released AND NOT r.expiry_sent THEN
        PERFORM plpg.event('expired', r);
    END IF;
    UPDATE plpg.lease
       SET owner = p_owner, generation = r.generation + 1, acquired_at = t,
           renewed_at = t, expires_at = t + p_ttl, released = false,
           expiry_sent = false
     WHERE name = p_name RETURNING * INTO r;
    PERFORM plpg.event('acquired', r);
    RETURN (r.name, r.owner, r.generation, r.acquired_at, r.expires_at);
END $$;

CREATE FUNCTION plpg.renew(p_name text, p_owner text, p_ttl interval)
RETURNS plpg.lease_t LANGUAGE plpgsql AS $$
DECLARE
    r plpg.lease;
    t timestamptz := clock_timestamp();
BEGIN
    PERFORM plpg.check_args(p_name, p_owner, p_ttl);
    -- FOR NO KEY UPDATE: fences (FOR KEY SHARE) do not hold renewals up
    PERFORM 1 FROM plpg.lease
     WHERE name = p_name AND owner = p_owner AND NOT released AND expires_at > t
       FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE plpg.lease SET renewed_at = t, expires_at = t + p_ttl
     WHERE name = p_name RETURNING * INTO r;
    RETURN (r.name, r.owner, r.generation, r.acquired_at, r.expires_at);
END $$;

CREATE FUNCTION plpg.release(p_name text, p_owner text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    r plpg.lease;
    t timestamptz := clock_timestamp();
BEGIN
    PERFORM plpg.check_args(p_name, p_owner, interval '1 s');
    PERFORM 1 FROM plpg.lease
     WHERE name = p_name AND owner = p_owner AND NOT released AND expires_at > t
       FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE plpg.lease SET released = true, expires_at = t
     WHERE name = p_name RETURNING * INTO r;
    PERFORM plpg.event('released', r);
    RETURN true;
END $$;

CREATE FUNCTION plpg.fence(p_name text, p_generation bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    r plpg.lease;
BEGIN
    -- FOR KEY SHARE: blocks term changes (FOR UPDATE), not renewals
    SELECT * INTO r FROM plpg.lease WHERE name = p_name FOR KEY SHARE NOWAIT;
    IF NOT FOUND OR r.generation <> p_generation OR r.released
       OR r.expires_at <= clock_timestamp() THEN
        RAISE EXCEPTION 'lease "%" is not held by generation %', p_name, p_generation
            USING ERRCODE = '55P03';
    END IF;
END $$;

CREATE FUNCTION plpg.holder(p_name text)
RETURNS plpg.lease_t LANGUAGE sql STABLE AS $$
    SELECT name, owner, generation, acquired_at, expires_at
      FROM plpg.lease
     WHERE name = p_name AND NOT released AND expires_at > clock_timestamp()
$$;
