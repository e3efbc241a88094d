"""The asyncio Elector against a real server (asyncio.run in each test:
no plugin needed)."""
from __future__ import annotations

import asyncio
import time
from typing import Any, List

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import hoplock
from conftest import SCHEMA


async def in_wait(dsn: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                                 "AND query LIKE '%%hoplock_wait%%' AND pid <> pg_backend_pid()")
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def until(cond: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if await cond():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not met")


def test_async_lead_and_handover(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    admin.execute("CREATE TABLE IF NOT EXISTS t_async_work (generation bigint)")

    async def main() -> None:
        a = hoplock.AsyncElector(dsn, lease_name, "a", ttl=5)
        b = hoplock.AsyncElector(dsn, lease_name, "b", ttl=5)
        t: dict[str, float] = {}

        async def fa(term: hoplock.AsyncTerm) -> int:
            async with term.fenced() as conn:
                await conn.execute("INSERT INTO t_async_work VALUES (%s)", (term.generation,))
            await until(lambda: _gt(in_wait(dsn), 0))
            t["a_end"] = time.monotonic()
            return term.generation

        async def fb(term: hoplock.AsyncTerm) -> int:
            t["b_start"] = time.monotonic()
            return term.generation

        ga_task = asyncio.ensure_future(a.lead(fa))
        await asyncio.sleep(0.1)
        gb = await b.lead(fb)
        ga = await ga_task
        assert gb > ga
        print("measure: python async handover on return: %.1f ms" % ((t["b_start"] - t["a_end"]) * 1000))
        await a.close()
        await b.close()
    asyncio.run(main())


async def _gt(aw: Any, n: int) -> bool:
    return bool(await aw > n)


@pytest.mark.parametrize("follow", ["listen", "watch"])
def test_async_loss_cancels_fn(dsn: str, admin: psycopg.Connection[Any], lease_name: str, follow: str) -> None:
    async def main() -> None:
        async with AsyncConnectionPool(dsn, min_size=1, max_size=4) as pool:
            e = hoplock.AsyncElector(pool, lease_name, "a", ttl=30, follow=follow)
            seen: dict[str, Any] = {}

            async def fn(term: hoplock.AsyncTerm) -> None:
                seen["t0"] = time.monotonic()
                admin.execute('SELECT "%s".hoplock_force_release(%%s)' % SCHEMA, (lease_name,))
                try:
                    await asyncio.sleep(20)
                except asyncio.CancelledError:
                    seen["t1"] = time.monotonic()
                    raise

            with pytest.raises(hoplock.LeadershipLost) as info:
                await e.lead(fn)
            assert isinstance(info.value.cause, hoplock.NoLease)
            print("measure: python async forced release -> fn cancelled (%s): %.1f ms"
                  % (follow, (seen["t1"] - seen["t0"]) * 1000))
            assert seen["t1"] - seen["t0"] < 1.0
            stats = pool.get_stats()
            assert stats.get("connections_lost", 0) == 0
    asyncio.run(main())


def test_async_stop_in_wait_leaves_pool_clean(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    admin.execute('SELECT "%s".hoplock_acquire(%%s, %%s, %%s)' % SCHEMA, (lease_name, "other", "30 s"))

    async def main() -> None:
        async with AsyncConnectionPool(dsn, min_size=2, max_size=2) as pool:
            e = hoplock.AsyncElector(pool, lease_name, "a", ttl=5, poll=30)
            task = asyncio.ensure_future(e.lead(_never))
            await until(lambda: _gt(in_wait(dsn), 0))
            e.stop()
            with pytest.raises(hoplock.Stopped):
                await asyncio.wait_for(task, 5)
            assert await in_wait(dsn) == 0
            # a cancelled caller, too: the wait is cancelled in the server
            task = asyncio.ensure_future(hoplock.AsyncElector(pool, lease_name, "b", ttl=5, poll=30).lead(_never))
            await until(lambda: _gt(in_wait(dsn), 0))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await in_wait(dsn) == 0
            for _ in range(2):   # both connections idle, as the pool lent them
                async with pool.connection() as conn:
                    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                    assert not conn.autocommit
            assert pool.get_stats().get("connections_lost", 0) == 0
    asyncio.run(main())
    admin.execute('SELECT "%s".hoplock_force_release(%%s)' % SCHEMA, (lease_name,))


def test_async_no_cancel_lets_the_wait_end(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    """no_cancel: stop() sends no cancel request -- the server still waits
    after it -- and lead() raises Stopped once the wait ends by itself; the
    term that wait took (the holder released meanwhile) is released."""
    admin.execute('SELECT "%s".hoplock_acquire(%%s, %%s, %%s)' % SCHEMA, (lease_name, "other", "30 s"))

    async def main() -> None:
        e = hoplock.AsyncElector(dsn, lease_name, "a", ttl=5, poll=1.5, no_cancel=True)
        task = asyncio.ensure_future(e.lead(_never_long))
        await until(lambda: _gt(in_wait(dsn), 0))
        e.stop()
        await asyncio.sleep(0.3)
        assert await in_wait(dsn) == 1      # not cancelled
        admin.execute('SELECT "%s".hoplock_release(%%s, %%s)' % SCHEMA, (lease_name, "other"))
        with pytest.raises(hoplock.Stopped):
            await asyncio.wait_for(task, 5)
        assert await in_wait(dsn) == 0
        await e.close()
    asyncio.run(main())
    row = admin.execute('SELECT owner FROM "%s".hoplock_holder(%%s)' % SCHEMA, (lease_name,)).fetchone()
    assert row is None or row[0] is None, row


async def _never_long(term: hoplock.AsyncTerm) -> None:
    await asyncio.sleep(3600)


async def _never(term: hoplock.AsyncTerm) -> None:
    raise AssertionError("led")


def test_async_run_events_and_stop_hands_over(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    async def main() -> None:
        a = hoplock.AsyncElector(dsn, lease_name, "a", ttl=1.5, value="a:1")
        b = hoplock.AsyncElector(dsn, lease_name, "b", ttl=1.5, poll=30)
        ev_a: List[hoplock.Event] = []
        ev_b: List[hoplock.Event] = []

        async def consume(e: hoplock.AsyncElector, out: List[hoplock.Event]) -> None:
            async for ev in e.run():
                out.append(ev)

        ta = asyncio.ensure_future(consume(a, ev_a))

        async def has(out: List[hoplock.Event], kind: hoplock.EventKind) -> bool:
            return any(ev.kind is kind for ev in out)
        await until(lambda: has(ev_a, hoplock.EventKind.ACQUIRED))
        tb = asyncio.ensure_future(consume(b, ev_b))
        await until(lambda: has(ev_b, hoplock.EventKind.LEADER))
        await until(lambda: has(ev_a, hoplock.EventKind.RENEWED), 3)
        await until(lambda: _gt(in_wait(dsn), 0))
        a.stop()
        await ta
        await until(lambda: has(ev_b, hoplock.EventKind.ACQUIRED))
        b.stop()
        await tb
        ka = [ev.kind.value for ev in ev_a]
        kb = [ev.kind.value for ev in ev_b]
        assert ka[0] == "acquired" and "renewed" in ka and ka[-1] == "lost", ka
        assert kb[0] == "leader" and ev_b[0].lease and ev_b[0].lease.value == "a:1", kb
        assert "acquired" in kb and kb[-1] == "lost", kb
        await a.close()
        await b.close()
    asyncio.run(main())
    how = admin.execute('SELECT how FROM "%s".hoplock_history WHERE name = %%s ORDER BY generation'
                        % SCHEMA, (lease_name,)).fetchall()
    assert how[0][0] == "handed off", how


def test_async_wait_outlasting_ttl_keeps_its_term(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    """A wait longer than the ttl (poll > ttl) that gets the lease late in
    it: the term is renewed and led, not released unused for a later one."""
    admin.execute('SELECT "%s".hoplock_acquire(%%s, %%s, %%s::interval)' % SCHEMA, (lease_name, "holder", "30 s"))

    async def main() -> int:
        e = hoplock.AsyncElector(dsn, lease_name, "late", ttl=1, poll=5)

        async def release_late() -> None:
            await until(lambda: _gt(in_wait(dsn), 0))
            await asyncio.sleep(1.5)   # past the candidate's ttl, within its wait
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                await conn.execute('SELECT "%s".hoplock_release(%%s, %%s)' % SCHEMA, (lease_name, "holder"))

        async def fn(term: hoplock.AsyncTerm) -> int:
            assert not term.lost
            return term.generation

        rel = asyncio.ensure_future(release_late())
        gen = await e.lead(fn)
        await rel
        await e.close()
        return gen

    gen = asyncio.run(main())
    terms = admin.execute('SELECT owner, generation, how FROM "%s".hoplock_history WHERE name = %%s '
                          'ORDER BY generation' % SCHEMA, (lease_name,)).fetchall()
    assert [t[0] for t in terms] == ["holder", "late"], terms   # no term released unused
    assert terms[1][1] == gen
