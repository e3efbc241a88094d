#!/usr/bin/env bash
# bench/fair_order.sh [HANDOVERS] [OUT.md]: 8 candidates of one lease, each
# in a loop -- hoplock_wait, record the term, release, wait again -- for
# HANDOVERS terms in all (default 10,000), while a ninth session tries a
# plain hoplock_acquire of the lease over and over, and a tenth records
# every candidate it sees in hoplock_candidates, with the moment it
# entered the queue (waiting_since, read under the queue's lock).  Each
# candidate notes when it got its term and when it let go (the clock
# just before the release, which frees the lease at commit).  A term
# breaks the order if a candidate that entered the queue before the
# winner did, and before the term before was let go, was served later.
# Each term lasts 2 ms, as a term's work, so that the recorder sees every
# entry.  Reports each candidate's share of the terms, those violations,
# the terms whose entry the recorder missed, and how many plain acquires
# took the lease (none may: a candidate always waits).  Part of make
# bench (bench/target.sh: none of those may happen).
set -eu
handovers=${1:-10000}
out=${2:-/dev/stdout}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/scratch.sh"
. "$here/target.sh"

scratch_start "fsync = off" "synchronous_commit = off"
work_out=$(mktemp /tmp/hoplock-fair.XXXXXX)
trap 'scratch_stop; rm -f "$work_out"' EXIT
scratch_psql -q -c 'CREATE EXTENSION hoplock' \
	-c 'CREATE TABLE served (n bigserial PRIMARY KEY, owner text NOT NULL, generation bigint NOT NULL, got_at timestamptz NOT NULL, released_at timestamptz)' \
	-c 'CREATE TABLE seen (owner text, since timestamptz, PRIMARY KEY (owner, since))' \
	-c 'CREATE TABLE plain (tries bigint, taken bigint)' \
	-c 'INSERT INTO plain VALUES (0, 0)' \
	-c "SELECT hoplock_acquire('fair', 'starter', '1 h')"

per=$(( handovers / 8 ))
pids=()
started=$(date +%s.%N)
for i in 1 2 3 4 5 6 7 8; do
	scratch_psql -q -c "DO \$\$
DECLARE
	g bigint;
	term bigint;
BEGIN
	FOR k IN 1..$per LOOP
		SELECT generation INTO g FROM hoplock_wait('fair', 'c$i', '1 min', '1 min');
		IF g IS NULL THEN
			RAISE EXCEPTION 'c$i: no term within a minute';
		END IF;
		INSERT INTO served (owner, generation, got_at) VALUES ('c$i', g, clock_timestamp())
		RETURNING n INTO term;
		COMMIT;
		-- a term's work: time enough for the last holder to ask again
		PERFORM pg_sleep(0.002);
		-- (the lease is freed at the commit below: whoever asked before
		-- this moment waited for it)
		UPDATE served SET released_at = clock_timestamp() WHERE n = term;
		PERFORM hoplock_release('fair', 'c$i', g);
		COMMIT;
	END LOOP;
END \$\$" &
	pids+=($!)
done
# all 8 wait before the first term
until [ "$(scratch_psql -AtqX -c 'SELECT count(*) FROM hoplock_candidates')" = 8 ]; do
	sleep 0.05
done
scratch_psql -q -c "INSERT INTO seen SELECT owner, waiting_since FROM hoplock_candidates" \
	-c "SELECT hoplock_release('fair', 'starter')"
# the recorder, until the candidates are done
scratch_psql -q -c "DO \$\$
BEGIN
	WHILE (SELECT count(*) FROM served) < $per * 8 LOOP
		INSERT INTO seen SELECT owner, waiting_since FROM hoplock_candidates
		ON CONFLICT DO NOTHING;
		COMMIT;
		PERFORM pg_sleep(0.0002);
	END LOOP;
END \$\$" &
recorderpid=$!
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
wait "$recorderpid"
ended=$(date +%s.%N)

{
	echo "8 candidates of one lease, $((per * 8)) terms, $(awk -v a="$started" -v b="$ended" 'BEGIN { printf "%.1f", b - a }') s:"
	echo
	scratch_psql -AtqX -c "SELECT 'terms per candidate: ' || string_agg(owner || ' ' || c, ', ' ORDER BY owner)
	  FROM (SELECT owner, count(*) AS c FROM served GROUP BY owner) s"
	scratch_psql -AtqX -c "
	WITH entries AS (
	    SELECT s.n, s.released_at,
	           (SELECT max(e.since) FROM seen e
	             WHERE e.owner = s.owner AND e.since <= s.got_at) AS since
	      FROM served s),
	checked AS (
	    SELECT n, since, lag(released_at) OVER (ORDER BY n) AS last_release,
	           min(since) OVER (ORDER BY n DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS first_later
	      FROM entries)
	SELECT 'order violations (a candidate that entered the queue before the winner, and before the last release, served later): '
	       || count(*) FILTER (WHERE first_later < least(since, last_release))
	       || '; terms whose entry the recorder missed: '
	       || count(*) FILTER (WHERE since IS NULL OR since < (SELECT max(got_at) FROM served p WHERE p.n < checked.n AND p.owner = (SELECT owner FROM served WHERE n = checked.n)))
	  FROM checked"
	scratch_psql -AtqX -c "SELECT 'terms out of generation order: ' || count(*)
	  FROM (SELECT generation, lag(generation) OVER (ORDER BY n) AS prev FROM served) s
	 WHERE prev IS NOT NULL AND generation <= prev"
	scratch_psql -AtqX -c "SELECT 'plain acquires: ' || tries || ', of which took the lease: ' || taken FROM plain"
} >"$work_out"
cat "$work_out" >"$out"
# order violations, terms out of generation order, plain acquires that took it
bad=$(sed -n -e 's/^order violations[^:]*: \([0-9]*\);.*/\1/p' -e 's/^terms out of generation order: \([0-9]*\)/\1/p' \
	-e 's/^plain acquires: .* took the lease: \([0-9]*\)/\1/p' "$work_out" | awk '{ s += $1; n++ } END { print n == 3 ? s : -1 }')
bench_target b60 "8 candidates of one lease, $((per * 8)) terms: served out of order, out of generation order, taken by a plain acquire" \
	"$bad" '0' "$([ "$bad" = 0 ] && echo met || echo MISSED)" 'bench/fair_order.sh'
