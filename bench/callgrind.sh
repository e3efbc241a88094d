#!/usr/bin/env bash
# bench/callgrind.sh OUT.md: instructions per call, counted by valgrind's
# callgrind in a single-user backend (deterministic: the same count whatever
# else the machine does).  Part of make bench, not of make bench-quick.
# Two tables: renew against a bare UPDATE; and acquire, renew and release
# against the PL/pgSQL implementation, with bench/cost.sql's loops (no
# worker runs in a single-user backend, so an acquire over a lapsed term
# announces its expiry itself, as in bench/bench.pl, which keeps the
# worker out of those terms).
set -eu
out=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/scratch.sh"
. "$here/target.sh"

dir=$(mktemp -d /tmp/hoplock-callgrind.XXXXXX)
[ "$(id -u)" -ne 0 ] || chown postgres "$dir"
scratch_as_owner "$PGBIN/initdb" -D "$dir/data" -A trust -U postgres --no-sync >/dev/null
printf "shared_preload_libraries = 'hoplock'\nfsync = off\n" >>"$dir/data/postgresql.conf"

single() {
	scratch_as_owner "$PGBIN/postgres" --single -D "$dir/data" postgres
}

cat >"$dir/setup.sql" <<'SQL'
CREATE EXTENSION hoplock;
CREATE TABLE bare (name text PRIMARY KEY, v timestamptz) WITH (fillfactor = 50);
INSERT INTO bare SELECT 'lease-' || i, now() FROM generate_series(1, 1000) AS i;
SELECT count(hoplock_acquire('lease-' || i, 'o', '1 day')) FROM generate_series(1, 1000) AS i;
CREATE PROCEDURE l_empty(n int) LANGUAGE plpgsql AS $$ BEGIN FOR i IN 1..n LOOP COMMIT; END LOOP; END $$;
CREATE PROCEDURE l_renew(n int) LANGUAGE plpgsql AS $$ BEGIN FOR i IN 1..n LOOP PERFORM hoplock_renew('lease-' || (i % 1000 + 1), 'o', '1 day'); COMMIT; END LOOP; END $$;
CREATE PROCEDURE l_renew_text(n int) LANGUAGE plpgsql AS $$ BEGIN FOR i IN 1..n LOOP PERFORM hoplock_renew('lease-' || (i % 1000 + 1), 'o', '1 day')::text; COMMIT; END LOOP; END $$;
CREATE PROCEDURE l_update(n int) LANGUAGE plpgsql AS $$ BEGIN FOR i IN 1..n LOOP UPDATE bare SET v = clock_timestamp() WHERE name = 'lease-' || (i % 1000 + 1); COMMIT; END LOOP; END $$;
SQL
single <"$dir/setup.sql" >/dev/null 2>&1

# bench/cost.sql and the PL/pgSQL implementation, fed to a single-user
# backend in its -j form: a statement ends with a semicolon followed by an
# empty line, so empty lines go, and one follows each statement's end
# outside dollar quotes.
nterms=5000
{
	cat "$here/plpgsql_lease.sql" "$here/cost.sql"
	cat <<SQL
CALL setup_hoplock($nterms);
CALL setup_plpg($nterms);
CREATE PROCEDURE warm() LANGUAGE plpgsql AS \$\$ BEGIN PERFORM hoplock_renew('held', 'holder', '1 h'); PERFORM plpg.renew('held', 'holder', '1 h'); COMMIT; END \$\$;
SQL
} | awk '/^[ \t]*$/ || /^--/ { next }
	{ print; n = gsub(/\$\$/, "&"); if (n % 2) inq = !inq; if (!inq && $0 ~ /;[ \t]*$/) print "" }' >"$dir/cost.sql"
scratch_as_owner "$PGBIN/postgres" --single -j -D "$dir/data" postgres <"$dir/cost.sql" >"$dir/cost.out" 2>&1
if grep -q ERROR "$dir/cost.out"; then
	grep ERROR "$dir/cost.out" >&2
	exit 1
fi

# each run (a server start) after one call of each kind, so that what a
# backend does once -- hoplock's first write after a server start reads
# every value in the data -- is not spread over the calls: the figures are
# the cost of a call in a running server (as in bench/compare.sh)
n=5000
declare -A count
for proc in l_empty l_renew l_renew_text l_update; do
	printf 'CALL warm();\nCALL %s(%d);\n' "$proc" "$n" | scratch_as_owner valgrind --tool=callgrind \
		--callgrind-out-file="$dir/callgrind.$proc" \
		"$PGBIN/postgres" --single -D "$dir/data" postgres >/dev/null 2>"$dir/valgrind.$proc"
	count[$proc]=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$dir/valgrind.$proc")
done

# (after the same first calls)
for proc in empty hoplock_acquire plpg_acquire hoplock_renew plpg_renew hoplock_release plpg_release; do
	printf 'CALL warm();\nCALL cost_%s(%d);\n' "$proc" "$nterms" | scratch_as_owner valgrind --tool=callgrind \
		--callgrind-out-file="$dir/callgrind.cost_$proc" \
		"$PGBIN/postgres" --single -D "$dir/data" postgres >/dev/null 2>"$dir/valgrind.cost_$proc"
	count[cost_$proc]=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$dir/valgrind.cost_$proc")
done
cost() { echo $(( (count[cost_$1] - count[cost_empty]) / nterms )); }

per() { echo $(( (count[$1] - count[l_empty]) / n )); }
{
	echo "Instructions per call, counted by callgrind in a single-user backend: $n calls in a PL/pgSQL loop, one"
	echo "COMMIT each, net of the same loop without the call; on 1,000 leases (rows) by text name."
	echo
	echo "| call | instructions per call | vs UPDATE |"
	echo "| --- | --- | --- |"
	for proc in l_renew l_renew_text l_update; do
		label=$proc
		case $proc in
			l_renew) label="hoplock_renew" ;;
			l_renew_text) label="hoplock_renew, its row formatted as text (what a client receives)" ;;
			l_update) label="bare UPDATE of one row by its text key" ;;
		esac
		printf '| %s | %d | %.2f× |\n' "$label" "$(per $proc)" \
			"$(echo "scale=4; $(per $proc) / $(per l_update)" | bc)"
	done
	echo
	echo "And against the PL/pgSQL implementation (bench/plpgsql_lease.sql), with bench/cost.sql's loops: $nterms calls,"
	echo "acquire over as many lapsed terms whose expiry nobody announced yet, release of as many held terms."
	echo
	echo "| call | hoplock | PL/pgSQL | hoplock / PL/pgSQL |"
	echo "| --- | --- | --- | --- |"
	for op in acquire renew release; do
		printf '| %s | %d | %d | %.2f× |\n' "$op" "$(cost hoplock_$op)" "$(cost plpg_$op)" \
			"$(echo "scale=4; $(cost hoplock_$op) / $(cost plpg_$op)" | bc)"
	done
	echo
} >"$out"
r=$(echo "scale=4; $(cost hoplock_acquire) / $(cost plpg_acquire)" | bc)
bench_target a12i 'acquire against the PL/pgSQL acquire (instructions, callgrind)' \
	"$(printf '%.2f× (%d against %d)' "$r" "$(cost hoplock_acquire)" "$(cost plpg_acquire)")" '≤ 0.5×' \
	"$(bench_verdict "$r" le 0.5)" 'bench/callgrind.sh'
r=$(echo "scale=4; $(cost hoplock_renew) / $(cost plpg_renew)" | bc)
bench_target a10i 'renew against the PL/pgSQL renew (instructions, callgrind)' \
	"$(printf '%.2f× (%d against %d)' "$r" "$(cost hoplock_renew)" "$(cost plpg_renew)")" '≤ 0.5×' \
	"$(bench_verdict "$r" le 0.5)" 'bench/callgrind.sh'
r=$(echo "scale=4; $(per l_renew_text) / $(per l_update)" | bc)
bench_target a13 'renew, its row formatted as a client receives it, against a bare one-row UPDATE (instructions, callgrind)' \
	"$(printf '%.2f× (%d against %d)' "$r" "$(per l_renew_text)" "$(per l_update)")" '≤ 1.0×' \
	"$(bench_verdict "$r" le 1.0)" 'bench/callgrind.sh'
rm -rf "$dir"
