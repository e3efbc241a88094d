#!/usr/bin/env bash
# bench/slots_callgrind.sh [CALLS]: instructions per acquire + release of a
# lease with slots => 8 whose other 7 slots are held, against a lease
# without slots, counted by valgrind's callgrind in a single-user backend
# (deterministic: the same count whatever else the machine does).  Each
# loop is CALLS (default 2000) acquires and releases, each its own
# transaction, net of the same loop of empty transactions; every run is
# made after one call of each kind, as bench/callgrind.sh does.  The
# installed build (make install first); prints Markdown.  Not part of
# make bench: the contended figure is bench/slots.sh's.
set -eu
n=${1:-2000}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/scratch.sh"

dir=$(mktemp -d /tmp/hoplock-slots-callgrind.XXXXXX)
trap 'rm -rf "$dir"' EXIT
[ "$(id -u)" -ne 0 ] || chown postgres "$dir"
scratch_as_owner "$PGBIN/initdb" -D "$dir/data" -A trust -U postgres --no-sync >/dev/null
printf "shared_preload_libraries = 'hoplock'\nfsync = off\n" >>"$dir/data/postgresql.conf"

scratch_as_owner "$PGBIN/postgres" --single -D "$dir/data" postgres >/dev/null 2>&1 <<'SQL'
CREATE EXTENSION hoplock;
SELECT count(hoplock_acquire('jobs', 'o' || i, '1 day', slots => 8)) FROM generate_series(1, 7) AS i;
SELECT hoplock_acquire('own', 'x', '1 h');
SELECT hoplock_release('own', 'x');
CREATE PROCEDURE l_empty(n int) LANGUAGE plpgsql AS $$ BEGIN FOR i IN 1..n LOOP COMMIT; COMMIT; END LOOP; END $$;
CREATE PROCEDURE l_slots(n int) LANGUAGE plpgsql AS $$ BEGIN FOR i IN 1..n LOOP PERFORM hoplock_acquire('jobs', 'me', '1 h', slots => 8); COMMIT; PERFORM hoplock_release('jobs', 'me'); COMMIT; END LOOP; END $$;
CREATE PROCEDURE l_one(n int) LANGUAGE plpgsql AS $$ BEGIN FOR i IN 1..n LOOP PERFORM hoplock_acquire('own', 'me', '1 h'); COMMIT; PERFORM hoplock_release('own', 'me'); COMMIT; END LOOP; END $$;
CREATE PROCEDURE warm() LANGUAGE plpgsql AS $$ BEGIN PERFORM hoplock_acquire('jobs', 'me', '1 h', slots => 8); COMMIT; PERFORM hoplock_release('jobs', 'me'); COMMIT; PERFORM hoplock_acquire('own', 'me', '1 h'); COMMIT; PERFORM hoplock_release('own', 'me'); COMMIT; END $$;
SQL

declare -A count
for proc in l_empty l_slots l_one; do
	printf 'CALL warm();\nCALL %s(%d);\n' "$proc" "$n" | scratch_as_owner valgrind --tool=callgrind \
		--callgrind-out-file="$dir/callgrind.$proc" \
		"$PGBIN/postgres" --single -D "$dir/data" postgres >/dev/null 2>"$dir/valgrind.$proc"
	count[$proc]=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$dir/valgrind.$proc")
done
slots=$(( (count[l_slots] - count[l_empty]) / n ))
one=$(( (count[l_one] - count[l_empty]) / n ))
echo "Instructions per acquire + release (callgrind, $n of each, each call its own transaction):"
echo
echo "| lease | instructions | against no slots |"
echo "| --- | ---: | ---: |"
echo "| \`slots => 8\`, the other 7 slots held | $slots | $(awk -v a="$slots" -v b="$one" 'BEGIN { printf "%.2f×", a / b }') |"
echo "| no slots | $one | 1.00× |"
