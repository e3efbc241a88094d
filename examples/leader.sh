#!/bin/sh
# leader.sh: run a job's work only while this process leads it.
#   leader.sh [lease-name]      (connection from the usual PG* variables)
# Acquire; while leading, do each unit of work behind the fence and renew at
# a third of the ttl; stop leading the moment a renewal fails; release on
# shutdown.
lease=${1:-billing-scheduler}
owner="$(hostname):$$"
ttl=${LEADER_TTL:-15}     # seconds
gen=

# psql reads SQL from stdin, so :'owner' and :'lease' are quoted safely
q() { psql -X -q -At -v ON_ERROR_STOP=1 -v owner="$owner" -v lease="$lease" -v gen="$gen"; }

release() {
    [ -n "$gen" ] && echo "SELECT hoplock_release(:'lease', :'owner', :gen)" | q >/dev/null
    exit 0
}
trap release INT TERM

while :; do
    gen=$(echo "SELECT generation FROM hoplock_acquire(:'lease', :'owner', '$ttl s')" | q)
    while [ -n "$gen" ]; do
        # the work: every statement behind the fence, in one transaction
        q <<'SQL' || break
BEGIN;
SELECT hoplock_fence(:'lease', :gen) \g /dev/null
INSERT INTO work_log (lease, owner, generation) VALUES (:'lease', :'owner', :gen);
COMMIT;
SQL
        sleep $((ttl / 3))
        gen=$(echo "SELECT generation FROM hoplock_renew(:'lease', :'owner', '$ttl s', :gen)" | q)
    done
    gen=
    sleep $((ttl / 3))      # a follower: try again later
done
