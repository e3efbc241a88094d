#!/usr/bin/env bash
# bench/handover.sh [OUT.md]: how fast leadership changes hands with the Go
# Elector on a scratch server -- a leader's fn returning (graceful, in one
# process), a leader process stopped with SIGTERM (graceful), a
# session-bound leader process killed, a TTL-bound leader process killed,
# 20 rounds each -- as measured by the Go client's tests (scripts/test-go),
# which check each run's history too.  Part of make bench.
set -eu
out=${1:-/dev/stdout}
here=$(cd "$(dirname "$0")/.." && pwd)
log=$(mktemp /tmp/hoplock-handover.XXXXXX)
trap 'rm -f "$log"' EXIT
"$here/scripts/test-go" -count=1 \
	-run 'TestShutdownHandover|TestProcessGracefulStop|TestProcessKillSessionBound|TestProcessKillTTLBound' \
	>"$log" 2>&1 || { cat "$log" >&2; exit 1; }
{
	echo "Measured by the Go client's tests on a scratch server (2 cores, a local socket):"
	echo
	sed -n '/^== measurements/,/ passed, /p' "$log" | sed '1d;$d' | sed 's/^/- /'
} >"$out"
