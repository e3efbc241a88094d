#!/usr/bin/env bash
# bench/compare.sh REV [OUT.md]: instructions per call of hoplock as built
# from git revision REV against the working tree, side by side, counted by
# valgrind's callgrind in a single-user backend (deterministic: the same
# count whatever else the machine does).  Each build runs in its own copy
# of the PostgreSQL installation, so the installed hoplock is not touched.
#
# The calls: a renewal; an acquire that begins a new term over a lapsed one
# (with its events); a bare one-row UPDATE by text key, for scale.  Each
# run (a single-user backend: a server start) first renews one lease, in
# the baseline too, so that what a run does once -- beginning the branch
# of a server start reads every value in the data -- is not spread over
# the calls: the figures are the cost of a call in a running server.
#
# HOPLOCK_COMPARE_KEEP=1 keeps the callgrind files (for callgrind_annotate).
set -eu
rev=${1:?usage: bench/compare.sh REV [OUT.md]}
out=${2:-/dev/stdout}
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/scratch.sh"

work=$(mktemp -d /tmp/hoplock-compare.XXXXXX)
[ -n "${HOPLOCK_COMPARE_KEEP:-}" ] && echo "bench/compare.sh: callgrind files kept in $work" >&2 || trap 'rm -rf "$work"' EXIT
[ "$(id -u)" -ne 0 ] || chown postgres "$work"

libdir=$("$PG_CONFIG" --pkglibdir)
sharedir=$("$PG_CONFIG" --sharedir)

# A copy of the PostgreSQL installation (it finds its files relative to
# its binaries), with hoplock built from the given tree installed in it.
install_copy() {
	local name=$1 src=$2 root="$work/$1"
	mkdir -p "$root$PGBIN" "$root$libdir" "$root$sharedir"
	cp -a "$PGBIN/." "$root$PGBIN/"
	cp -a "$libdir/." "$root$libdir/"
	cp -a "$sharedir/." "$root$sharedir/"
	rm -f "$root$libdir"/hoplock.so "$root$sharedir"/extension/hoplock*
	make -s -C "$src" PG_CONFIG="$PG_CONFIG" clean >/dev/null
	make -s -C "$src" PG_CONFIG="$PG_CONFIG" >/dev/null
	cp "$src/hoplock.so" "$root$libdir/"
	cp "$src"/hoplock.control "$root$sharedir/extension/"
	for f in "$src"/hoplock--*.sql "$src"/sql/hoplock--*.sql; do
		[ -f "$f" ] && cp "$f" "$root$sharedir/extension/"
	done
	chmod -R a+rX "$root"
}

git -C "$here" archive --format=tar --prefix=old/ "$rev" | tar -C "$work" -xf -
mkdir "$work/new"
tar -C "$here" --exclude=.git --exclude='./tmp_check*' --exclude=./results \
	--exclude=./output_iso -cf - . | tar -C "$work/new" -xf -
install_copy pg-old "$work/old"
install_copy pg-new "$work/new"

n=5000
setup() {
	cat <<SQL
CREATE EXTENSION hoplock;
CREATE TABLE bare (name text PRIMARY KEY, v timestamptz) WITH (fillfactor = 50);
INSERT INTO bare SELECT 'lease-' || i, now() FROM generate_series(1, 1000) AS i;
SELECT count(hoplock_acquire('lease-' || i, 'o', '1 day')) FROM generate_series(1, 1000) AS i;
SELECT count(hoplock_acquire('lapsed-' || i, 'o', '1 microsecond')) FROM generate_series(1, $n) AS i;
CREATE PROCEDURE warm_up() LANGUAGE plpgsql AS \$\$ BEGIN PERFORM hoplock_renew('lease-1', 'o', '1 day'); COMMIT; END \$\$;
CREATE PROCEDURE l_empty(n int) LANGUAGE plpgsql AS \$\$ BEGIN CALL warm_up(); FOR i IN 1..n LOOP COMMIT; END LOOP; END \$\$;
CREATE PROCEDURE l_renew(n int) LANGUAGE plpgsql AS \$\$ BEGIN CALL warm_up(); FOR i IN 1..n LOOP PERFORM hoplock_renew('lease-' || (i % 1000 + 1), 'o', '1 day'); COMMIT; END LOOP; END \$\$;
CREATE PROCEDURE l_acquire(n int) LANGUAGE plpgsql AS \$\$ BEGIN CALL warm_up(); FOR i IN 1..n LOOP PERFORM hoplock_acquire('lapsed-' || i, 'p', '1 day'); COMMIT; END LOOP; END \$\$;
CREATE PROCEDURE l_update(n int) LANGUAGE plpgsql AS \$\$ BEGIN CALL warm_up(); FOR i IN 1..n LOOP UPDATE bare SET v = clock_timestamp() WHERE name = 'lease-' || (i % 1000 + 1); COMMIT; END LOOP; END \$\$;
SQL
}

declare -A count
for build in old new; do
	bin="$work/pg-$build$PGBIN"
	data="$work/data-$build"
	scratch_as_owner "$bin/initdb" -D "$data" -A trust -U postgres --no-sync >/dev/null
	printf "shared_preload_libraries = 'hoplock'\nfsync = off\n" >>"$data/postgresql.conf"
	setup | scratch_as_owner "$bin/postgres" --single -D "$data" postgres >/dev/null 2>&1
	for proc in l_empty l_renew l_acquire l_update; do
		echo "CALL $proc($n);" | scratch_as_owner valgrind --tool=callgrind \
			--callgrind-out-file="$work/callgrind.$build.$proc" \
			"$bin/postgres" --single -D "$data" postgres >/dev/null 2>"$work/valgrind.$build.$proc"
		count[$build.$proc]=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$work/valgrind.$build.$proc")
	done
done

per() { echo $(( (count[$1.$2] - count[$1.l_empty]) / n )); }
{
	echo "Instructions per call, counted by callgrind in a single-user backend: $n calls in a PL/pgSQL loop, one"
	echo "COMMIT each, net of the same loop without the call; the build of $(git -C "$here" rev-parse --short "$rev") against the working tree"
	echo "($(git -C "$here" rev-parse --short HEAD)$(git -C "$here" diff --quiet || echo ', with changes')), each in its own copy of the same PostgreSQL."
	echo
	echo "| call | $(git -C "$here" rev-parse --short "$rev") | now | now / before |"
	echo "| --- | --- | --- | --- |"
	for proc in l_renew l_acquire l_update; do
		case $proc in
			l_renew) label="hoplock_renew" ;;
			l_acquire) label="hoplock_acquire, a new term over a lapsed one" ;;
			l_update) label="bare UPDATE of one row by its text key (no hoplock)" ;;
		esac
		printf '| %s | %d | %d | %.2f× |\n' "$label" "$(per old $proc)" "$(per new $proc)" \
			"$(echo "scale=4; $(per new $proc) / $(per old $proc)" | bc)"
	done
	echo
} >"$out"
