"""One elector of make test-ha: waits for a lease, and while it leads
commits a fenced write every PAUSE seconds and renews at a third of the
ttl, through the multi-host connection string the README gives.  It
prints one JSON object a line of what the server acknowledged (times are
the server's clock, in microseconds since the epoch):

  {"ev": "grant", "name", "gen", "acq", "exp", "sb"}   a term begun
  {"ev": "renew", "gen", "exp"}                          a renewal
  {"ev": "write", "gen", "id", "at"}                     a fenced row committed
  {"ev": "lost", "gen", "why"}                           it stopped leading
  {"ev": "refused", "gen"}                               a fence refused (55P03)
  {"ev": "conn", "port"}                                 (re)connected

After it lost a term for any reason but a refused fence, it tries one
fenced write with the lost generation: that must be refused (the checker
finds any that committed outside its term).  It then writes the same row
without the fence into ha_unfenced: the control, which shows the checker
finding what the fence prevents.

  client.py DSN NAME OWNER TTL_SECONDS SESSION_BOUND(0|1)
"""

import json
import signal
import sys
import time

import psycopg2
import psycopg2.errors

dsn, name, owner, ttl, sb = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5] == "1"
PAUSE = 0.1
stopping = False


def stop(*_):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, stop)


def out(**kw):
    kw["t"] = time.time()
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


US = "(extract(epoch from %s) * 1000000)::bigint"
LEASE = "generation, " + US % "acquired_at" + ", " + US % "expires_at"


def connect():
    c = psycopg2.connect(dsn, application_name=owner)
    c.autocommit = True
    cur = c.cursor()
    cur.execute("SELECT pg_catalog.inet_server_port()")
    out(ev="conn", port=cur.fetchone()[0])
    return c


def one(conn, sql, args):
    cur = conn.cursor()
    cur.execute(sql, args)
    return cur.fetchone()


def fenced_write(conn, gen):
    """A fenced row in its own transaction: (id, at) or None if refused."""
    cur = conn.cursor()
    try:
        cur.execute("BEGIN")
        cur.execute("SELECT hoplock.hoplock_fence(%s::text, %s::bigint)", (name, gen))
        cur.execute("INSERT INTO public.ha_writes (name, owner, generation) VALUES (%s, %s, %s) "
                    "RETURNING id, " + US % "at", (name, owner, gen))
        row = cur.fetchone()
        cur.execute("COMMIT")
        return row
    except psycopg2.errors.LockNotAvailable:
        cur.execute("ROLLBACK")
        return None


conn = None
gen = None
deadline = 0.0      # local: a ttl after the last acknowledged renewal was sent
last_renew = 0.0
stale = None        # a lost generation to try one fenced write with

while not stopping:
    try:
        if conn is None or conn.closed:
            conn = connect()
        if stale is not None:
            g, stale = stale, None
            r = fenced_write(conn, g)
            if r is None:
                out(ev="refused", gen=g)
            else:
                out(ev="write", gen=g, id=r[0], at=r[1], stale=True)
            # the control: the same write without the fence, into a table
            # of its own, which the checker must find out of its term
            # when the next term had begun
            one(conn, "INSERT INTO public.ha_unfenced (name, owner, generation) VALUES (%s, %s, %s) "
                      "RETURNING id", (name, owner, g))
        if gen is None:
            sent = time.monotonic()
            r = one(conn, "SELECT " + LEASE + " FROM hoplock.hoplock_wait(%s::text, %s::text, %s::interval, "
                    "'1 s'::interval, session_bound => %s::boolean)", (name, owner, "%g s" % ttl, sb))
            if r and r[0] is not None:
                gen, deadline, last_renew = r[0], sent + ttl, sent
                out(ev="grant", name=name, gen=r[0], acq=r[1], exp=r[2], sb=sb)
            continue
        if time.monotonic() - last_renew >= ttl / 3:
            sent = time.monotonic()
            r = one(conn, "SELECT " + LEASE + " FROM hoplock.hoplock_renew(%s::text, %s::text, "
                    "%s::interval, %s::bigint)", (name, owner, "%g s" % ttl, gen))
            if r and r[0] is not None:
                deadline, last_renew = sent + ttl, sent
                out(ev="renew", gen=gen, exp=r[2])
            else:
                out(ev="lost", gen=gen, why="renew")
                stale, gen = gen, None
                continue
        if time.monotonic() >= deadline:
            out(ev="lost", gen=gen, why="deadline")
            stale, gen = gen, None
            continue
        r = fenced_write(conn, gen)
        if r is None:
            out(ev="refused", gen=gen)
            out(ev="lost", gen=gen, why="fence")
            gen = None
            continue
        out(ev="write", gen=gen, id=r[0], at=r[1])
        time.sleep(PAUSE)
    except (psycopg2.OperationalError, psycopg2.InterfaceError, psycopg2.errors.ReadOnlySqlTransaction,
            psycopg2.errors.AdminShutdown) as e:
        # the connection is gone (a switchover, a failover, a crash): a
        # session-bound term ended with it; a ttl-bound one goes on until
        # its deadline, to be renewed on the new primary
        try:
            conn.close()
        except Exception:
            pass
        conn = None
        if gen is not None and sb:
            out(ev="lost", gen=gen, why="session")
            stale, gen = gen, None
        time.sleep(0.2)
    except psycopg2.Error as e:
        out(ev="error", gen=gen, sqlstate=e.pgcode, msg=str(e).strip()[:200])
        try:
            conn.close()
        except Exception:
            pass
        conn = None
        time.sleep(0.2)

if gen is not None and conn is not None:
    try:
        one(conn, "SELECT hoplock.hoplock_release(%s::text, %s::text, %s::bigint)", (name, owner, gen))
        out(ev="lost", gen=gen, why="released")
    except psycopg2.Error:
        pass
