#!/usr/bin/env bash
# bench/fair_order.sh [HANDOVERS] [OUT.md]: 8 candidates of one lease, each
# in a loop -- hoplock_wait, record the term, release, wait again -- for
# HANDOVERS terms in all (default 10,000), while a ninth session tries a
# plain hoplock_acquire of the lease over and over.  A candidate that
# releases waits again behind the seven still waiting, so in fair order
# the terms go round: each owner's term is 8 terms after its last.
# Reports each candidate's share of the terms, the order violations
# (terms not 8 after the owner's last) and how many plain acquires took
# the lease (none may: a candidate always waits).  Part of make bench.
set -eu
handovers=${1:-10000}
out=${2:-/dev/stdout}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/scratch.sh"

scratch_start "fsync = off" "synchronous_commit = off"
trap scratch_stop EXIT
scratch_psql -q -c 'CREATE EXTENSION hoplock' \
	-c 'CREATE TABLE served (n bigserial PRIMARY KEY, owner text NOT NULL, generation bigint NOT NULL)' \
	-c 'CREATE TABLE plain (tries bigint, taken bigint)' \
	-c 'INSERT INTO plain VALUES (0, 0)'

per=$(( handovers / 8 ))
pids=()
started=$(date +%s.%N)
for i in 1 2 3 4 5 6 7 8; do
	scratch_psql -q -c "DO \$\$
DECLARE
	g bigint;
BEGIN
	FOR k IN 1..$per LOOP
		SELECT generation INTO g FROM hoplock_wait('fair', 'c$i', '1 min', '1 min');
		IF g IS NULL THEN
			RAISE EXCEPTION 'c$i: no term within a minute';
		END IF;
		INSERT INTO served (owner, generation) VALUES ('c$i', g);
		COMMIT;
		PERFORM hoplock_release('fair', 'c$i', g);
		COMMIT;
	END LOOP;
END \$\$" &
	pids+=($!)
	sleep 0.05
done
# the plain acquirer, until the candidates are done
scratch_psql -q -c "DO \$\$
DECLARE
	t bigint := 0;
	won bigint := 0;
BEGIN
	WHILE (SELECT count(*) FROM served) < $per * 8 LOOP
		t := t + 1;
		IF hoplock_acquire('fair', 'plain', '1 min') IS NOT NULL THEN
			won := won + 1;
			PERFORM hoplock_release('fair', 'plain');
		END IF;
		COMMIT;
		PERFORM pg_sleep(0.001);
	END LOOP;
	UPDATE plain SET tries = t, taken = won;
END \$\$" &
plainpid=$!
for p in "${pids[@]}"; do wait "$p"; done
wait "$plainpid"
ended=$(date +%s.%N)

{
	echo "8 candidates of one lease, $((per * 8)) terms, $(awk -v a="$started" -v b="$ended" 'BEGIN { printf "%.1f", b - a }') s:"
	echo
	scratch_psql -AtqX -c "SELECT 'terms per candidate: ' || string_agg(owner || ' ' || c, ', ' ORDER BY owner)
	  FROM (SELECT owner, count(*) AS c FROM served GROUP BY owner) s"
	scratch_psql -AtqX -c "SELECT 'order violations (a term not 8 after its owner''s last, after the first 8): ' || count(*)
	  FROM (SELECT n, owner, lag(owner, 8) OVER (ORDER BY n) AS before FROM served) s
	 WHERE before IS NOT NULL AND before <> owner"
	scratch_psql -AtqX -c "SELECT 'terms out of generation order: ' || count(*)
	  FROM (SELECT generation, lag(generation) OVER (ORDER BY n) AS prev FROM served) s
	 WHERE prev IS NOT NULL AND generation <= prev"
	scratch_psql -AtqX -c "SELECT 'plain acquires: ' || tries || ', of which took the lease: ' || taken FROM plain"
} >"$out"
