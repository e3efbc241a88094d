"""Leaders in processes of their own, killed (SIGKILL), stopped (SIGSTOP)
and terminated (SIGTERM), a second process taking over; then a history
checker over the rows they wrote through hoplock_fenced."""
from __future__ import annotations

import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, List, Optional, Tuple

import psycopg
import pytest
from psycopg import sql

from conftest import SCHEMA

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")
ROUNDS = int(os.environ.get("HOPLOCK_TEST_ROUNDS", "5"))


class Child:
    def __init__(self, dsn: str, name: str, table: str, ttl: float, bound: bool, follow: str = "listen",
                 mode: str = "sync", slots: int = 1) -> None:
        self.p = subprocess.Popen([sys.executable, CHILD, dsn, name, table, str(ttl), "1" if bound else "0",
                                   follow, mode, str(slots)], stdout=subprocess.PIPE, text=True)
        self.lines: "queue.Queue[List[str]]" = queue.Queue()
        self.log: List[List[str]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.lines.put(line.split())
        self.lines.put(["CLOSED"])

    def expect(self, word: str, timeout: float = 10.0) -> List[str]:
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError("child %d: no %s within %.1f s (saw %s)" % (self.p.pid, word, timeout, self.log))
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            self.log.append(line)
            if line[0] == word:
                return line
            if line[0] == "CLOSED":
                raise AssertionError("child %d exited before %s: %s" % (self.p.pid, word, self.log))

    def drain(self) -> None:
        while True:
            try:
                self.log.append(self.lines.get_nowait())
            except queue.Empty:
                return

    def kill(self) -> None:
        if self.p.poll() is None:
            with_cont = True
            try:
                self.p.send_signal(signal.SIGCONT) if with_cont else None
                self.p.kill()
            except ProcessLookupError:
                pass
        self.p.wait(10)


def make_table(admin: psycopg.Connection[Any], name: str, table: str) -> None:
    admin.execute("CREATE TABLE %s (id bigserial PRIMARY KEY, owner text NOT NULL, generation bigint NOT NULL)"
                  % table)
    admin.execute(sql.SQL("CREATE TRIGGER {} BEFORE INSERT OR UPDATE OR DELETE ON {} FOR EACH ROW "
                          "EXECUTE FUNCTION {}.hoplock_fenced({}, 'generation')").format(
                              sql.Identifier(table + "_fenced"), sql.Identifier(table),
                              sql.Identifier(SCHEMA), sql.Literal(name)))


def check_history(admin: psycopg.Connection[Any], name: str, table: str, children: List[Child]) -> int:
    """No two terms overlap; generations rise with time; every row lies in
    its own term (committed after it began, before the next began, and,
    unless it lapsed, before it ended); row generations never go back in
    id order; no write with a lost generation committed."""
    terms = admin.execute('SELECT generation, owner, acquired_at, ended_at, how FROM "%s".hoplock_history '
                          'WHERE name = %%s ORDER BY acquired_at' % SCHEMA, (name,)).fetchall()
    assert terms, "no terms"
    for a, b in zip(terms, terms[1:]):
        assert b[0] > a[0], "generations do not rise: %s then %s" % (a, b)
        assert a[3] is not None and a[3] <= b[2], "terms overlap: %s and %s" % (a, b)
    by_gen = {t[0]: (i, t) for i, t in enumerate(terms)}
    rows = admin.execute("SELECT id, owner, generation, pg_xact_commit_timestamp(xmin) FROM %s ORDER BY id"
                         % table).fetchall()
    assert rows, "no rows"
    last = 0
    for rid, owner, gen, committed in rows:
        assert gen >= last, "row %d goes back to generation %d after %d" % (rid, gen, last)
        last = gen
        assert gen in by_gen, "row %d: generation %d is no term of %s" % (rid, gen, name)
        i, t = by_gen[gen]
        assert owner == t[1], "row %d written by %s in %s's term" % (rid, owner, t[1])
        assert committed >= t[2], "row %d committed before its term began" % rid
        if i + 1 < len(terms):
            assert committed <= terms[i + 1][2], "row %d committed after the next term began" % rid
        if t[3] is not None and t[4] != "expired":
            assert committed <= t[3], "row %d committed after its term ended (%s)" % (rid, t[4])
    for ch in children:
        ch.drain()
        assert not any(line[0] == "STALE-COMMITTED" for line in ch.log), ch.log
    return len(rows)


def leader_of(children: List[Child], timeout: float = 10.0) -> Tuple[Child, List[str]]:
    """The child that prints LEAD next (the others' lines are kept)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for ch in children:
            try:
                line = ch.lines.get(timeout=0.005)
            except queue.Empty:
                continue
            ch.log.append(line)
            if line[0] == "LEAD":
                return ch, line
    raise AssertionError("nobody leads: %s" % [ch.log for ch in children])


def run_rounds(admin: psycopg.Connection[Any], lease_name: str, sig: int, ttl: float, bound: bool,
               rounds: int, label: str, mode: str = "sync") -> List[float]:
    table = "hist_%d_%d" % (os.getpid(), abs(hash(lease_name)) % 100000)
    make_table(admin, lease_name, table)
    children = [Child(admin_dsn(admin), lease_name, table, ttl, bound, mode=mode) for _ in range(2)]
    takeovers: List[float] = []
    try:
        leader, _ = leader_of(children)
        leader.expect("ROW")
        for _ in range(rounds):
            others = [ch for ch in children if ch is not leader]
            for ch in others:   # the follower waits in hoplock_wait as a candidate
                wait_candidate(admin, lease_name, len(others))
            t0 = time.time()
            leader.p.send_signal(sig)
            new, _ = leader_of(others, timeout=ttl + 10)
            row = new.expect("ROW", timeout=5)
            takeovers.append(float(row[2]) - t0)
            if sig == signal.SIGTERM:
                leader.expect("EXIT")
                assert leader.p.wait(10) == 0
            elif sig == signal.SIGKILL:
                leader.p.wait(10)
            children.remove(leader)
            children.append(Child(admin_dsn(admin), lease_name, table, ttl, bound, mode=mode))
            leader = new
        n = check_history(admin, lease_name, table, children)
        if sig == signal.SIGTERM:
            how = [r[0] for r in admin.execute('SELECT how FROM "%s".hoplock_history WHERE name = %%s '
                                               'ORDER BY generation' % SCHEMA, (lease_name,)).fetchall()]
            assert how[:rounds] == ["handed off"] * rounds, how
    finally:
        for ch in children:
            ch.kill()
    takeovers.sort()
    print("measure: python %s (ttl %.1f s, %d rounds, %d rows): signal -> next leader's first fenced "
          "row p50 %.1f ms, max %.1f ms" % (label, ttl, rounds, n, statistics.median(takeovers) * 1000,
                                            takeovers[-1] * 1000))
    return takeovers


def admin_dsn(admin: psycopg.Connection[Any]) -> str:
    return admin.info.dsn


def wait_candidate(admin: psycopg.Connection[Any], name: str, n: int, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        row = admin.execute('SELECT count(*) FROM "%s".hoplock_candidates WHERE name = %%s' % SCHEMA,
                            (name,)).fetchone()
        if row and row[0] >= n:
            return
        time.sleep(0.005)
    raise AssertionError("no candidate waits")


def test_process_sigterm_hands_over(admin: psycopg.Connection[Any], lease_name: str) -> None:
    t = run_rounds(admin, lease_name, signal.SIGTERM, 10, False, ROUNDS, "SIGTERM (handoff)")
    assert t[-1] < 2.0


def test_process_kill_session_bound(admin: psycopg.Connection[Any], lease_name: str) -> None:
    t = run_rounds(admin, lease_name, signal.SIGKILL, 10, True, ROUNDS, "SIGKILL session-bound")
    assert t[-1] < 3.0


def test_process_async_sigterm_and_kill(admin: psycopg.Connection[Any], lease_name: str) -> None:
    """The same with AsyncElector processes: SIGTERM hands over (the
    loop's signal handler stops the Elector), SIGKILL of a session-bound
    leader lets the other in at once."""
    t = run_rounds(admin, lease_name, signal.SIGTERM, 10, True, max(ROUNDS // 2, 1), "asyncio SIGTERM (handoff)",
                   mode="async")
    assert t[-1] < 2.0
    t = run_rounds(admin, lease_name + "-k", signal.SIGKILL, 10, True, max(ROUNDS // 2, 1),
                   "asyncio SIGKILL session-bound", mode="async")
    assert t[-1] < 3.0


def test_process_kill_ttl_bound(admin: psycopg.Connection[Any], lease_name: str) -> None:
    t = run_rounds(admin, lease_name, signal.SIGKILL, 1.0, False, 2, "SIGKILL ttl-bound")
    assert t[0] > 0.3   # the ttl bounds it: nobody leads before the term lapses


def test_process_sigstop(admin: psycopg.Connection[Any], lease_name: str) -> None:
    """A leader stopped past its ttl: the other takes over; resumed, the
    old one finds its term lost and its write with the lost generation is
    refused by the trigger."""
    table = "hist_stop_%d" % os.getpid()
    make_table(admin, lease_name, table)
    ttl = 1.0
    children = [Child(admin_dsn(admin), lease_name, table, ttl, False) for _ in range(2)]
    try:
        leader, lead = leader_of(children)
        leader.expect("ROW")
        other = [ch for ch in children if ch is not leader][0]
        wait_candidate(admin, lease_name, 1)
        t0 = time.time()
        leader.p.send_signal(signal.SIGSTOP)
        _, new = leader_of([other], timeout=10)
        row = other.expect("ROW")
        time.sleep(max(0.0, t0 + 2.0 - time.time()))
        t1 = time.monotonic()
        leader.p.send_signal(signal.SIGCONT)
        end = leader.expect("END", timeout=5)
        resumed = time.monotonic() - t1
        assert end[2] in ("LeaseExpired", "NoLease", "LeaseHeld"), leader.log
        assert any(line[0] == "STALE-REFUSED" for line in leader.log), leader.log
        check_history(admin, lease_name, table, children)
        print("measure: python SIGSTOP (ttl %.1f s): stop -> next leader's first fenced row %.0f ms; "
              "resumed -> old leader's term over %.1f ms, its stale write refused"
              % (ttl, (float(row[2]) - t0) * 1000, resumed * 1000))
    finally:
        for ch in children:
            ch.kill()
