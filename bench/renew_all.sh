#!/usr/bin/env bash
# bench/renew_all.sh [OUT.md]: what hoplock_renew_all costs against
# hoplock_renew, side by side in one run -- 10,000 terms renewed by one
# hoplock_renew_all call against 10,000 hoplock_renew calls (each its own
# statement and transaction, as a client renewing them one by one sends
# them), and one term renewed through hoplock_renew_all against
# hoplock_renew (1,000 calls of each), every call as
# "SELECT count(generation) FROM f(...)".  CPU as instructions counted by
# valgrind's callgrind in a single-user backend (deterministic), net of
# starting the backend; WAL as the bytes between the insert positions
# before and after, without full-page images (full_page_writes = off:
# they come once per page and checkpoint, to both).  Also the first call of an owner, which attaches its
# 10,000 terms to the keepalive (a write each, once).  Part of make bench;
# its ratios are targets (bench/target.sh).
set -eu
out=${1:-/dev/stdout}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/scratch.sh"
. "$here/target.sh"

terms=${TERMS:-10000}
calls=${CALLS:-1000}
# other owners' names, so that the table holds 100,000 (the first call of
# an owner scans it)
filler=${FILLER:-69998}
dir=$(mktemp -d /tmp/hoplock-renew-all.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
[ "$(id -u)" -ne 0 ] || chown postgres "$dir"
scratch_as_owner "$PGBIN/initdb" -D "$dir/data" -A trust -U postgres --no-sync >/dev/null
printf "shared_preload_libraries = 'hoplock'\nfsync = off\nfull_page_writes = off\n" >>"$dir/data/postgresql.conf"

# (single-user mode: one statement per line)
single() {
	scratch_as_owner "$PGBIN/postgres" --single -D "$dir/data" postgres
}

# owners: a (renewed one by one), b (renew_all, attached), e (renew_all,
# first call: it scans the table), c (one term, renew_all), d (one term,
# hoplock_renew); z0..z99 (the rest of the 100,000 names)
{
	echo "CREATE EXTENSION hoplock;"
	for o in a b e; do
		echo "SELECT count(hoplock_acquire('$o' || i, '$o', '1 day')) FROM generate_series(1, $terms) AS i;"
	done
	echo "SELECT count(hoplock_acquire('z' || i, 'z' || (i % 100), '1 day')) FROM generate_series(1, $filler) AS i;"
	echo "SELECT hoplock_acquire('c1', 'c', '1 day');"
	echo "SELECT hoplock_acquire('d1', 'd', '1 day');"
	# attached, and renewed once more (the next reads prune nothing)
	for o in b c; do
		echo "SELECT count(*) FROM hoplock_renew_all('$o', '1 day');"
		echo "VACUUM hoplock_internal.lease;"
		echo "SELECT count(*) FROM hoplock_renew_all('$o', '1 day');"
	done
	echo "VACUUM hoplock_internal.lease;"
	echo "VACUUM hoplock_internal.keepalive;"
	echo "CHECKPOINT;"
} | single >/dev/null 2>&1

lsn='SELECT pg_current_wal_insert_lsn() AS lsn;'
declare -A count wal
lsn_bytes() { echo $(( 0x${1%/*} * 4294967296 + 0x${1#*/} )); }
# run LABEL <statements: one single-user backend under callgrind (not in
# a pipeline: it sets count and wal here)
run() {
	local label=$1 file=$dir/$1.sql
	{
		echo "$lsn"
		cat
		echo "$lsn"
	} >"$file"
	scratch_as_owner valgrind --tool=callgrind \
		--callgrind-out-file="$dir/callgrind.$label" \
		"$PGBIN/postgres" --single -D "$dir/data" postgres \
		<"$file" >"$dir/out.$label" 2>"$dir/valgrind.$label"
	count[$label]=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$dir/valgrind.$label")
	local lsns
	lsns=$(sed -n 's/.*lsn = "\([0-9A-F/]*\)".*/\1/p' "$dir/out.$label")
	wal[$label]=$(( $(lsn_bytes "$(echo "$lsns" | tail -n 1)") - $(lsn_bytes "$(echo "$lsns" | head -n 1)") ))
}
renew_all() { echo "SELECT count(generation) FROM hoplock_renew_all('$1', '1 day');"; }
renew() { echo "SELECT count(generation) FROM hoplock_renew('$1', '$2', '1 day');"; }
seq 1 "$terms" | while read -r i; do renew "a$i" a; done >"$dir/singles.in"
for i in $(seq 1 "$calls"); do renew_all c; done >"$dir/one_all.in"
for i in $(seq 1 "$calls"); do renew d1 d; done >"$dir/one_renew.in"
run empty </dev/null
run singles <"$dir/singles.in"
run all < <(renew_all b)
run attach < <(renew_all e)
run one_all <"$dir/one_all.in"
run one_renew <"$dir/one_renew.in"

# every call renewed what it should have
renewed() { grep -c "count = \"$2\"" "$dir/out.$1" || true; }
[ "$(renewed singles 1)" -eq "$terms" ] && [ "$(renewed all "$terms")" -eq 1 ] &&
	[ "$(renewed attach "$terms")" -eq 1 ] && [ "$(renewed one_all 1)" -eq "$calls" ] &&
	[ "$(renewed one_renew 1)" -eq "$calls" ] || {
	echo "renew_all.sh: a call did not renew what it should have (KEEP=1 keeps $dir)" >&2
	exit 1
}

net() { echo $(( count[$1] - count[empty] )); }
netwal() { echo $(( wal[$1] - wal[empty] )); }
ratio() { echo "scale=4; $1 / $2" | bc | sed 's/^\./0./'; }
singles=$(net singles) all=$(net all) attach=$(net attach)
one_all=$(net one_all) one_renew=$(net one_renew)
wsingles=$(netwal singles) wall=$(netwal all) wattach=$(netwal attach)
wone_all=$(netwal one_all) wone_renew=$(netwal one_renew)
{
	echo "$terms terms of one owner renewed, in a table of $(( 3 * terms + filler + 2 )) names; instructions counted by callgrind in a single-user backend"
	echo "(net of starting it), WAL bytes between the insert positions before and after (no full-page images);"
	echo "each call \`SELECT count(generation) FROM f(...)\`, a statement and transaction each; fsync off."
	echo
	echo "| renewal of $terms terms | instructions | WAL bytes | instructions vs $terms renews | WAL vs $terms renews |"
	echo "| --- | --- | --- | --- | --- |"
	printf '| %d hoplock_renew calls, a statement each | %d | %d | 1.00× | 1.00× |\n' "$terms" "$singles" "$wsingles"
	printf '| one hoplock_renew_all (terms attached) | %d | %d | %.4f× | %.4f× |\n' "$all" "$wall" \
		"$(ratio "$all" "$singles")" "$(ratio "$wall" "$wsingles")"
	printf '| an owner'"'"'s first hoplock_renew_all (attaches each term) | %d | %d | %.4f× | %.4f× |\n' "$attach" "$wattach" \
		"$(ratio "$attach" "$singles")" "$(ratio "$wattach" "$wsingles")"
	echo
	echo "One term, $calls calls of each, a statement each:"
	echo
	echo "| call | instructions per call | WAL bytes per call | vs hoplock_renew |"
	echo "| --- | --- | --- | --- |"
	printf '| hoplock_renew | %d | %d | 1.00× |\n' $(( one_renew / calls )) $(( wone_renew / calls ))
	printf '| hoplock_renew_all, one term attached | %d | %d | %.2f× (WAL %.2f×) |\n' \
		$(( one_all / calls )) $(( wone_all / calls )) \
		"$(ratio "$one_all" "$one_renew")" "$(ratio "$wone_all" "$wone_renew")"
	echo
} >"$out"

r_all=$(ratio "$all" "$singles") w_all=$(ratio "$wall" "$wsingles") r_one=$(ratio "$one_all" "$one_renew")
ok=met
[ "$(bench_verdict "$r_all" le 0.1)" = met ] && [ "$(bench_verdict "$w_all" le 0.1)" = met ] || ok=MISSED
bench_target a30 "hoplock_renew_all of $terms attached terms against $terms hoplock_renew calls (instructions; WAL)" \
	"$(printf '%.4f×; WAL %.4f×' "$r_all" "$w_all")" '≤ 0.1×' "$ok" 'bench/renew_all.sh'
bench_target b30 'hoplock_renew_all of one term against hoplock_renew (instructions)' \
	"$(printf '%.2f×' "$r_one")" '≤ 1.2×' "$(bench_verdict "$r_one" le 1.2)" 'bench/renew_all.sh'
