"""The sync Elector against a real server."""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, List

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import hoplock
from conftest import SCHEMA, wait_until


def holder(admin: psycopg.Connection[Any], name: str) -> Any:
    row = admin.execute('SELECT owner, generation FROM "%s".hoplock_holder(%%s)' % SCHEMA,
                        (name,)).fetchone()
    return None if row is None or row[1] is None else tuple(row)


def in_wait(admin: psycopg.Connection[Any], name: str) -> int:
    return int(one(admin, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                   "AND query LIKE '%%hoplock_wait%%' AND pid <> pg_backend_pid()"))


def one(admin: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
    row = admin.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def lead_in_thread(e: hoplock.Elector, fn: Any) -> tuple[threading.Thread, List[Any]]:
    out: List[Any] = []

    def go() -> None:
        try:
            out.append(e.lead(fn))
        except BaseException as err:  # noqa: BLE001
            out.append(err)
    th = threading.Thread(target=go, daemon=True)
    th.start()
    return th, out


def test_lead_fenced_and_release(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    admin.execute("CREATE TABLE IF NOT EXISTS t_sync_work (generation bigint)")
    e = hoplock.Elector(dsn, lease_name, "a", ttl=2)

    def fn(term: hoplock.Term) -> int:
        assert not term.lost
        assert holder(admin, lease_name) == ("a", term.generation)
        with term.fenced() as conn:
            conn.execute("INSERT INTO t_sync_work VALUES (%s)", (term.generation,))
        return term.generation

    gen = e.lead(fn)
    assert isinstance(gen, int) and gen > 2 ** 53
    assert holder(admin, lease_name) is None   # released
    assert one(admin, "SELECT count(*) FROM t_sync_work WHERE generation = %s", (gen,)) == 1
    with pytest.raises(hoplock.FenceRefused):
        with e.fenced(gen) as conn:
            conn.execute("INSERT INTO t_sync_work VALUES (%s)", (gen,))
    e.close()


def test_follower_takes_over_on_return(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    a = hoplock.Elector(dsn, lease_name, "a", ttl=5)
    b = hoplock.Elector(dsn, lease_name, "b", ttl=5)
    times: dict[str, float] = {}
    go = threading.Event()

    def fa(term: hoplock.Term) -> None:
        go.set()
        wait_until(lambda: in_wait(admin, lease_name) >= 1)
        times["a_end"] = time.monotonic()

    def fb(term: hoplock.Term) -> int:
        times["b_start"] = time.monotonic()
        return term.generation

    th, out = lead_in_thread(a, fa)
    go.wait(5)
    gb = b.lead(fb)
    th.join(5)
    handover = times["b_start"] - times["a_end"]
    print("measure: python sync handover on return: %.1f ms" % (handover * 1000))
    assert handover < 1.0
    assert isinstance(gb, int)
    a.close()
    b.close()


@pytest.mark.parametrize("follow", ["listen", "watch"])
def test_forced_release_ends_term(dsn: str, admin: psycopg.Connection[Any], lease_name: str, follow: str) -> None:
    e = hoplock.Elector(dsn, lease_name, "a", ttl=30, follow=follow)
    seen: dict[str, Any] = {}

    def fn(term: hoplock.Term) -> None:
        t0 = time.monotonic()
        admin.execute('SELECT "%s".hoplock_force_release(%%s)' % SCHEMA, (lease_name,))
        assert term.wait(5)
        seen["delay"] = time.monotonic() - t0
        seen["cause"] = term.cause

    e.lead(fn)
    print("measure: python sync forced release -> term lost (%s): %.1f ms" % (follow, seen["delay"] * 1000))
    assert isinstance(seen["cause"], hoplock.NoLease)
    assert seen["delay"] < 1.0   # heard from the events, not at the renewal 10 s away
    e.close()


def test_renewal_errors_end_term_at_deadline(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    """Renewals that fail (55P03: the lease table locked) are retried, and
    the term ends by the local deadline, never later."""
    e = hoplock.Elector(dsn, lease_name, "a", ttl=1.0)
    seen: dict[str, Any] = {}

    def fn(term: hoplock.Term) -> None:
        with psycopg.connect(dsn) as locker:
            locker.execute("LOCK TABLE hoplock_internal.lease IN ACCESS EXCLUSIVE MODE")
            assert term.wait(3)
            seen["late"] = time.monotonic() - term.deadline
            seen["cause"] = term.cause
            locker.rollback()

    e.lead(fn)
    assert isinstance(seen["cause"], hoplock.LeaseExpired), seen
    assert seen["late"] < 0.05
    e.close()


def test_stop_during_campaign_leaves_pool_clean(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    admin.execute('SELECT "%s".hoplock_acquire(%%s, %%s, %%s)' % SCHEMA, (lease_name, "other", "30 s"))
    with ConnectionPool(dsn, min_size=1, max_size=4) as pool:
        e = hoplock.Elector(pool, lease_name, "a", ttl=5, poll=30)
        th, out = lead_in_thread(e, lambda term: None)
        wait_until(lambda: in_wait(admin, lease_name) >= 1)
        e.stop()
        th.join(5)
        assert isinstance(out[0], hoplock.Stopped)
        assert in_wait(admin, lease_name) == 0
        with pool.connection() as conn:   # the pool's connections are clean
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert not conn.autocommit   # as the pool made it
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert pool.get_stats().get("connections_lost", 0) == 0
    admin.execute('SELECT "%s".hoplock_force_release(%%s)' % SCHEMA, (lease_name,))


def test_no_cancel_stop_lets_the_wait_end(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    """no_cancel: stop() sends no cancel request -- the server still waits
    after it -- and lead() returns once the wait ends by itself (poll); the
    term that wait took, the holder having released meanwhile, is released."""
    admin.execute('SELECT "%s".hoplock_acquire(%%s, %%s, %%s)' % SCHEMA, (lease_name, "other", "30 s"))
    e = hoplock.Elector(dsn, lease_name, "a", ttl=5, poll=1.5, no_cancel=True)
    th, out = lead_in_thread(e, lambda term: None)
    wait_until(lambda: in_wait(admin, lease_name) >= 1)
    e.stop()
    time.sleep(0.3)
    assert in_wait(admin, lease_name) == 1      # not cancelled
    admin.execute('SELECT "%s".hoplock_release(%%s, %%s)' % SCHEMA, (lease_name, "other"))
    th.join(5)
    assert not th.is_alive()
    assert isinstance(out[0], hoplock.Stopped)
    assert in_wait(admin, lease_name) == 0
    assert holder(admin, lease_name) is None    # a's term, if it took one, released
    e.close()


def test_stop_hands_over_to_candidate(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    a = hoplock.Elector(dsn, lease_name, "a", ttl=10)
    b = hoplock.Elector(dsn, lease_name, "b", ttl=10, value="b:8080", poll=30)
    started = threading.Event()

    def fa(term: hoplock.Term) -> str:
        started.set()
        term.wait()
        assert term.cause is None   # stopped, not lost
        return "a"

    th, out = lead_in_thread(a, fa)
    started.wait(5)
    thb, outb = lead_in_thread(b, lambda term: (term.lease.value, term.lease.generation))
    wait_until(lambda: in_wait(admin, lease_name) >= 1)
    a.stop()
    th.join(5)
    thb.join(5)
    assert out == ["a"]
    value, gen = outb[0]
    assert value == "b:8080"
    how = admin.execute('SELECT how FROM "%s".hoplock_history WHERE name = %%s ORDER BY generation'
                        % SCHEMA, (lease_name,)).fetchall()
    assert how[0][0] == "handed off", how
    a.close()
    b.close()


def test_run_events(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    a = hoplock.Elector(dsn, lease_name, "a", ttl=1.5, value="a:1")
    b = hoplock.Elector(dsn, lease_name, "b", ttl=1.5)
    ev_a: List[hoplock.Event] = []
    ev_b: List[hoplock.Event] = []

    def consume(e: hoplock.Elector, out: List[hoplock.Event]) -> None:
        for ev in e.run():
            out.append(ev)

    ta = threading.Thread(target=consume, args=(a, ev_a), daemon=True)
    ta.start()
    wait_until(lambda: ev_a and ev_a[0].kind is hoplock.EventKind.ACQUIRED)
    tb = threading.Thread(target=consume, args=(b, ev_b), daemon=True)
    tb.start()
    wait_until(lambda: ev_b)
    wait_until(lambda: any(ev.kind is hoplock.EventKind.RENEWED for ev in ev_a), timeout=3)
    a.stop()
    ta.join(5)
    wait_until(lambda: any(ev.kind is hoplock.EventKind.ACQUIRED for ev in ev_b))
    b.stop()
    tb.join(5)
    kinds_a = [ev.kind.value for ev in ev_a]
    kinds_b = [ev.kind.value for ev in ev_b]
    assert kinds_a[0] == "acquired" and kinds_a[-1] == "lost" and "renewed" in kinds_a, kinds_a
    assert isinstance(ev_a[-1].error, hoplock.Stopped)
    assert kinds_b[0] == "leader", kinds_b
    assert ev_b[0].lease is not None and ev_b[0].lease.owner == "a" and ev_b[0].lease.value == "a:1"
    assert ev_b[0].lease.generation == ev_a[0].lease.generation  # type: ignore[union-attr]
    assert kinds_b[1] == "acquired" and kinds_b[-1] == "lost", kinds_b
    a.close()
    b.close()


def _backends(admin: psycopg.Connection[Any], app: str) -> List[int]:
    return [r[0] for r in admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                                        (app,)).fetchall()]


def test_health(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    """Unhealthy when it leads but has not renewed within the ttl (its
    renewals hang: their backends stopped), and when its campaign is
    wedged (the backend of its wait stopped)."""
    app = "hl-health-%d" % os.getpid()
    e = hoplock.Elector(dsn, lease_name, "a", ttl=1.0, release_timeout=0.5,
                        connect_kwargs={"application_name": app})
    seen: dict[str, Any] = {}

    def fn(term: hoplock.Term) -> None:
        assert e.health().ok and e.health().leading
        pids = _backends(admin, app)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(1.2)
            seen["h"] = e.health()
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        term.wait(2)

    e.lead(fn)
    assert not seen["h"].ok and "not renewed" in seen["h"].reason, seen
    e.close()

    admin.execute('SELECT "%s".hoplock_acquire(%%s, %%s, %%s)' % SCHEMA, (lease_name, "other", "30 s"))
    e = hoplock.Elector(dsn, lease_name, "a", ttl=1.0, release_timeout=0.5,
                        connect_kwargs={"application_name": app})
    th, out = lead_in_thread(e, lambda term: None)
    wait_until(lambda: in_wait(admin, lease_name) >= 1)
    assert e.health().ok
    pids = _backends(admin, app)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(0.33 + 1.0 + 0.5 + 0.3)
        h = e.health()
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    assert not h.ok and "wedged" in h.reason, h
    e.stop()
    th.join(5)
    admin.execute('SELECT "%s".hoplock_force_release(%%s)' % SCHEMA, (lease_name,))
    e.close()


def test_min_hold(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    e = hoplock.Elector(dsn, lease_name, "a", ttl=5, min_hold=3)
    e.lead(lambda term: None)
    assert one(admin, 'SELECT "%s".hoplock_acquire(%%s, %%s, %%s) IS NULL' % SCHEMA,
               (lease_name, "b", "5 s")), "the hold keeps the name from others"
    admin.execute('SELECT "%s".hoplock_force_release(%%s)' % SCHEMA, (lease_name,))
    e.close()


def test_parse_payload_exact() -> None:
    text = ('{"seq": 1740224708380284146, "seq_text": "1740224708380284147", "event": "acquired",'
            ' "name": "n", "owner": "o", "generation": 1.7402247083802731e18,'
            ' "generation_text": "1740224708380273043", "expires_at": "x", "value": "v"}')
    p = hoplock.parse_payload(text)
    assert p is not None
    assert p.seq == 1740224708380284147 and p.generation == 1740224708380273043
    assert p.value == "v" and p.owner == "o"
    assert hoplock.parse_payload("not json") is None
    assert hoplock.parse_payload('{"event": 1, "name": "n"}') is None
    assert hoplock.parse_payload('[' * 100000) is None


def test_bad_settings() -> None:
    with pytest.raises(ValueError):
        hoplock.Elector("", "n", ttl=0)
    with pytest.raises(ValueError):
        hoplock.Elector("", "n", ttl=1, renew=1)
    with pytest.raises(ValueError):
        hoplock.Elector("", "", ttl=1)


def test_ctrl_c_in_wait_leaves_pool_clean(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    """Ctrl-C (KeyboardInterrupt in the main thread) during the wait: the
    statement is cancelled in the server, the pooled connection comes
    back idle, and the interrupt goes on."""
    import _thread
    admin.execute('SELECT "%s".hoplock_acquire(%%s, %%s, %%s)' % SCHEMA, (lease_name, "other", "30 s"))
    with ConnectionPool(dsn, min_size=2, max_size=2) as pool:
        e = hoplock.Elector(pool, lease_name, "a", ttl=5, poll=30, follow="watch")

        seen: List[float] = []

        def interrupt() -> None:
            # this Elector's own wait (another test's may still be going:
            # in_wait counts every hoplock_wait), however long a loaded
            # machine takes to get it going
            with psycopg.connect(dsn, autocommit=True) as watcher:
                wait_until(lambda: one(watcher, 'SELECT count(*) FROM "%s".hoplock_candidates '
                                                "WHERE name = %%s AND owner = 'a'" % SCHEMA,
                                       (lease_name,)) >= 1, timeout=25)
            seen.append(time.monotonic())
            _thread.interrupt_main()
        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            e.lead(lambda term: None)
        assert seen, "the wait never showed in pg_stat_activity"
        assert in_wait(admin, lease_name) == 0
        for _ in range(2):
            with pool.connection() as conn:
                assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert pool.get_stats().get("connections_lost", 0) == 0
    admin.execute('SELECT "%s".hoplock_force_release(%%s)' % SCHEMA, (lease_name,))


def test_wait_outlasting_ttl_keeps_its_term(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    """A wait longer than the ttl (poll > ttl) that gets the lease late in
    it: the term is renewed and led, not released unused for a later one."""
    admin.execute('SELECT "%s".hoplock_acquire(%%s, %%s, %%s::interval)' % SCHEMA, (lease_name, "holder", "30 s"))
    e = hoplock.Elector(dsn, lease_name, "late", ttl=1, poll=5)

    def release_late() -> None:
        wait_until(lambda: in_wait(admin, lease_name) >= 1)
        time.sleep(1.5)   # past the candidate's ttl, within its wait
        admin.execute('SELECT "%s".hoplock_release(%%s, %%s)' % SCHEMA, (lease_name, "holder"))

    th = threading.Thread(target=release_late, daemon=True)
    th.start()

    def fn(term: hoplock.Term) -> int:
        assert not term.lost
        assert holder(admin, lease_name) == ("late", term.generation)
        return term.generation

    gen = e.lead(fn)
    th.join(5)
    terms = admin.execute('SELECT owner, generation, how FROM "%s".hoplock_history WHERE name = %%s '
                          'ORDER BY generation' % SCHEMA, (lease_name,)).fetchall()
    assert [t[0] for t in terms] == ["holder", "late"], terms   # no term released unused
    assert terms[1][1] == gen
    e.close()
