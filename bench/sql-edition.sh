#!/usr/bin/env bash
# bench/sql-edition.sh [OUT.md]: the cost per call of the SQL edition
# (sql-edition/) side by side with the C edition, each built from this tree
# and installed in its own copy of the PostgreSQL installation, each on a
# scratch server of its own (the C edition's with hoplock preloaded, the SQL
# edition's with nothing preloaded), one after the other, same settings.
#
# Inside the server, so that the network is not measured: a PL/pgSQL
# procedure runs one call and one COMMIT per iteration, n times.  CPU is the
# backend's own (Linux schedstat), wall is the clock's; both net of the
# same loop without the call.  min / median / max of RUNS runs.
#   acquire   a new term over a released one (with its event)
#   renew     the holder's renewal of a running term
#   fence     hoplock_fence of the running term in a transaction that
#             writes one row (a fence alone in its transaction protects
#             nothing, and the C edition refuses it): net of the bare UPDATE
#   release   the holder's release (with its event)
#   UPDATE    a bare one-row UPDATE by text key, for scale
#
#   HOPLOCK_BENCH_CALLS (2000), HOPLOCK_BENCH_RUNS (5), SCRATCH_PORT,
#   HOPLOCK_BENCH_RAW (a file to keep the raw lines in)
set -eu
out=${1:-/dev/stdout}
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/scratch.sh"
n=${HOPLOCK_BENCH_CALLS:-2000}
runs=${HOPLOCK_BENCH_RUNS:-5}
port=${SCRATCH_PORT:-$(scratch_free_port)}

work=$(mktemp -d /tmp/hoplock-sqled-bench.XXXXXX)
trap '[ -n "${HOPLOCK_BENCH_RAW:-}" ] && cp "$work/results" "$HOPLOCK_BENCH_RAW"; for e in c sql; do scratch_as_owner "$work/pg-$e$PGBIN/pg_ctl" -D "$work/data-$e" -m immediate stop >/dev/null 2>&1 || true; done; rm -rf "$work"' EXIT
[ "$(id -u)" -ne 0 ] || chown postgres "$work"
libdir=$("$PG_CONFIG" --pkglibdir)
sharedir=$("$PG_CONFIG" --sharedir)

copy_pg() {
	local root="$work/pg-$1"
	mkdir -p "$root$PGBIN" "$root$libdir" "$root$sharedir"
	cp -a "$PGBIN/." "$root$PGBIN/"
	cp -a "$libdir/." "$root$libdir/"
	cp -a "$sharedir/." "$root$sharedir/"
	rm -f "$root$libdir"/hoplock.so "$root$sharedir"/extension/hoplock[.-]*
}

# the C edition, built from this tree
mkdir "$work/src"
tar -C "$here" --exclude=.git --exclude='./tmp_check*' --exclude=./results \
	--exclude=./output_iso -cf - . | tar -C "$work/src" -xf -
copy_pg c
make -s -C "$work/src" PG_CONFIG="$PG_CONFIG" clean >/dev/null
make -s -C "$work/src" PG_CONFIG="$PG_CONFIG" >/dev/null
cp "$work/src/hoplock.so" "$work/pg-c$libdir/"
cp "$work/src"/hoplock.control "$work/src"/hoplock--*.sql "$work/pg-c$sharedir/extension/"
# the SQL edition, installed by its own Makefile into its copy
copy_pg sql
make -s -C "$work/src/sql-edition" PG_CONFIG="$work/pg-sql$PGBIN/pg_config" install >/dev/null
chmod -R a+rX "$work"

setup_sql() {
	cat <<SQL
CREATE EXTENSION hoplock;
CREATE FUNCTION cpu_ns() RETURNS bigint LANGUAGE sql AS
\$\$ SELECT split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint \$\$;
CREATE TABLE bare (name text PRIMARY KEY, v timestamptz) WITH (fillfactor = 50);
INSERT INTO bare SELECT 'lease-' || i, now() FROM generate_series(1, 1000) AS i;
SELECT count(hoplock_acquire('lease-' || i, 'o', '1 day')) FROM generate_series(1, 1000) AS i;
-- released names, one set per run: acquire begins a new term over each
SELECT count(hoplock_acquire('n-' || r || '-' || i, 'o', '1 day'))
  FROM generate_series(1, $runs) AS r, generate_series(1, $n) AS i;
SELECT count(hoplock_release('n-' || r || '-' || i, 'o'))
  FROM generate_series(1, $runs) AS r, generate_series(1, $n) AS i;
CREATE PROCEDURE l_empty(r int, n int) LANGUAGE plpgsql AS \$\$
BEGIN FOR i IN 1..n LOOP COMMIT; END LOOP; END \$\$;
CREATE PROCEDURE l_acquire(r int, n int) LANGUAGE plpgsql AS \$\$
BEGIN FOR i IN 1..n LOOP PERFORM hoplock_acquire('n-' || r || '-' || i, 'p', '1 day'); COMMIT; END LOOP; END \$\$;
CREATE PROCEDURE l_renew(r int, n int) LANGUAGE plpgsql AS \$\$
BEGIN FOR i IN 1..n LOOP PERFORM hoplock_renew('lease-' || (i % 1000 + 1), 'o', '1 day'); COMMIT; END LOOP; END \$\$;
CREATE PROCEDURE l_fence(r int, n int) LANGUAGE plpgsql AS \$\$
DECLARE g bigint := (SELECT generation FROM hoplock_holder('lease-1'));
BEGIN FOR i IN 1..n LOOP
    PERFORM hoplock_fence('lease-1', g);
    UPDATE bare SET v = clock_timestamp() WHERE name = 'lease-' || (i % 1000 + 1);
    COMMIT;
END LOOP; END \$\$;
CREATE PROCEDURE l_release(r int, n int) LANGUAGE plpgsql AS \$\$
BEGIN FOR i IN 1..n LOOP PERFORM hoplock_release('n-' || r || '-' || i, 'p'); COMMIT; END LOOP; END \$\$;
CREATE PROCEDURE l_update(r int, n int) LANGUAGE plpgsql AS \$\$
BEGIN FOR i IN 1..n LOOP UPDATE bare SET v = clock_timestamp() WHERE name = 'lease-' || (i % 1000 + 1); COMMIT; END LOOP; END \$\$;
SQL
}

# one line per run and loop: edition proc run cpu_ns wall_ns
measure() {
	local e=$1 proc r
	for r in $(seq 1 "$runs"); do
		for proc in l_empty l_acquire l_renew l_fence l_release l_update; do
			scratch_as_owner "$work/pg-$e$PGBIN/psql" -X -q -At -h /tmp -p "$port" -U postgres <<SQL
SELECT cpu_ns() AS c0, (extract(epoch FROM clock_timestamp()) * 1e9)::bigint AS t0 \gset
CALL $proc($r, $n);
SELECT '$e $proc $r ' || (cpu_ns() - :c0) || ' ' || ((extract(epoch FROM clock_timestamp()) * 1e9)::bigint - :t0);
SQL
		done
	done
}

results="$work/results"
: >"$results"
for e in c sql; do
	data="$work/data-$e"
	scratch_as_owner "$work/pg-$e$PGBIN/initdb" -D "$data" -A trust -U postgres --no-sync >/dev/null
	{
		echo "port = $port"
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '/tmp'"
		echo "fsync = off"
		echo "shared_buffers = 256MB"
		[ "$e" = c ] && echo "shared_preload_libraries = 'hoplock'"
	} >>"$data/postgresql.conf"
	scratch_as_owner "$work/pg-$e$PGBIN/pg_ctl" -D "$data" -l "$work/server-$e.log" -w start >/dev/null
	setup_sql | scratch_as_owner "$work/pg-$e$PGBIN/psql" -X -q -h /tmp -p "$port" -U postgres >/dev/null
	measure "$e" >>"$results"
	scratch_as_owner "$work/pg-$e$PGBIN/pg_ctl" -D "$data" -m fast -w stop >/dev/null
done

# min / median / max per call, net of the empty loop of the same run
stats() { # edition proc field(4 cpu, 5 wall) [baseline proc]
	awk -v e="$1" -v p="$2" -v f="$3" -v n="$n" -v b="${4:-l_empty}" '
		$1 == e && $2 == b { empty[$3] = $f }
		$1 == e && $2 == p { v[$3] = $f }
		END { for (r in v) printf "%.3f\n", (v[r] - empty[r]) / n / 1000 }' "$results" |
		sort -n | awk '{ x[NR] = $1 } END { printf "%.1f / %.1f / %.1f", x[1], x[int((NR + 1) / 2)], x[NR] }'
}
median() { stats "$@" | awk -F' / ' '{ print $2 }'; }
{
	echo "Cost per call, SQL edition against C edition, both built from $(git -C "$here" rev-parse --short HEAD)$(git -C "$here" diff --quiet || echo ' (with changes)'),"
	echo "$("$PGBIN/postgres" --version), fsync = off, shared_buffers = 256MB, each edition on its own server;"
	echo "a PL/pgSQL loop of $n calls, one COMMIT each, net of the empty loop; min / median / max of $runs runs."
	echo
	echo "| call | C edition CPU µs | SQL edition CPU µs | C edition wall µs | SQL edition wall µs | SQL / C (CPU medians) |"
	echo "| --- | --- | --- | --- | --- | --- |"
	for proc in l_acquire l_renew l_fence l_release l_update; do
		case $proc in
			l_acquire) label="hoplock_acquire (a new term over a released one, with its event)" ;;
			l_renew) label="hoplock_renew" ;;
			l_fence) label="hoplock_fence (net of the one-row UPDATE it protects)" ;;
			l_release) label="hoplock_release (with its event)" ;;
			l_update) label="bare UPDATE of one row by text key (no hoplock)" ;;
		esac
		base=l_empty
		[ "$proc" = l_fence ] && base=l_update
		printf '| %s | %s | %s | %s | %s | %.1f× |\n' "$label" \
			"$(stats c $proc 4 $base)" "$(stats sql $proc 4 $base)" \
			"$(stats c $proc 5 $base)" "$(stats sql $proc 5 $base)" \
			"$(echo "scale=4; $(median sql $proc 4 $base) / $(median c $proc 4 $base)" | bc)"
	done
	echo
} >"$out"
