#!/usr/bin/env bash
# bench/expiry.sh [EXPIRIES] [OUT.md]: where the time of an "expired" goes,
# with 1,000 leases held and the expiry worker settled.  EXPIRIES terms
# (default 200) lapse 25 ms apart; a LISTENing client notes each expired
# event's arrival, and bench/expiry.pl splits each one's time: the worker's
# wake-up to its decision, its transaction, its commit, the delivery of the
# event as NOTIFY (the commit's WAL flush, the delivery's transaction and
# commit), the listener; beside a bare pg_notify's commit to the same
# client (the floor of the last part), and the time the worker, the
# listener's backend and the client waited for a CPU.  With fsync off (the
# cost of the work, as section 3 of bench/RESULTS.md) and on, each on a
# scratch server of its own.  Part of make bench; its fsync-off p99 is
# one of the targets (bench/target.sh).
set -eu
n=${1:-200}
out=${2:-/dev/stdout}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/scratch.sh"
. "$here/target.sh"
work=$(mktemp -d /tmp/hoplock-expiry.XXXXXX)
trap 'scratch_stop; rm -rf "$work"' EXIT

run() {
	scratch_start "fsync = $1" "track_commit_timestamp = on" "shared_buffers = '256MB'"
	scratch_psql -q -c 'CREATE EXTENSION hoplock' \
		-c "SELECT count(hoplock_acquire('held-' || i, 'o', '1 day')) FROM generate_series(1, 1000) AS i" >/dev/null
	perl "$here/expiry.pl" "$n" >"$work/$1"
	scratch_stop
}
run off
run on

# field F (3 p50, 4 p99, 5 max) of segment KEY with fsync = FS
seg() { awk -F'\t' -v k="$2" -v f="$3" '$1 == "seg" && $2 == k { print $f }' "$work/$1"; }
cell() { printf '%.2f / %.2f / %.2f' "$(seg "$1" "$2" 3)" "$(seg "$1" "$2" 4)" "$(seg "$1" "$2" 5)"; }
runq() { awk -F'\t' -v i="$2" '$1 == "runq" && $2 == i { printf "%.2f / %.2f / %.2f", $3, $4, $5 }' "$work/$1"; }
floor() { awk -F'\t' '$1 == "floor" { printf "%.2f / %.2f / %.2f", $2, $3, $4 }' "$work/$1"; }
{
	echo "\"expired\" with 1,000 leases held (the worker settled: they are in its schedule, it sleeps), $n terms"
	echo "lapsing 25 ms apart, one LISTENing client (DBD::Pg); milliseconds, p50 / p99 / max. Each event's time"
	echo "is split on this machine's one clock: the lease row's version (its clock part, minted when the worker"
	echo "decided the term had lapsed), the event's number (likewise, taken at the announcement's pre-commit), the"
	echo "announcement's commit timestamp (track_commit_timestamp), the delivery's time and commit"
	echo "(hoplock_internal.delivery, read as each event arrives), the client's arrival. The parts' p99s do not"
	echo "add up to the whole's: each is of its own. The run-queue rows are the time each process was runnable"
	echo "but waited for a CPU (/proc/PID/schedstat) between two arrivals: the machine's load, not hoplock's work;"
	echo "the worker's CPU, the time it ran between two arrivals."
	echo
	echo "| from ... to ... | fsync off | fsync on |"
	echo "| --- | --- | --- |"
	for k in total wake xact commit deliver dcommit listener; do
		case $k in
			total) label="**expires_at to the listener (the whole)**" ;;
			wake) label="expires_at to the worker's decision (its wake-up at the deadline, the mailbox, begin, locks, the row read)" ;;
			xact) label="the decision to the event numbered at the pre-commit (the row written, its history)" ;;
			commit) label="numbered to the announcement's commit record (its event row and index entry)" ;;
			deliver) label="the commit to the NOTIFY queued (the commit's WAL flush, the delivery's transaction reading the log)" ;;
			dcommit) label="queued to the delivery's commit (asynchronous)" ;;
			listener) label="the delivery's commit to the client (the listener's backend, the socket, DBD::Pg)" ;;
		esac
		echo "| $label | $(cell off $k) | $(cell on $k) |"
	done
	echo "| a bare pg_notify, its commit to the same client (the floor of the last row) | $(floor off) | $(floor on) |"
	for i in 3 0 1 2; do
		case $i in
			0) label="run-queue wait of the expiry worker" ;;
			1) label="run-queue wait of the listener's backend" ;;
			2) label="run-queue wait of the client" ;;
			3) label="the worker's CPU per event (its announcement and delivery)" ;;
		esac
		echo "| $label | $(runq off $i) | $(runq on $i) |"
	done
	echo
	for fs in off on; do
		echo "fsync $fs: $(awk -F'\t' '$1 == "note" { print $2 }' "$work/$fs")."
	done
	echo
	echo "The slowest events, fsync off, each part and each process's run-queue wait in ms:"
	echo
	echo "| | whole | to the decision | transaction | commit | delivery | its commit | listener | worker's run-queue wait | listener backend's | client's | worker's CPU |"
	echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
	awk -F'\t' '$1 == "slow" { printf "| %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13 }' "$work/off"
	echo
} >"$out"

p99=$(seg off total 4)
bench_target a21 '"expired" after expires_at, 1,000 leases held, the worker settled, p99, fsync off (its parts: "Where the time of an expired goes")' \
	"$(printf '%.2f ms (p50 %.2f; p99 of its parts: to the decision %.2f, transaction %.2f, commit %.2f, delivery %.2f, listener %.2f)' \
		"$p99" "$(seg off total 3)" "$(seg off wake 4)" "$(seg off xact 4)" "$(seg off commit 4)" \
		"$(seg off deliver 4)" "$(seg off listener 4)")" \
	'≤ 1 ms' "$(bench_verdict "$p99" le 1)" 'bench/expiry.sh'
bench_target a22 '"expired" after expires_at, as above, fsync on' \
	"$(printf '%.2f ms (p50 %.2f)' "$(seg on total 4)" "$(seg on total 3)")" '—' '—' 'bench/expiry.sh'
