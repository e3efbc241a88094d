#!/usr/bin/env bash
# sql-edition/test/dump-restore.sh: a database moves between the editions
# with pg_dump and pg_restore and no change, both ways.  A database using
# the C edition (a server with hoplock preloaded) is dumped and restored
# into a server with the SQL edition, used there, dumped again and
# restored into the C edition's server.  Each time: the leases, slots,
# keepalive, history, generation floor and event log (a mass expiry's
# rows that carry many events too) are what was dumped;
# the running terms go on (renewed with their generations); the next term
# of every name is above every generation it had, in either edition.
# Prints "ok" / "not ok" lines, then "N passed, M failed".
#
#   dump-restore.sh C_BINDIR SQL_BINDIR WORKDIR PORT
#     C_BINDIR    bin of a PostgreSQL with the C edition installed
#     SQL_BINDIR  bin of a PostgreSQL with the SQL edition installed
#     WORKDIR     an empty directory (clusters and sockets go there)
#     PORT        two ports are used, PORT and PORT + 1 (sockets in WORKDIR)
# Run as the user that owns WORKDIR (not root).
set -u
cbin=$1 sbin=$2 dir=$3 port=$4
cport=$port sport=$((port + 1))
passed=0 failed=0

check() {
	if [ "$2" = "$3" ]; then
		echo "ok - $1"
		passed=$((passed + 1))
	else
		echo "not ok - $1"
		printf '  expected: %s\n  got:      %s\n' "$3" "$2"
		failed=$((failed + 1))
	fi
}
finish() {
	"$cbin/pg_ctl" -D "$dir/c" -m fast -w stop >/dev/null 2>&1
	"$sbin/pg_ctl" -D "$dir/s" -m fast -w stop >/dev/null 2>&1
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ]
	exit
}
cpsql() { "$cbin/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$dir" -p "$cport" -U postgres "$@"; }
spsql() { "$sbin/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$dir" -p "$sport" -U postgres "$@"; }

# What must survive a move: every row of the state, as text, in order.
state_sql="SET search_path = hoplock;
SELECT 'lease', name, owner, generation, acquired_at, expires_at, slot, hold_until, value
  FROM hoplock_leases ORDER BY name, slot;
SELECT 'history', name, slot, owner, generation, acquired_at, ended_at, how
  FROM hoplock_history ORDER BY name, generation;
SELECT 'floor', forgotten FROM hoplock_internal.floor;
SELECT 'keepalive', owner, expires_at FROM hoplock_internal.keepalive ORDER BY id;
SELECT 'event', seq, event, name, slot, owner, generation FROM hoplock_events(0) ORDER BY seq;"

for side in c s; do
	bin=$cbin p=$cport
	[ "$side" = s ] && bin=$sbin p=$sport
	"$bin/initdb" -D "$dir/$side" -A trust -U postgres --no-sync >"$dir/initdb-$side.log" 2>&1 ||
		{ cat "$dir/initdb-$side.log"; check "initdb ($side)" no yes; finish; }
	{
		echo "port = $p"
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$dir'"
		[ "$side" = c ] && echo "shared_preload_libraries = 'hoplock'"
	} >>"$dir/$side/postgresql.conf"
	"$bin/pg_ctl" -D "$dir/$side" -l "$dir/$side.log" -w start >/dev/null ||
		{ cat "$dir/$side.log"; check "server start ($side)" no yes; finish; }
done

# The C edition: a running term, a released one, a forgotten name (the
# floor), a lease with slots, terms on a keepalive, an event log.
cpsql -c 'CREATE SCHEMA hoplock' -c 'CREATE EXTENSION hoplock SCHEMA hoplock' >/dev/null
cpsql >/dev/null <<'SQL' || { check "the C edition's database" no yes; finish; }
SET search_path = hoplock;
SELECT hoplock_acquire('run', 'a', '1 h', value => 'host-a');
SELECT hoplock_acquire('done', 'a', '1 h');
SELECT hoplock_release('done', 'a');
SELECT hoplock_acquire('gone', 'a', '1 h');
SELECT hoplock_release('gone', 'a');
SELECT hoplock_forget('gone');
SELECT hoplock_acquire('sl', 'w1', '1 h', slots => 2);
SELECT hoplock_acquire('sl', 'w2', '1 h', slots => 2);
SELECT hoplock_acquire('ka' || i, 'k', '1 h') FROM generate_series(1, 2) AS i;
SELECT count(*) FROM hoplock_renew_all('k', '1 h');
SQL
# ... and a mass expiry: 200 terms lapsing at one instant, whose expired
# events the worker records as rows that carry many (eventlog.c)
cpsql -c "SELECT count(hoplock.hoplock_acquire('mx' || i, 'm', t.at - clock_timestamp()))
            FROM (SELECT statement_timestamp() + interval '1.5 s' AS at) AS t,
                 generate_series(1, 200) AS i" >/dev/null
for _ in $(seq 1 100); do
	[ "$(cpsql -c "SELECT count(*) FILTER (WHERE name LIKE 'mx%' AND state = 'h') = 0
	                      AND EXISTS (SELECT FROM hoplock_internal.event WHERE earlier_names IS NOT NULL)
	                 FROM hoplock_internal.lease")" = t ] && break
	sleep 0.1
done
check "the C edition records a mass expiry in rows that carry many" \
	"$(cpsql -c "SELECT count(*) > 0 FROM hoplock_internal.event WHERE earlier_names IS NOT NULL")" t
# a number inside such a row, and what follows it there
mid=$(cpsql -c "SELECT seq - ((cardinality(earlier_names) - 4)::bigint << 11)
                  FROM hoplock_internal.event WHERE earlier_names IS NOT NULL ORDER BY seq LIMIT 1")
after_mid=$(cpsql -c "SELECT count(*) || ' ' || min(seq) FROM hoplock.hoplock_events($mid) WHERE name LIKE 'mx%'")
cpsql -c "$state_sql" >"$dir/c.state"

# C -> SQL
"$cbin/pg_dump" -Fc -h "$dir" -p "$cport" -U postgres -f "$dir/c.dump" postgres ||
	{ check "pg_dump of the C edition's database" no yes; finish; }
spsql -c 'CREATE DATABASE moved' >/dev/null
"$sbin/pg_restore" -h "$dir" -p "$sport" -U postgres -d moved --exit-on-error "$dir/c.dump" \
	>"$dir/restore-s.log" 2>&1 || cat "$dir/restore-s.log"
check "C to SQL: restored" "$(spsql -d moved -c "SELECT extversion FROM pg_extension WHERE extname = 'hoplock'")" "1.2.0"
check "C to SQL: the state is the dumped one" \
	"$(spsql -d moved -c "$state_sql" | diff "$dir/c.state" - && echo same)" same
check "C to SQL: resuming from inside a row that carries many" \
	"$(spsql -d moved -c "SELECT count(*) || ' ' || min(seq) FROM hoplock.hoplock_events($mid) WHERE name LIKE 'mx%'")" \
	"$after_mid"
check "C to SQL: the running term renews with its generation" "$(spsql -d moved -c "SET search_path = hoplock;
	SELECT r.generation = h.generation FROM hoplock_holder('run') AS h, hoplock_renew('run', 'a', '1 h') AS r")" t
check "C to SQL: hoplock_renew_all renews the keepalive's terms" "$(spsql -d moved -c "SET search_path = hoplock;
	SELECT string_agg(name, ',' ORDER BY name) FROM hoplock_renew_all('k', '1 h')")" "ka1,ka2"
check "C to SQL: the slots stay taken" "$(spsql -d moved -c "SET search_path = hoplock;
	SELECT hoplock_acquire('sl', 'w3', '1 h', slots => 2) IS NULL")" t
check "C to SQL: new terms above every old generation" "$(spsql -d moved -c "SET search_path = hoplock;
	SELECT hoplock_release('sl', 'w1') AND hoplock_release('run', 'a');
	SELECT bool_and(n.generation > (SELECT max(h.generation) FROM hoplock_history AS h
	                                 WHERE h.name = n.name AND h.generation <> n.generation)
	                AND n.generation > (SELECT f.forgotten FROM hoplock_internal.floor AS f))
	  FROM (SELECT (hoplock_acquire(x, 'b', '1 h')).* FROM unnest(ARRAY['run', 'done']) AS x
	        UNION ALL SELECT (hoplock_acquire('gone', 'b', '1 h')).*
	        UNION ALL SELECT (hoplock_acquire('sl', 'w3', '1 h', slots => 2)).*) AS n" | tail -n 1)" t
spsql -d moved -c "$state_sql" >"$dir/s.state"

# SQL -> C
"$sbin/pg_dump" -Fc -h "$dir" -p "$sport" -U postgres -f "$dir/s.dump" moved ||
	{ check "pg_dump of the SQL edition's database" no yes; finish; }
cpsql -c 'CREATE DATABASE back' >/dev/null
"$cbin/pg_restore" -h "$dir" -p "$cport" -U postgres -d back --exit-on-error "$dir/s.dump" \
	>"$dir/restore-c.log" 2>&1 || cat "$dir/restore-c.log"
check "SQL to C: the state is the dumped one" \
	"$(cpsql -d back -c "$state_sql" | diff "$dir/s.state" - && echo same)" same
check "SQL to C: resuming from inside a row that carries many" \
	"$(cpsql -d back -c "SELECT count(*) || ' ' || min(seq) FROM hoplock.hoplock_events($mid) WHERE name LIKE 'mx%'")" \
	"$after_mid"
check "SQL to C: the running terms renew with their generations" "$(cpsql -d back -c "SET search_path = hoplock;
	SELECT bool_and(r.generation = h.generation)
	  FROM unnest(ARRAY['run', 'done', 'gone']) AS x, hoplock_holder(x) AS h, hoplock_renew(x, 'b', '1 h') AS r")" t
check "SQL to C: hoplock_renew_all renews the keepalive's terms" "$(cpsql -d back -c "SET search_path = hoplock;
	SELECT string_agg(name, ',' ORDER BY name) FROM hoplock_renew_all('k', '1 h')")" "ka1,ka2"
check "SQL to C: new terms above every old generation" "$(cpsql -d back -c "SET search_path = hoplock;
	SELECT hoplock_release(x, 'b') FROM unnest(ARRAY['run', 'done', 'gone']) AS x;
	SELECT hoplock_release('sl', 'w3') AND hoplock_release('sl', 'w2');
	SELECT bool_and(n.generation > (SELECT max(h.generation) FROM hoplock_history AS h
	                                 WHERE h.name = n.name AND h.generation <> n.generation))
	  FROM (SELECT (hoplock_acquire(x, 'c', '1 h')).* FROM unnest(ARRAY['run', 'done', 'gone']) AS x
	        UNION ALL SELECT (hoplock_acquire('sl', 'c', '1 h', slots => 2)).*) AS n" | tail -n 1)" t
finish
