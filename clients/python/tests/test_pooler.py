"""Behind PgBouncer in transaction pooling mode: follow="watch"
(hoplock_watch) hears a lost term as fast as LISTEN does directly; the
Elector's statements are never prepared on the server, so any server
connection can run each."""
from __future__ import annotations

import threading
import time
from typing import Any, List

import psycopg
from psycopg_pool import ConnectionPool

import hoplock
from conftest import SCHEMA


def test_behind_transaction_pooler(pooler: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    with ConnectionPool(pooler, min_size=2, max_size=6) as pool:
        a = hoplock.Elector(pool, lease_name, "a", ttl=9, follow="watch")
        b = hoplock.Elector(pooler, lease_name, "b", ttl=9, follow="watch", poll=30)
        seen: dict[str, Any] = {}
        got_b: List[Any] = []

        def fa(term: hoplock.Term) -> None:
            for _ in range(8):   # past psycopg's prepare threshold (5)
                with term.fenced() as conn:
                    conn.execute("SELECT 1", prepare=False)
            tb = threading.Thread(target=lambda: got_b.append(b.lead(lambda t: time.monotonic())),
                                  daemon=True)
            tb.start()
            seen["tb"] = tb
            time.sleep(0.3)
            t0 = time.monotonic()
            admin.execute('SELECT "%s".hoplock_force_release(%%s)' % SCHEMA, (lease_name,))
            assert term.wait(5)
            seen["lost"] = time.monotonic() - t0
            seen["t0"] = t0
            seen["cause"] = term.cause

        a.lead(fa)
        seen["tb"].join(10)
        # NoLease, or LeaseHeld when the follower already took it
        assert isinstance(seen["cause"], (hoplock.NoLease, hoplock.LeaseHeld)), seen
        assert seen["lost"] < 1.0
        assert got_b, "the follower never led"
        print("measure: python behind PgBouncer (watch): forced release -> term lost %.1f ms, "
              "follower leads %.1f ms" % (seen["lost"] * 1000, (got_b[0] - seen["t0"]) * 1000))
        a.close()
        b.close()
