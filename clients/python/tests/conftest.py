"""A scratch PostgreSQL server with hoplock preloaded, started for the
session (initdb under a temp dir, socket in /tmp; as the postgres OS user
when run as root), or the server HOPLOCK_TEST_DSN names."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

import psycopg
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

SCHEMA = os.environ.get("HOPLOCK_TEST_SCHEMA", "hoplock")


def _bindir() -> str:
    pg_config = os.environ.get("PG_CONFIG", "/usr/lib/postgresql/15/bin/pg_config")
    if not os.access(pg_config, os.X_OK):
        pg_config = shutil.which("pg_config") or pg_config
    return subprocess.check_output([pg_config, "--bindir"], text=True).strip()


def _free_port() -> int:
    if os.environ.get("HOPLOCK_TEST_PORT"):
        return int(os.environ["HOPLOCK_TEST_PORT"])
    for port in range(54320, 54420):
        if not os.path.exists("/tmp/.s.PGSQL.%d" % port):
            return port
    raise RuntimeError("no free port")


def _as_owner(cmd: list[str]) -> list[str]:
    return (["runuser", "-u", "postgres", "--"] + cmd) if os.geteuid() == 0 else cmd


class Server:
    def __init__(self) -> None:
        self.dir = ""
        self.port = 0
        self.bindir = ""
        self.dsn = os.environ.get("HOPLOCK_TEST_DSN", "")
        self.pg_ctl: list[str] = []

    def start(self) -> None:
        if self.dsn:
            return
        self.bindir = _bindir()
        self.dir = tempfile.mkdtemp(prefix="hoplock-pytest.")
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
        self.port = _free_port()
        data = os.path.join(self.dir, "data")
        subprocess.run(_as_owner([os.path.join(self.bindir, "initdb"), "-D", data, "-A", "trust",
                                  "-U", "postgres", "--no-sync"]),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        with open(os.path.join(data, "postgresql.conf"), "a") as f:
            f.write("port = %d\nlisten_addresses = ''\nunix_socket_directories = '/tmp'\n"
                    "shared_preload_libraries = 'hoplock'\ntrack_commit_timestamp = on\n"
                    "max_connections = 100\nfsync = off\n" % self.port)
        self.pg_ctl = _as_owner([os.path.join(self.bindir, "pg_ctl"), "-D", data,
                                 "-l", os.path.join(self.dir, "server.log"), "-w"])
        subprocess.run(self.pg_ctl + ["start"], check=True, stdout=subprocess.DEVNULL)
        self.dsn = "host=/tmp port=%d user=postgres dbname=postgres" % self.port
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute('CREATE SCHEMA "%s"' % SCHEMA)
            conn.execute('CREATE EXTENSION hoplock SCHEMA "%s"' % SCHEMA)

    def stop(self) -> None:
        if self.pg_ctl:
            subprocess.run(self.pg_ctl + ["-m", "immediate", "stop"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = Server()
    s.start()
    yield s
    s.stop()


@pytest.fixture
def dsn(server: Server) -> str:
    return server.dsn


_names = iter(range(1, 1 << 30))


@pytest.fixture
def lease_name(request: pytest.FixtureRequest) -> str:
    return "%s-%d-%d" % (request.node.name[:40], os.getpid(), next(_names))


@pytest.fixture
def admin(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


def wait_until(cond, timeout: float = 10.0, step: float = 0.005):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(step)
    raise AssertionError("condition not met within %.1f s" % timeout)


@pytest.fixture(scope="session")
def pooler(server: Server) -> Iterator[str]:
    """PgBouncer in transaction pooling mode in front of the scratch server
    (its socket in a directory of its own): LISTEN cannot work through it,
    hoplock_watch does. Skips without pgbouncer, or against HOPLOCK_TEST_DSN
    (then HOPLOCK_TEST_POOLER_DSN, if set, is used)."""
    if os.environ.get("HOPLOCK_TEST_POOLER_DSN"):
        yield os.environ["HOPLOCK_TEST_POOLER_DSN"]
        return
    exe = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not server.dir or not os.access(exe, os.X_OK):
        pytest.skip("no pgbouncer (or not our scratch server)")
    d = os.path.join(server.dir, "pgbouncer")
    os.mkdir(d)
    ini = os.path.join(d, "pgbouncer.ini")
    with open(ini, "w") as f:
        f.write("[databases]\npostgres = host=/tmp port=%d dbname=postgres user=postgres\n"
                "[pgbouncer]\nlisten_addr =\nlisten_port = %d\nunix_socket_dir = %s\nauth_type = any\n"
                "pool_mode = transaction\nmax_client_conn = 200\ndefault_pool_size = 20\n"
                "server_reset_query = DISCARD ALL\nserver_reset_query_always = 1\n"
                "logfile = %s/pgbouncer.log\npidfile = %s/pgbouncer.pid\n"
                % (server.port, server.port, d, d, d))
    if os.geteuid() == 0:
        shutil.chown(d, "postgres")
        shutil.chown(ini, "postgres")
    subprocess.run(_as_owner([exe, "-d", ini]), check=True, stdout=subprocess.DEVNULL)
    dsn = "host=%s port=%d user=postgres dbname=postgres" % (d, server.port)
    end = time.monotonic() + 10
    while not os.path.exists(os.path.join(d, ".s.PGSQL.%d" % server.port)) and time.monotonic() < end:
        time.sleep(0.02)
    yield dsn
    with open(os.path.join(d, "pgbouncer.pid")) as f:
        pid = int(f.read().strip())
    with __import__("contextlib").suppress(ProcessLookupError):
        os.kill(pid, 15)
