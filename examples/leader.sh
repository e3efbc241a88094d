#!/bin/sh
# leader.sh: run a job's work only while this process leads it.
#   leader.sh [lease-name]      (connection from the usual PG* variables)
#   LEADER_TTL=15               ttl in seconds, fractions allowed (0.5)
#   LEADER_SCHEMA=hoplock       schema hoplock is installed in
#   LEADER_WORK_SCHEMA=public   schema of the table work_log: one that no
#                               untrusted role can create in or owns
# Wait to lead; while leading, do each unit of work behind the fence and
# renew at a third of the ttl; stop leading the moment a renewal fails
# (or errs); release on shutdown.  The work here appends to work_log,
# created if missing.
lease=${1:-billing-scheduler}
owner="$(hostname):$$"
ttl=${LEADER_TTL:-15}
schema=${LEADER_SCHEMA:-hoplock}
work=${LEADER_WORK_SCHEMA:-public}
gen=

case $ttl in
    ''|*[!0-9.]*|*.*.*|.) echo "leader.sh: LEADER_TTL must be a number of seconds" >&2; exit 2 ;;
esac
# a third of the ttl, never below 10 ms
pause=$(awk -v t="$ttl" 'BEGIN { p = t / 3; if (p < 0.01) p = 0.01; printf "%.3f", p }')

# psql reads SQL from stdin, so :'owner', :'lease' and :"schema" are quoted
# safely; each argument is cast to its parameter's exact type, so that no
# overload planted beside hoplock's functions matches an untyped one better
q() {
    psql -X -q -At -v ON_ERROR_STOP=1 -v owner="$owner" -v lease="$lease" \
        -v gen="$gen" -v ttl="$ttl seconds" -v schema="$schema" -v work="$work"
}

release() {
    [ -n "$gen" ] && echo "SELECT :\"schema\".hoplock_release(:'lease'::text, :'owner'::text, :gen::bigint)" | q >/dev/null
    exit 0
}
trap release INT TERM

create_work_log() {
    q <<'SQL'
SET client_min_messages = warning;
CREATE TABLE IF NOT EXISTS :"work".work_log (
    id         bigserial PRIMARY KEY,
    lease      text NOT NULL,
    owner      text NOT NULL,
    generation bigint NOT NULL,
    at         timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);
SQL
}
# instances started at once race in CREATE TABLE IF NOT EXISTS: the loser
# fails ("already exists", or on a catalog's unique index), and its second
# try finds the table; any other error comes again
create_work_log 2>/dev/null || create_work_log || exit 1

while :; do
    # a follower: sleep in the server until the lease is free (or a ttl
    # has passed), then take it
    gen=$(echo "SELECT generation FROM :\"schema\".hoplock_wait(:'lease'::text, :'owner'::text, :'ttl'::interval, :'ttl'::interval)" | q)
    while [ -n "$gen" ]; do
        # the work: every statement behind the fence, in one transaction
        q <<'SQL' || break
BEGIN;
SELECT :"schema".hoplock_fence(:'lease'::text, :gen::bigint) \g /dev/null
INSERT INTO :"work".work_log (lease, owner, generation) VALUES (:'lease', :'owner', :gen);
COMMIT;
SQL
        sleep "$pause"
        gen=$(echo "SELECT generation FROM :\"schema\".hoplock_renew(:'lease'::text, :'owner'::text, :'ttl'::interval, :gen::bigint)" | q)
    done
    gen=
done
