"""Electors with slots (slots => N): at most N lead at once, each in a term
and slot of its own; a killed leader's slot goes to a waiting one; an
event of another slot never ends a term; every Elector must agree on N."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from typing import Any, List, Optional

import psycopg
import pytest

import hoplock
from conftest import SCHEMA, wait_until
from test_process import Child, admin_dsn, make_table, wait_candidate


def slot_of(admin: psycopg.Connection[Any], name: str, generation: int) -> Optional[int]:
    row = admin.execute('SELECT slot FROM "%s".hoplock_leases WHERE name = %%s AND generation = %%s'
                        % SCHEMA, (name, generation)).fetchone()
    return None if row is None else row[0]


def running(admin: psycopg.Connection[Any], name: str) -> int:
    row = admin.execute('SELECT count(*) FROM "%s".hoplock_leases WHERE name = %%s AND NOT expired'
                        % SCHEMA, (name,)).fetchone()
    return int(row[0]) if row else 0


def notify(admin: psycopg.Connection[Any], payload: dict[str, Any]) -> None:
    """A payload on hoplock's channel as any role could send it."""
    admin.execute("SELECT pg_notify('hoplock', %s)", (json.dumps(payload),))


def check_slot_history(admin: psycopg.Connection[Any], name: str, table: str, slots: int,
                       children: List[Child]) -> None:
    """At no instant more than slots terms; the terms of a slot never
    overlap; every fenced row lies in its own term; no write with a lost
    generation committed."""
    terms = admin.execute('SELECT generation, owner, acquired_at, coalesce(ended_at, clock_timestamp()), slot '
                          'FROM "%s".hoplock_history WHERE name = %%s ORDER BY acquired_at' % SCHEMA,
                          (name,)).fetchall()
    assert len(terms) >= slots + 1, terms
    for t in terms:
        assert t[4] is not None and 1 <= t[4] <= slots, t
        at_once = [u for u in terms if u[2] <= t[2] < u[3]]
        assert len(at_once) <= slots, "more than %d terms at %s: %s" % (slots, t[2], at_once)
    for a in terms:
        for b in terms:
            if a is not b and a[4] == b[4] and a[2] <= b[2]:
                assert a[3] <= b[2], "terms of slot %d overlap: %s and %s" % (a[4], a, b)
    by_gen = {t[0]: t for t in terms}
    rows = admin.execute("SELECT owner, generation, pg_xact_commit_timestamp(xmin) FROM %s" % table).fetchall()
    assert rows, "no rows"
    for owner, gen, committed in rows:
        t = by_gen[gen]
        assert owner == t[1] and t[2] <= committed, (owner, gen, committed, t)
    for ch in children:
        ch.drain()
        assert not any(line[0] == "STALE-COMMITTED" for line in ch.log), ch.log


# The first term of a name with slots is begun before the others campaign:
# two waits that both begin a fresh name's slots at once may both wait out
# their timeout (the server's race, not the client's).


def next_lead(children: List[Child], timeout: float) -> tuple[Child, List[str]]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for ch in children:
            ch.drain()
            for line in ch.log:
                if line[0] == "LEAD" and line not in ch.seen_leads:   # type: ignore[attr-defined]
                    ch.seen_leads.append(line)   # type: ignore[attr-defined]
                    return ch, line
        time.sleep(0.005)
    raise AssertionError("nobody new leads: %s" % [ch.log for ch in children])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_slots_processes_take_over(admin: psycopg.Connection[Any], lease_name: str, mode: str) -> None:
    """Three leader processes with slots=2: two lead, each its slot (as
    hoplock_leases says); the third waits. SIGKILL one leader: the third
    takes its slot once its term lapses, and the other leader's term runs
    on through the other slot's expired and acquired events. Twice."""
    table = "slots_%s_%d" % (mode, os.getpid())
    make_table(admin, lease_name, table)
    ttl = 2.0

    def child() -> Child:
        ch = Child(admin_dsn(admin), lease_name, table, ttl, False, mode=mode, slots=2)
        ch.seen_leads = []   # type: ignore[attr-defined]
        return ch

    children = [child()]
    try:
        first = next_lead(children, 15)
        children += [child(), child()]
        leads = dict([first, next_lead(children, 15)])
        assert len(leads) == 2
        for line in leads.values():
            assert int(line[3]) == slot_of(admin, lease_name, int(line[1])), (line, leads)
        assert sorted(int(line[3]) for line in leads.values()) == [1, 2]
        wait_candidate(admin, lease_name, 1)
        time.sleep(0.3)
        assert running(admin, lease_name) == 2
        for _ in range(2):
            waiting = [ch for ch in children if ch not in leads][0]
            victim, survivor = list(leads)
            t0 = time.monotonic()
            victim.p.send_signal(signal.SIGKILL)
            victim.p.wait(10)
            new, line = next_lead([waiting], ttl + 10)
            took = time.monotonic() - t0
            assert int(line[3]) == int(leads[victim][3]), "took another slot: %s, %s" % (line, leads)
            assert int(line[3]) == slot_of(admin, lease_name, int(line[1]))
            assert took > ttl / 2, "led before the killed leader's term lapsed (%.3f s)" % took
            time.sleep(0.5)   # the survivor hears the other slot's events
            survivor.drain()
            assert not any(ln[0] == "END" for ln in survivor.log), survivor.log
            assert slot_of(admin, lease_name, int(leads[survivor][1])) == int(leads[survivor][3])
            print("measure: python %s slots=2 SIGKILL (ttl %.1f s) -> third leads in slot %s: %.0f ms"
                  % (mode, ttl, line[3], took * 1000))
            del leads[victim]
            leads[new] = line
            children.remove(victim)
            children.append(child())
            wait_candidate(admin, lease_name, 1)
        check_slot_history(admin, lease_name, table, 2, children)
    finally:
        for ch in children:
            ch.kill()


def _lead_until(e: hoplock.Elector, release: threading.Event, out: dict[str, Any]) -> threading.Thread:
    def fn(term: hoplock.Term) -> None:
        out["term"] = term
        while not term.lost and not release.is_set():
            time.sleep(0.01)
        out["lost"] = term.lost and not release.is_set()

    def go() -> None:
        try:
            e.lead(fn)
        except BaseException as err:  # noqa: BLE001
            out["err"] = err
    th = threading.Thread(target=go, daemon=True)
    th.start()
    return th


@pytest.mark.parametrize("follow", ["listen", "watch"])
def test_slots_other_slot_events_keep_term(dsn: str, admin: psycopg.Connection[Any], lease_name: str,
                                           follow: str) -> None:
    """a and b lead in slots 1 and 2. The one in slot 1 releases; c takes
    slot 1 (hoplock_holder now reads c's term). The one in slot 2 hears
    those events, and a payload without a slot, and leads on; a release of
    its own term by generation ends it at once."""
    es = {o: hoplock.Elector(dsn, lease_name, o, ttl=30, slots=2, follow=follow) for o in "abc"}
    stop = {o: threading.Event() for o in "abc"}
    out: dict[str, dict[str, Any]] = {o: {} for o in "abc"}
    ths = {"a": _lead_until(es["a"], stop["a"], out["a"])}
    wait_until(lambda: "term" in out["a"])
    ths["b"] = _lead_until(es["b"], stop["b"], out["b"])
    wait_until(lambda: "term" in out["b"])
    by_slot = {out[o]["term"].slot: o for o in "ab"}
    assert sorted(by_slot) == [1, 2], by_slot
    low, high = by_slot[1], by_slot[2]
    hterm = out[high]["term"]
    assert es[high].health().slot == 2 and es[low].health().slot == 1
    stop[low].set()
    ths[low].join(5)
    ths["c"] = _lead_until(es["c"], stop["c"], out["c"])
    wait_until(lambda: "term" in out["c"])
    assert out["c"]["term"].slot == 1
    notify(admin, {"event": "released", "name": lease_name, "owner": "x"})
    notify(admin, {"event": "expired", "name": lease_name, "owner": "x", "slot": 2})
    time.sleep(1.0)
    assert not hterm.lost and hterm.cause is None, hterm.cause
    assert not out["c"]["term"].lost
    t0 = time.monotonic()
    admin.execute('SELECT "%s".hoplock_release(%%s, %%s, %%s)' % SCHEMA, (lease_name, high, hterm.generation))
    assert hterm.wait(5)
    assert isinstance(hterm.cause, hoplock.NoLease), hterm.cause
    assert time.monotonic() - t0 < 2.0   # heard from its own slot's event, not at a renewal 10 s away
    for o in "abc":
        stop[o].set()
    for th in ths.values():
        th.join(5)
    for e in es.values():
        e.close()


def test_slots_async_other_slot_events_keep_term(dsn: str, admin: psycopg.Connection[Any],
                                                 lease_name: str) -> None:
    """The same with AsyncElectors."""
    async def main() -> None:
        es = {o: hoplock.AsyncElector(dsn, lease_name, o, ttl=30, slots=2) for o in "abc"}
        terms: dict[str, hoplock.AsyncTerm] = {}
        stop = {o: asyncio.Event() for o in "abc"}

        async def lead(o: str) -> None:
            async def fn(term: hoplock.AsyncTerm) -> None:
                terms[o] = term
                await stop[o].wait()
            try:
                await es[o].lead(fn)
            except hoplock.LeadershipLost:
                pass

        async def until(cond: Any) -> None:
            end = time.monotonic() + 10
            while not cond():
                assert time.monotonic() < end, "condition not met"
                await asyncio.sleep(0.005)

        tasks = {"a": asyncio.ensure_future(lead("a"))}
        await until(lambda: "a" in terms)
        tasks["b"] = asyncio.ensure_future(lead("b"))
        await until(lambda: "b" in terms)
        by_slot = {terms[o].slot: o for o in "ab"}
        assert sorted(by_slot) == [1, 2], by_slot   # type: ignore[type-var]
        low, high = by_slot[1], by_slot[2]
        assert es[high].health().slot == 2
        stop[low].set()
        await tasks[low]
        tasks["c"] = asyncio.ensure_future(lead("c"))
        await until(lambda: "c" in terms)
        assert terms["c"].slot == 1
        notify(admin, {"event": "released", "name": lease_name, "owner": "x"})
        await asyncio.sleep(1.0)
        assert not terms[high].lost and terms[high].cause is None, terms[high].cause
        admin.execute('SELECT "%s".hoplock_release(%%s, %%s, %%s)' % SCHEMA,
                      (lease_name, high, terms[high].generation))
        assert await terms[high].wait(5)
        assert isinstance(terms[high].cause, hoplock.NoLease)
        for o in "abc":
            stop[o].set()
        await asyncio.gather(*tasks.values())
        for e in es.values():
            await e.close()
    asyncio.run(main())


def test_slots_mismatch(dsn: str, admin: psycopg.Connection[Any], lease_name: str) -> None:
    """An Elector with another number of slots than the lease's gets a
    Permanent error naming both, sync and asyncio."""
    a = hoplock.Elector(dsn, lease_name, "a", ttl=30, slots=2)
    stop = threading.Event()
    out: dict[str, Any] = {}
    th = _lead_until(a, stop, out)
    wait_until(lambda: "term" in out)
    for n, want in ((1, 'has 2 slots, not 1'), (3, 'has 2 slots, not 3')):
        e = hoplock.Elector(dsn, lease_name, "b", ttl=30, slots=n)
        timer = threading.Timer(5, e.stop)   # Stopped, not a hang, if no error comes
        timer.start()
        with pytest.raises(hoplock.Permanent, match=want):
            e.lead(lambda term: None)
        timer.cancel()
        e.close()

    async def main() -> None:
        e = hoplock.AsyncElector(dsn, lease_name, "b", ttl=30)

        async def fn(term: hoplock.AsyncTerm) -> None:
            pass
        with pytest.raises(hoplock.Permanent, match='has 2 slots, not 1'):
            await asyncio.wait_for(e.lead(fn), 5)
        await e.close()
    asyncio.run(main())
    assert not out["term"].lost
    stop.set()
    th.join(5)
    a.close()


@pytest.mark.parametrize("bad", [0, -1, 1001, True, 2.0, "2"])
def test_slots_bad_setting(bad: Any) -> None:
    for cls in (hoplock.Elector, hoplock.AsyncElector):
        with pytest.raises(ValueError, match="slots must be an integer from 1 to 1000"):
            cls("", "n", slots=bad)


def test_slots_run_events_and_health(dsn: str, lease_name: str) -> None:
    """run() with slots: ACQUIRED, RENEWED and LOST carry the term's slot;
    health() reports it while leading."""
    es = [hoplock.Elector(dsn, lease_name, o, ttl=1.5, slots=2) for o in "ab"]
    evs: List[List[hoplock.Event]] = [[], []]
    health: List[Optional[int]] = [None, None]

    def consume(i: int) -> None:
        for ev in es[i].run():
            evs[i].append(ev)
            if ev.kind is hoplock.EventKind.RENEWED:
                health[i] = es[i].health().slot

    ths = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(2)]
    ths[0].start()
    wait_until(lambda: evs[0])
    ths[1].start()
    wait_until(lambda: all(any(ev.kind is hoplock.EventKind.RENEWED for ev in e) for e in evs), timeout=5)
    for e in es:
        e.stop()
    for th in ths:
        th.join(5)
    slots = []
    for i, got in enumerate(evs):
        got = [ev for ev in got if ev.kind is not hoplock.EventKind.LEADER]   # the other's term, first
        kinds = [ev.kind.value for ev in got]
        assert kinds[0] == "acquired" and kinds[-1] == "lost", kinds
        slot = got[0].lease.slot if got[0].lease else None
        assert slot in (1, 2)
        assert all(ev.lease is not None and ev.lease.slot == slot for ev in got), got
        assert health[i] == slot
        assert es[i].health().slot is None   # no longer leads
        slots.append(slot)
    assert sorted(s for s in slots if s is not None) == [1, 2]
    for el in es:
        el.close()


def test_slots_readme_block_runs(dsn: str, tmp_path: Any) -> None:
    """The README's Slots example runs as pasted."""
    import re
    import subprocess
    import sys
    from psycopg.conninfo import conninfo_to_dict
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "README.md")) as f:
        text = f.read()
    m = re.search(r"### Slots\n.*?```python\n(.*?)```", text, re.S)
    assert m, "no Slots example"
    path = tmp_path / "slots.py"
    path.write_text(m.group(1))
    params = conninfo_to_dict(dsn)
    env = dict(os.environ, PYTHONPATH=os.path.join(here, ".."), PGHOST=str(params.get("host", "")),
               PGPORT=str(params.get("port", "")), PGUSER=str(params.get("user", "")),
               PGDATABASE=str(params.get("dbname", "")))
    out = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert re.match(r"worker in slot [123] generation [0-9]+\n\Z", out.stdout), out.stdout
