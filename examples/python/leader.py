#!/usr/bin/env python3
"""leader.py: run a job's work only while this process leads it (psycopg2).

    python3 leader.py [lease-name]     connection from the usual PG* variables
    LEADER_TTL=15                      ttl in seconds (fractions allowed)
    LEADER_SCHEMA=hoplock              schema hoplock is installed in
    LEADER_SESSION_BOUND=1             bind the term to this connection
    LEADER_WORK_SCHEMA=public          schema of the table work_log: one that
                                       no untrusted role can create in or owns

The README's recipe: LISTEN first, then wait for the lease in the server;
while leading, fence each unit of work, renew at a third of the ttl, and
stop working the moment the local deadline -- the send time of the last
successful renewal plus the ttl, on the monotonic clock -- passes, or a
renewal says the term is gone.  A transient error is not loss: it retries
until the deadline.  Release on SIGTERM/SIGINT.

psycopg2 returns a composite (hoplock_lease) as one text value unless it is
registered, so the queries select the columns they need; "no lease" is a
row of NULLs.  The work here appends to work_log, created if missing.
"""
import json
import os
import re
import select
import signal
import socket
import sys
import time

import psycopg2
import psycopg2.errors
import psycopg2.extensions
from psycopg2 import sql

LEASE = sys.argv[1] if len(sys.argv) > 1 else "billing-scheduler"
OWNER = "%s:%d" % (socket.gethostname(), os.getpid())
TTL = float(os.environ.get("LEADER_TTL", "15"))
SCHEMA = os.environ.get("LEADER_SCHEMA", "hoplock")
WORK_SCHEMA = os.environ.get("LEADER_WORK_SCHEMA", "public")
SESSION_BOUND = os.environ.get("LEADER_SESSION_BOUND", "") not in ("", "0")
if TTL <= 0:
    sys.exit("leader.py: LEADER_TTL must be a positive number of seconds")
TTL_SQL = "%.6f seconds" % TTL

# errors that say nothing about the lease: retry until the deadline
TRANSIENT = (psycopg2.OperationalError, psycopg2.errors.LockNotAvailable,
             psycopg2.errors.SerializationFailure)


def fn(name):
    """A function of hoplock's, schema-qualified (never via search_path).
    Every argument is cast to the parameter's exact type: an untyped one
    would let an overload planted beside it (say hoplock_wait(text, text,
    text, text, boolean)) match better, and capture the call."""
    return sql.SQL("{}.{}").format(sql.Identifier(SCHEMA), sql.Identifier(name))


class Stop(Exception):
    pass


def on_signal(signum, frame):
    raise Stop()


def connect():
    conn = psycopg2.connect("")
    conn.autocommit = True
    return conn


def one(conn, query, args):
    with conn.cursor() as cur:
        cur.execute(query, args)
        return cur.fetchone()


def campaign(conn):
    """Wait in the server up to a ttl for the lease; its generation or None."""
    q = sql.SQL("SELECT generation FROM {}(%s::text, %s::text, %s::interval, %s::interval, %s::boolean)"
                  ).format(fn("hoplock_wait"))
    return one(conn, q, (LEASE, OWNER, TTL_SQL, TTL_SQL, SESSION_BOUND))[0]


def work(conn, generation):
    """One unit of work, behind the fence, in one transaction."""
    conn.autocommit = False
    try:
        with conn.cursor() as cur:
            cur.execute(sql.SQL("SELECT {}(%s::text, %s::bigint)").format(fn("hoplock_fence")),
                        (LEASE, generation))
            cur.execute(sql.SQL("INSERT INTO {}.work_log (lease, owner, generation) VALUES (%s, %s, %s)")
                        .format(sql.Identifier(WORK_SCHEMA)), (LEASE, OWNER, generation))
        conn.commit()
    except Exception:
        conn.rollback()
        raise
    finally:
        conn.autocommit = True


def parse_event(payload):
    """The (event, name, generation) a payload claims, or None if it is not
    an event of hoplock's shape.  Any role may NOTIFY anything on the
    channel: a payload is untrusted input, and what it claims a hint."""
    try:
        event = json.loads(payload)
    except Exception:       # not JSON, or nested too deep
        return None
    if not isinstance(event, dict):
        return None
    kind, name = event.get("event"), event.get("name")
    if not isinstance(kind, str) or not isinstance(name, str):
        return None
    generation = event.get("generation")
    if isinstance(generation, bool) or not isinstance(generation, int):
        text = event.get("generation_text")
        if not isinstance(text, str) or not re.fullmatch(r"-?[0-9]{1,19}", text):
            return None
        generation = int(text)
    return kind, name, generation


def term_ended(listener, generation):
    """Did an event say our term ended?  Events are hints: any role may
    NOTIFY, so the caller confirms with the server before acting."""
    ended = False
    if select.select([listener], [], [], 0)[0]:
        listener.poll()
        while listener.notifies:
            payload = listener.notifies.pop(0).payload
            event = parse_event(payload)
            if event is None:
                print("ignored a notification that is not an event: %r" % payload[:80], flush=True)
                continue
            kind, name, gen = event
            if name == LEASE and gen == generation and kind in ("released", "expired"):
                ended = True
    return ended


def holder_generation(conn):
    q = sql.SQL("SELECT generation FROM {}(%s::text)").format(fn("hoplock_holder"))
    return one(conn, q, (LEASE,))[0]


def term_gone(conn, generation):
    """Does the server say our term has ended?  If it cannot answer, lead on:
    the next renewal, or the deadline, decides."""
    try:
        return holder_generation(conn) != generation
    except psycopg2.Error as e:
        print("could not confirm with hoplock_holder (%s): leading on"
              % (e.pgcode or type(e).__name__), flush=True)
        return False


def lead(conn, listener, generation, sent_at):
    """Work while leading; returns the connection when the term is over."""
    deadline = sent_at + TTL
    next_renew = sent_at + TTL / 3
    renew = sql.SQL("SELECT generation FROM {}(%s::text, %s::text, %s::interval, %s::bigint)"
                    ).format(fn("hoplock_renew"))
    while time.monotonic() < deadline:
        if term_ended(listener, generation) and term_gone(conn, generation):
            print("lost: the term ended", flush=True)
            return conn
        try:
            work(conn, generation)
        except psycopg2.errors.LockNotAvailable:
            # fenced out, or the table busy for a moment: ask
            if term_gone(conn, generation):
                print("lost: fenced out", flush=True)
                return conn
        except TRANSIENT:
            conn = reconnect(conn)
        if time.monotonic() >= next_renew:
            t0 = time.monotonic()
            try:
                got = one(conn, renew, (LEASE, OWNER, TTL_SQL, generation))[0]
            except TRANSIENT:
                conn = reconnect(conn)
                next_renew = min(deadline, time.monotonic() + TTL / 10)
                continue
            if got is None:
                print("lost: the renewal found the term gone", flush=True)
                return conn
            deadline = t0 + TTL
            next_renew = t0 + TTL / 3
        time.sleep(min(TTL / 10, 0.5))
    print("lost: no renewal before the deadline", flush=True)
    return conn


def reconnect(conn):
    try:
        conn.close()
    except Exception:
        pass
    while True:
        try:
            return connect()
        except psycopg2.OperationalError:
            time.sleep(min(TTL / 10, 1))


def main():
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    conn = connect()
    listener = connect()
    with listener.cursor() as cur:
        cur.execute("LISTEN hoplock")
    with conn.cursor() as cur:
        cur.execute("SET client_min_messages = warning")
        create = sql.SQL("""CREATE TABLE IF NOT EXISTS {}.work_log (
                            id bigserial PRIMARY KEY, lease text NOT NULL,
                            owner text NOT NULL, generation bigint NOT NULL,
                            at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp())"""
                         ).format(sql.Identifier(WORK_SCHEMA))
        try:
            cur.execute(create)
        except psycopg2.Error:
            # instances started at once race in CREATE TABLE IF NOT EXISTS:
            # the loser fails ("already exists", or on a catalog's unique
            # index), and its second try finds the table; any other error
            # comes again
            cur.execute(create)
    generation = None
    try:
        while True:
            sent_at = time.monotonic()
            try:
                generation = campaign(conn)
            except TRANSIENT:
                conn = reconnect(conn)
                continue
            if generation is None:
                continue
            print("leading, generation %d" % generation, flush=True)
            conn = lead(conn, listener, generation, sent_at)
            generation = None
    except Stop:
        # The signal may have come while hoplock_wait was granting this
        # instance a term it has not seen yet: release whatever term this
        # owner holds (its owner is this process's alone).
        try:
            if generation is not None:
                one(conn, sql.SQL("SELECT {}(%s::text, %s::text, %s::bigint)").format(fn("hoplock_release")),
                    (LEASE, OWNER, generation))
            else:
                one(conn, sql.SQL("SELECT {}(%s::text, %s::text)").format(fn("hoplock_release")),
                    (LEASE, OWNER))
        except psycopg2.Error:
            pass


if __name__ == "__main__":
    main()
