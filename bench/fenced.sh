#!/usr/bin/env bash
# bench/fenced.sh [OUT.md]: what the trigger hoplock_fenced costs a bulk
# write -- an INSERT of 10,000 rows in one statement into a table with the
# trigger, against the same insert into the same table without it --
# counted in instructions by valgrind's callgrind in a single-user backend
# (deterministic), net of starting the backend.  Part of make bench.
set -eu
out=${1:-/dev/stdout}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/scratch.sh"
. "$here/target.sh"

dir=$(mktemp -d /tmp/hoplock-fenced.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
[ "$(id -u)" -ne 0 ] || chown postgres "$dir"
scratch_as_owner "$PGBIN/initdb" -D "$dir/data" -A trust -U postgres --no-sync >/dev/null
printf "shared_preload_libraries = 'hoplock'\nfsync = off\n" >>"$dir/data/postgresql.conf"

# (single-user mode: one statement per line)
single() {
	scratch_as_owner "$PGBIN/postgres" --single -D "$dir/data" postgres
}

single >/dev/null 2>&1 <<'SQL'
CREATE EXTENSION hoplock;
CREATE TABLE plain (id int PRIMARY KEY, payload text, generation bigint);
CREATE TABLE fenced (id int PRIMARY KEY, payload text, generation bigint);
CREATE TRIGGER fenced_rows BEFORE INSERT OR UPDATE OR DELETE ON fenced FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('bulk', 'generation');
SELECT hoplock_acquire('bulk', 'leader', '1 day');
SQL

rows=10000
declare -A count
run() {
	local label=$1 sql=$2
	echo "$sql" | scratch_as_owner valgrind --tool=callgrind \
		--callgrind-out-file="$dir/callgrind.$label" \
		"$PGBIN/postgres" --single -D "$dir/data" postgres >/dev/null 2>"$dir/valgrind.$label"
	count[$label]=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$dir/valgrind.$label")
}
run empty "SELECT 1;"
# each row carries the running term's generation (the trigger checks it);
# both inserts look it up alike
gen="(SELECT generation FROM hoplock_holder('bulk')) AS h(g)"
run plain "INSERT INTO plain SELECT i, 'row ' || i, g FROM generate_series(1, $rows) AS i, $gen;"
run fenced "INSERT INTO fenced SELECT i, 'row ' || i, g FROM generate_series(1, $rows) AS i, $gen;"
# both inserted every row (a refused insert costs next to nothing)
inserted=$(echo "SELECT (SELECT count(*) FROM plain) + (SELECT count(*) FROM fenced) AS n;" | single 2>/dev/null |
	sed -n 's/.*n = "\([0-9]*\)".*/\1/p')
if [ "$inserted" != $((2 * rows)) ]; then
	echo "fenced.sh: the inserts wrote ${inserted:-no} rows, not $((2 * rows)) (KEEP=1 keeps $dir)" >&2
	exit 1
fi

plain=$(( count[plain] - count[empty] ))
fenced=$(( count[fenced] - count[empty] ))
{
	echo "An INSERT of $rows rows in one statement, instructions counted by callgrind in a single-user backend, net"
	echo "of starting it; the table has a primary key and a text column; the fenced one has the trigger."
	echo
	echo "| insert | instructions | per row | vs without the trigger |"
	echo "| --- | --- | --- | --- |"
	printf '| without the trigger | %d | %d | 1.00× |\n' "$plain" $(( plain / rows ))
	printf '| with hoplock_fenced | %d | %d | %.2f× |\n' "$fenced" $(( fenced / rows )) \
		"$(echo "scale=4; $fenced / $plain" | bc)"
	echo
} >"$out"
r=$(echo "scale=4; $fenced / $plain" | bc)
bench_target b40 "an INSERT of $rows rows through hoplock_fenced against without the trigger (instructions)" \
	"$(printf '%.2f×' "$r")" '≤ 1.2×' "$(bench_verdict "$r" le 1.2)" 'bench/fenced.sh'
