#!/usr/bin/env bash
# bench/slots.sh [--quick] [--seconds S] [--rounds N] [OUT.md]: what a
# lease with slots costs when 8 clients contend for it -- acquire and
# release with slots => 8 over one name, against 8 names with N = 1, a
# client each (the same work: every acquire begins a term), and one name
# with N = 1 for scale; terms per second and CPU per term
# (bench/slots.pl).  On a scratch server of its own (fsync off: the CPU a
# term costs, not the disk's; the installed build, make install first).
# Part of make bench (shorter in make bench-quick); its ratio is one of the
# targets (bench/target.sh).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/scratch.sh"

args=()
out=/dev/stdout
while [ $# -gt 0 ]; do
	case $1 in
		--quick) args+=("$1") ;;
		--seconds | --rounds) args+=("$1" "${2:?$1 needs a value}"); shift ;;
		-*) echo "usage: bench/slots.sh [--quick] [--seconds S] [--rounds N] [OUT.md]" >&2; exit 2 ;;
		*) out=$1 ;;
	esac
	shift
done

scratch_start "fsync = off" "shared_buffers = '256MB'" "autovacuum = off"
work=$(mktemp -d /tmp/hoplock-slots.XXXXXX)
trap 'scratch_stop; rm -rf "$work"' EXIT
scratch_psql -q -c 'CREATE EXTENSION hoplock' >/dev/null
SLOTS_WORK=$work PGBENCH="$PGBIN/pgbench" perl "$here/slots.pl" "${args[@]}" >"$work/report.md"
cat "$work/report.md" >"$out"
