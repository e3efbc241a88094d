"""A leader process for the process tests: leads NAME with an Elector and,
while it leads, appends rows to TABLE (fenced by hoplock_fenced and by
Term.fenced) every 20 ms. Prints, with the wall clock:
LEAD g t / ROW g t (its first committed row) / END g cause /
STALE-REFUSED g or STALE-COMMITTED g (a write with the lost generation,
without the fence: the trigger must refuse it) / EXIT.
SIGTERM stops it gracefully (handing the term to a waiting candidate).

    child.py DSN NAME TABLE TTL SESSION_BOUND(0|1) FOLLOW(listen|watch) [sync|async [SLOTS]]

With "async", the same with an AsyncElector, whose lead cancels the
function's task when the term is lost. With SLOTS, the Elector has
slots=SLOTS, and LEAD also prints the term's slot.
"""
import asyncio
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

import hoplock  # noqa: E402

dsn, name, table, ttl, bound, follow = sys.argv[1:7]
mode = sys.argv[7] if len(sys.argv) > 7 else "sync"
slots = int(sys.argv[8]) if len(sys.argv) > 8 else 1
insert = sql.SQL("INSERT INTO {} (owner, generation) VALUES (%s, %s)").format(sql.Identifier(table))
owner = "child-%d" % os.getpid()


def out(*args: object) -> None:
    print(*args, flush=True)


def stale_write(g: int) -> None:
    """A write with the lost generation, without the fence: the trigger
    must refuse it."""
    try:
        with psycopg.connect(dsn) as conn:
            conn.execute(insert, (owner, g))
        out("STALE-COMMITTED", g)
    except psycopg.errors.LockNotAvailable:
        out("STALE-REFUSED", g)


def main_sync() -> None:
    e = hoplock.Elector(dsn, name, owner, ttl=float(ttl), session_bound=bound == "1",
                        follow=follow, poll=30, handoff_linger=0, slots=slots)
    signal.signal(signal.SIGTERM, lambda *a: e.stop())

    def fn(term: hoplock.Term) -> None:
        g = term.generation
        out("LEAD", g, repr(time.time()), term.slot)
        first = True
        while not term.lost:
            try:
                with term.fenced() as conn:
                    conn.execute(insert, (owner, g))
                if first:
                    out("ROW", g, repr(time.time()))
                    first = False
            except (hoplock.FenceRefused, hoplock.LeadershipLost):
                break
            except psycopg.Error as err:
                out("ERR", g, repr(err))
            term.wait(0.02)
        if not e.stopped and term.cause is not None and not isinstance(term.cause, hoplock.HandedOff):
            stale_write(g)
        out("END", g, type(term.cause).__name__)

    while not e.stopped:
        try:
            e.lead(fn)
        except hoplock.Stopped:
            break


async def main_async() -> None:
    e = hoplock.AsyncElector(dsn, name, owner, ttl=float(ttl), session_bound=bound == "1",
                             follow=follow, poll=30, handoff_linger=0, slots=slots)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, e.stop)

    led = {"g": 0}

    async def fn(term: hoplock.AsyncTerm) -> None:
        g = led["g"] = term.generation
        out("LEAD", g, repr(time.time()), term.slot)
        first = True
        while True:
            try:
                async with term.fenced() as conn:
                    await conn.execute(insert, (owner, g))
                if first:
                    out("ROW", g, repr(time.time()))
                    first = False
            except (hoplock.FenceRefused, hoplock.LeadershipLost):
                await asyncio.sleep(3600)   # until lead cancels this task
            except psycopg.Error as err:
                out("ERR", g, repr(err))
            await asyncio.sleep(0.02)

    while not e.stopped:
        try:
            await e.lead(fn)
        except hoplock.LeadershipLost as lost:
            out("END", led["g"], type(lost.cause).__name__)
        except hoplock.Stopped:
            break
    await e.close()


out("START", os.getpid())
if mode == "async":
    asyncio.run(main_async())
else:
    main_sync()
out("EXIT")
