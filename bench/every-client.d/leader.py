"""bench/every-client's Python leader: leads NAME with the Python
client's Elector, its settings the defaults but the ttl and the binding,
and while it leads inserts a row fenced with its generation into TABLE
every 20 ms (term.fenced(): hoplock_fence, and the table's hoplock_fenced
trigger). SIGTERM stops it (handing the term over).

    leader.py NAME TABLE TTL SESSION_BOUND(0|1)     (connection: PG* variables)
"""
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../clients/python"))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

import hoplock  # noqa: E402

name, table, ttl, bound = sys.argv[1:5]
owner = "py-%d" % os.getpid()
insert = sql.SQL("INSERT INTO {} (owner, generation) VALUES (%s, %s)").format(sql.Identifier(table))
e = hoplock.Elector("", name, owner, ttl=float(ttl), session_bound=bound == "1")
signal.signal(signal.SIGTERM, lambda *a: e.stop())


def fn(term: hoplock.Term) -> None:
    while not term.lost:
        try:
            with term.fenced() as conn:
                conn.execute(insert, (owner, term.generation))
        except (hoplock.FenceRefused, hoplock.LeadershipLost):
            return
        except psycopg.Error as err:
            print("error:", err, flush=True)
        term.wait(0.02)


while not e.stopped:
    try:
        e.lead(fn)
    except hoplock.Stopped:
        break
    except hoplock.LeadershipLost:
        pass
