#!/usr/bin/env bash
# bench/forget.sh [NAMES] [OUT.md]: a million short-lived names (one per
# job, as "report-2026-12-02"), each acquired and released, in waves; the
# expiry worker forgets them after hoplock.released_retention (1 s here).
# Reports the lease table's size after each wave (after the worker forgot
# the wave and a VACUUM, as autovacuum would), and checks that every name
# that came back got a greater generation than it ever had.  Part of make
# bench.
set -eu
names=${1:-1000000}
out=${2:-/dev/stdout}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/scratch.sh"
. "$here/target.sh"

scratch_start "hoplock.released_retention = 1" "fsync = off" \
	"synchronous_commit = off" "autovacuum = off"
trap scratch_stop EXIT
scratch_psql -q -c 'CREATE EXTENSION hoplock' \
	-c 'CREATE TABLE grants (name text NOT NULL, wave int NOT NULL, generation bigint NOT NULL)'

wave=$((names / 4))
batch=10000
sizes=()
bytes=()
started=$(date +%s)
for w in 1 2 3 4; do
	# waves 1 and 3 use new names; 2 and 4 bring back the names of the wave
	# before, forgotten by then
	base=$(( (w - 1) / 2 * wave ))
	for ((from = base + 1; from <= base + wave; from += batch)); do
		to=$((from + batch - 1))
		[ "$to" -le $((base + wave)) ] || to=$((base + wave))
		scratch_psql -q -At -v ON_ERROR_STOP=1 <<SQL >/dev/null
WITH granted AS (
    SELECT l.name, l.generation
      FROM generate_series($from, $to) AS i,
           LATERAL hoplock_acquire('job-' || i, 'worker', '1 h') AS l)
INSERT INTO grants SELECT name, $w, generation FROM granted;
SELECT count(*) FROM generate_series($from, $to) AS i
 WHERE NOT hoplock_release('job-' || i, 'worker');
SQL
	done
	until [ "$(scratch_psql -At -c 'SELECT count(*) FROM hoplock_internal.lease')" = 0 ]; do
		sleep 1
	done
	scratch_psql -q -c 'VACUUM hoplock_internal.lease'
	sizes+=("$(scratch_psql -At -c "SELECT pg_size_pretty(pg_total_relation_size('hoplock_internal.lease'))")")
	bytes+=("$(scratch_psql -At -c "SELECT pg_total_relation_size('hoplock_internal.lease')")")
done
elapsed=$(( $(date +%s) - started ))
granted=$(scratch_psql -At -c 'SELECT count(*) FROM grants')
scratch_psql -q -c 'CREATE INDEX ON grants (name, wave)'
bad=$(scratch_psql -At -c 'SELECT count(*) FROM grants AS a JOIN grants AS b USING (name)
                           WHERE b.wave > a.wave AND b.generation <= a.generation')
history=$(scratch_psql -At -c 'SELECT count(*) FROM hoplock_internal.history')

{
	echo "$names short-lived names in 4 waves of $wave (each acquired and released;"
	echo "waves 2 and 4 bring back the names of waves 1 and 3 after they were forgotten),"
	echo "hoplock.released_retention = 1 s, a VACUUM after each wave; $elapsed s in all."
	echo
	echo "| after wave | 1 | 2 | 3 | 4 |"
	echo "| --- | --- | --- | --- | --- |"
	echo "| lease table with its index, all names forgotten | ${sizes[0]} | ${sizes[1]} | ${sizes[2]} | ${sizes[3]} |"
	echo
	echo "Grants: $granted. Names that came back without a greater generation: $bad. History rows left: $history (hoplock.history_size 10,000)."
} >"$out"
# steady: the names that came back (wave 4) took no more room than wave 2's
r=$(echo "scale=4; ${bytes[3]} / ${bytes[1]}" | bc)
ok=$(bench_verdict "$r" le 1.05)
[ "$bad" -eq 0 ] || ok=MISSED
bench_target a54 "$names short-lived names in 4 waves, forgotten: the lease table after waves 2 and 4" \
	"${sizes[1]}, ${sizes[3]} ($(printf '%.2f×' "$r")); generations repeated or lower: $bad" \
	'steady (≤ 1.05×), none' "$ok" 'bench/forget.sh'
[ "$bad" -eq 0 ]
