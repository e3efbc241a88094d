# scripts/scratch.sh: start and stop a scratch PostgreSQL server with hoplock
# preloaded, under a temporary directory, with its socket in /tmp.  Sourced
# by scripts/demo (and the benchmarks); PostgreSQL refuses to run as root,
# so as root the server runs as the "postgres" OS user.
#
#   scratch_start [extra postgresql.conf lines...]   sets SCRATCH_DIR, PGPORT
#                         (the port: SCRATCH_PORT if set, else a free one of
#                         SCRATCH_PORT_RANGE, FIRST-LAST, default 54320-54420)
#   scratch_psql [psql args...]                      psql as the superuser
#   scratch_stop                                     stops it, removes the dir

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PGVERSION:-15}/bin/pg_config}
[ -x "$PG_CONFIG" ] || PG_CONFIG=pg_config
PGBIN=$("$PG_CONFIG" --bindir)

scratch_as_owner() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

scratch_free_port() {
	local port range=${SCRATCH_PORT_RANGE:-54320-54420}
	for port in $(seq "${range%-*}" "${range#*-}"); do
		if ! [ -e "/tmp/.s.PGSQL.$port" ]; then
			echo "$port"
			return
		fi
	done
	echo "scratch: no free port" >&2
	return 1
}

scratch_start() {
	SCRATCH_DIR=$(mktemp -d /tmp/hoplock-scratch.XXXXXX)
	if [ "$(id -u)" -eq 0 ]; then
		chown postgres "$SCRATCH_DIR"
	fi
	PGPORT=${SCRATCH_PORT:-}
	[ -n "$PGPORT" ] || PGPORT=$(scratch_free_port) || return 1
	export PGPORT PGHOST=/tmp
	scratch_as_owner "$PGBIN/initdb" -D "$SCRATCH_DIR/data" -A trust -U postgres \
		--no-sync >"$SCRATCH_DIR/initdb.log" 2>&1 || {
		cat "$SCRATCH_DIR/initdb.log" >&2
		return 1
	}
	{
		echo "port = $PGPORT"
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '/tmp'"
		echo "shared_preload_libraries = 'hoplock'"
		for line in "$@"; do
			echo "$line"
		done
	} >>"$SCRATCH_DIR/data/postgresql.conf"
	scratch_as_owner "$PGBIN/pg_ctl" -D "$SCRATCH_DIR/data" -l "$SCRATCH_DIR/server.log" \
		-w start >/dev/null || {
		cat "$SCRATCH_DIR/server.log" >&2
		return 1
	}
}

scratch_psql() {
	"$PGBIN/psql" -X -h /tmp -p "$PGPORT" -U postgres -v ON_ERROR_STOP=0 "$@"
}

scratch_stop() {
	if [ -n "${SCRATCH_DIR:-}" ] && [ -d "$SCRATCH_DIR" ]; then
		scratch_as_owner "$PGBIN/pg_ctl" -D "$SCRATCH_DIR/data" -m fast -w stop >/dev/null 2>&1
		rm -rf "$SCRATCH_DIR"
	fi
}
