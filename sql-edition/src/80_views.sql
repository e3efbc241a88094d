/* 80_views.sql: the views of the contract.  hoplock_leases and
 * hoplock_history as in the C edition; the views of what only the C
 * edition has (its workers, its candidates, its shared-memory counters)
 * keep their columns and say so, or are empty. */

CREATE VIEW @extschema@.hoplock_leases WITH (security_barrier) AS
    SELECT pg_catalog.split_part(l.name, E'\x1f', 1) COLLATE "C" AS name,
           l.owner,
           l.generation,
           l.acquired_at,
           GREATEST(l.renewed_at, k.renewed_at) AS renewed_at,
           COALESCE(k.expires_at, l.expires_at) AS expires_at,
           l.state OPERATOR(pg_catalog.<>) 'r'::"char"
               AND COALESCE(k.expires_at, l.expires_at) OPERATOR(pg_catalog.<=) c.now AS expired,
           CASE WHEN l.state OPERATOR(pg_catalog.<>) 'r'::"char"
                     AND COALESCE(k.expires_at, l.expires_at) OPERATOR(pg_catalog.>) c.now
                THEN COALESCE(k.expires_at, l.expires_at) OPERATOR(pg_catalog.-) c.now
                ELSE '0'::pg_catalog.interval
           END AS remaining,
           l.owner_role AS role,
           l.session_pid IS NOT NULL AS session_bound,
           l.session_pid AS holder_pid,
           hoplock_internal.blocker(l.xmax) AS blocked_by,
           l.value,
           l.step_down_at,
           l.step_down_to,
           coalesce(l.priority, 0) AS priority,
           0::bigint AS refused_writes,
           CASE WHEN l.hold_until OPERATOR(pg_catalog.>) c.now
                     AND (l.state OPERATOR(pg_catalog.=) 'r'::"char"
                          OR COALESCE(k.expires_at, l.expires_at) OPERATOR(pg_catalog.>) c.now)
                THEN l.hold_until
           END AS hold_until,
           CASE WHEN pg_catalog.strpos(l.name, E'\x1f') OPERATOR(pg_catalog.>) 0
                THEN pg_catalog.split_part(l.name, E'\x1f', 2)::pg_catalog.int4 END AS slot
      FROM hoplock_internal.lease AS l
           CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) AS c
           LEFT JOIN hoplock_internal.keepalive AS k
                  ON l.state OPERATOR(pg_catalog.=) 'h'::"char"
                 AND l.keepalive OPERATOR(pg_catalog.>) 0
                 AND k.id OPERATOR(pg_catalog.=) l.keepalive
     WHERE l.state OPERATOR(pg_catalog.<>) 'r'::"char"
        OR l.hold_until OPERATOR(pg_catalog.>) c.now;
GRANT SELECT ON @extschema@.hoplock_leases TO PUBLIC;

CREATE VIEW @extschema@.hoplock_history WITH (security_barrier) AS
    SELECT pg_catalog.split_part(h.name, E'\x1f', 1) COLLATE "C" AS name,
           h.owner, h.role, h.generation, h.acquired_at, h.ended_at, h.how,
           0::bigint AS refused_writes,
           CASE WHEN pg_catalog.strpos(h.name, E'\x1f') OPERATOR(pg_catalog.>) 0
                THEN pg_catalog.split_part(h.name, E'\x1f', 2)::pg_catalog.int4 END AS slot
      FROM (SELECT e.name, e.owner, e.role, e.generation, e.acquired_at,
                   e.ended_at, e.how
              FROM hoplock_internal.history AS e
            UNION ALL
            -- a running term the C edition began (a database moved here
            -- with pg_dump) is its lease row until it ends (history_end)
            SELECT l.name, l.owner, l.owner_role, l.generation, l.acquired_at,
                   NULL::pg_catalog.timestamptz, NULL::pg_catalog.text
              FROM hoplock_internal.lease AS l
             WHERE l.state OPERATOR(pg_catalog.=) 'h'::"char"
               AND NOT EXISTS (SELECT FROM hoplock_internal.history AS o
                                WHERE o.name OPERATOR(pg_catalog.=) l.name
                                  AND o.generation OPERATOR(pg_catalog.=) l.generation)) AS h;
GRANT SELECT ON @extschema@.hoplock_history TO PUBLIC;

CREATE VIEW @extschema@.hoplock_candidates AS
    SELECT NULL::text AS name, NULL::text AS owner, NULL::integer AS priority,
           NULL::timestamptz AS waiting_since, NULL::integer AS pid, NULL::text AS role
     WHERE false;
GRANT SELECT ON @extschema@.hoplock_candidates TO PUBLIC;

CREATE VIEW @extschema@.hoplock_workers AS
    SELECT d.oid AS datid, d.datname::text AS datname, NULL::integer AS pid,
           'unserved'::text AS state, NULL::bigint AS leases_tracked,
           NULL::timestamptz AS next_expiry, NULL::timestamptz AS last_wakeup,
           NULL::bigint AS expiries_announced, NULL::interval AS last_lag,
           NULL::timestamptz AS started_at, NULL::bigint AS sessions_ended,
           'the SQL edition of hoplock has no worker: calls announce expiries (see the README)'::text AS reason
      FROM pg_catalog.pg_database AS d
     WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database();
GRANT SELECT ON @extschema@.hoplock_workers TO PUBLIC;

CREATE VIEW @extschema@.hoplock_stats AS
    SELECT NULL::oid AS datid, NULL::text AS datname, NULL::bigint AS terms_begun,
           NULL::bigint AS contended, NULL::bigint AS renewals, NULL::bigint AS releases,
           NULL::bigint AS force_releases, NULL::bigint AS expiries, NULL::bigint AS waits,
           NULL::bigint AS wakeups, NULL::bigint AS events_delivered, NULL::bigint AS deliveries,
           NULL::bigint AS fences_refused, NULL::bigint AS writes_refused,
           NULL::timestamptz AS stats_reset
     WHERE false;
GRANT SELECT ON @extschema@.hoplock_stats TO PUBLIC;

CREATE FUNCTION @extschema@.hoplock_stats_reset()
RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$ SELECT $$;
REVOKE EXECUTE ON FUNCTION @extschema@.hoplock_stats_reset() FROM PUBLIC;
