#!/usr/bin/env bash
# bench/handover.sh [OUT.md]: how fast leadership changes hands with the Go
# Elector on a scratch server -- a leader's fn returning (graceful, in one
# process), a leader process stopped with SIGTERM (graceful), a
# session-bound leader process killed, a TTL-bound leader process killed,
# 20 rounds each; and the graceful stop of a leader process measured to
# the follower's first committed fenced write, handed over
# (hoplock_handoff) against released (the follower's hoplock_wait takes the
# freed lease), 50 rounds of each interleaved (HOPLOCK_BENCH_ROUNDS), with
# the same two again with the stopped leader's teardown held back
# (TestProcessHandoverBench) -- as measured by the Go client's tests
# (scripts/test-go), which check each run's history too.  Part of make
# bench; its graceful p99 is a target (bench/target.sh).
set -eu
out=${1:-/dev/stdout}
here=$(cd "$(dirname "$0")/.." && pwd)
log=$(mktemp /tmp/hoplock-handover.XXXXXX)
tables=$(mktemp /tmp/hoplock-handover-tables.XXXXXX)
trap 'rm -f "$log" "$tables"' EXIT
. "$here/bench/target.sh"
HOPLOCK_BENCH_HANDOVER=1 HOPLOCK_BENCH_OUT=$tables "$here/scripts/test-go" -count=1 \
	-run 'TestShutdownHandover|TestProcessGracefulStop|TestProcessKillSessionBound|TestProcessKillTTLBound|TestProcessHandoverBench' \
	>"$log" 2>&1 || { cat "$log" >&2; exit 1; }
{
	echo "Measured by the Go client's tests on a scratch server (2 cores, a local socket):"
	echo
	# the benchmark's own figures are in its tables
	sed -n '/^== measurements/,/ passed, /p' "$log" | sed '1d;$d' |
		grep -v 'rounds of [0-9]* kinds interleaved' | sed 's/^/- /'
	echo
	echo "#### A graceful stop, to the follower's first fenced write (TestProcessHandoverBench)"
	echo
	cat "$tables"
} >"$out"
# | graceful stop, handed over | p50 | p95 | p99 | ...
p99=$(awk -F' *[|] *' '$2 == "graceful stop, handed over" { print $5 }' "$tables")
bench_target b70 'a leader process stopped (SIGTERM) to the follower'"'"'s first fenced write committed, handed over, p99 (Go Elector)' \
	"${p99:-?} ms" '≤ 5 ms' "$(bench_verdict "${p99:-999}" le 5)" 'bench/handover.sh'
