#!/usr/bin/env bash
# bench/callgrind.sh OUT.md: instructions per call, counted by valgrind's
# callgrind in a single-user backend (deterministic: the same count whatever
# else the machine does).  Part of make bench, not of make bench-quick.
set -eu
out=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/scratch.sh"

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

n=5000
declare -A count
for proc in l_empty l_renew l_renew_text l_update; do
	echo "CALL $proc($n);" | scratch_as_owner valgrind --tool=callgrind \
		--callgrind-out-file="$dir/callgrind.$proc" \
		"$PGBIN/postgres" --single -D "$dir/data" postgres >/dev/null 2>"$dir/valgrind.$proc"
	count[$proc]=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$dir/valgrind.$proc")
done

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
} >"$out"
rm -rf "$dir"
