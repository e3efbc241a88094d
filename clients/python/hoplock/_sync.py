"""The Elector on psycopg 3's Connection and ConnectionPool."""
from __future__ import annotations

import contextlib
import inspect
import os
import queue
import select
import threading
import time
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union

import psycopg
from psycopg import pq, sql

from . import _common as c
from ._common import (Event, EventKind, Follow, HandedOff, Health, Lease, LeaseExpired,
                      LeaseHeld, LeadershipLost, NoCandidate, NoLease, Permanent, StepDown,
                      Stopped, FenceRefused)

try:
    from psycopg_pool import ConnectionPool
except ImportError:  # pragma: no cover - the pool is optional
    ConnectionPool = None  # type: ignore[assignment,misc]

T = TypeVar("T")
Conn = psycopg.Connection[Any]
_IDLE = pq.TransactionStatus.IDLE

# psycopg 3.2 gives notifies() a timeout; 3.1 needs a select on the socket.
_NOTIFIES_TIMEOUT = "timeout" in inspect.signature(psycopg.Connection.notifies).parameters


class _Source:
    """Connections from a conninfo string (kept in a small free list of
    our own) or from a psycopg_pool.ConnectionPool. take() hands out an
    idle autocommit connection; give() takes it back, discarding it unless
    it is idle (never returning one mid-query or mid-transaction)."""

    def __init__(self, source: Union[str, "ConnectionPool"], connect_kwargs: dict[str, Any]) -> None:
        self.pool = None if isinstance(source, str) else source
        self.conninfo = source if isinstance(source, str) else ""
        self.kwargs = connect_kwargs
        self.free: List[Conn] = []
        self.lock = threading.Lock()
        self.autocommit: dict[int, bool] = {}

    def take(self) -> Conn:
        if self.pool is not None:
            conn: Conn = self.pool.getconn()
            self.autocommit[id(conn)] = conn.autocommit
            if conn.info.transaction_status != _IDLE:
                conn.rollback()
            conn.autocommit = True
            return conn
        with self.lock:
            while self.free:
                conn = self.free.pop()
                if not conn.closed:
                    return conn
        return psycopg.connect(self.conninfo, autocommit=True, **self.kwargs)

    def give(self, conn: Conn, discard: bool = False) -> None:
        clean = not conn.closed and not conn.broken and conn.info.transaction_status == _IDLE
        if not clean or discard:
            with contextlib.suppress(Exception):
                conn.close()
        if self.pool is not None:
            if not conn.closed:
                conn.autocommit = self.autocommit.pop(id(conn), False)
            else:
                self.autocommit.pop(id(conn), None)
            self.pool.putconn(conn)
            return
        if not conn.closed:
            with self.lock:
                self.free.append(conn)

    @contextlib.contextmanager
    def conn(self) -> Iterator[Conn]:
        conn = self.take()
        try:
            yield conn
        finally:
            self.give(conn)

    def close(self) -> None:
        with self.lock:
            free, self.free = self.free, []
        for conn in free:
            with contextlib.suppress(Exception):
                conn.close()


class _Watcher:
    """Hears of changes to one lease: LISTEN on a connection of its own, or
    hoplock_watch in a loop. poll(timeout) returns whether anything
    happened to the name (an event of it, or a restart: read the lease
    again). Used by one thread at a time."""

    def __init__(self, e: "Elector") -> None:
        self.e = e
        self.conn: Optional[Conn] = None
        self.after: Optional[int] = None
        self.seen: set[int] = set()
        self.pending: List[psycopg.Notify] = []
        self.payloads: List[c.Payload] = []
        # wake() ends a poll at once: a byte on this pipe ends the select,
        # and a hoplock_watch in flight is cancelled in the server.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.woken = threading.Event()
        self._mu = threading.RLock()
        self._call: Optional[Conn] = None
        # the slot of the term this Elector runs (slots above 1): an event
        # of another slot is not about it
        self.slot: Optional[int] = None

    def wake(self) -> None:
        self.woken.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        with self._mu:
            conn = self._call
        if conn is not None and not self.e.s.no_cancel:
            with contextlib.suppress(Exception):
                conn.cancel()

    def _drain_wake(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self._wake_r, 64):
                pass

    def start(self) -> bool:
        """(Re)connects; True once it listens (or knows its position)."""
        e = self.e
        try:
            if e.s.follow is Follow.WATCH:
                row = e._one(e.q.position, ())
                self.after = int(row[0]) if row and row[0] is not None else 0
                return True
            conn = e._src.take()
            channel = conn.execute(c.CHANNEL, prepare=False).fetchone()
            name = (channel[0] if channel and channel[0] else "hoplock")
            conn.add_notify_handler(self.pending.append)
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
            self.conn = conn
            return True
        except Exception as err:  # noqa: BLE001 - retried at the next poll
            c.log.warning("hoplock: could not follow the events: %s", err)
            return False

    def close(self) -> None:
        self._close_conn()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _close_conn(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.remove_notify_handler(self.pending.append)
                if not conn.closed and conn.info.transaction_status == _IDLE:
                    conn.execute("UNLISTEN *")
            self.e._src.give(conn)

    def _relevant(self, payloads: Sequence[str]) -> bool:
        hit = False
        for text in payloads:
            p = c.parse_payload(text)
            if p is None or p.name != self.e.s.name:
                continue
            if c.other_slot(p.slot, self.slot):
                continue   # another slot's term: not ours
            if p.seq is not None:
                if p.seq in self.seen:
                    continue   # a repeat
                self.seen.add(p.seq)
                if len(self.seen) > 4096:
                    self.seen = set(sorted(self.seen)[-1024:])
            self.payloads.append(p)
            hit = True
        return hit

    def poll(self, timeout: float) -> bool:
        timeout = max(timeout, 0.0)
        if self.e.s.follow is Follow.WATCH:
            return self._poll_watch(timeout)
        if self.conn is None or self.conn.closed:
            if self.conn is not None:
                self._close_conn()
            if not self.start():
                self.e._stop_evt.wait(min(timeout, 1.0))
                return False
            return True   # a restart: read the lease again
        conn = self.conn
        try:
            if not self.pending and not self.woken.is_set():
                if _NOTIFIES_TIMEOUT:
                    # psycopg 3.2: notifies() with a timeout; in slices,
                    # so that wake() is heard within 0.1 s
                    for n in conn.notifies(timeout=min(timeout, 0.1), stop_after=1):  # type: ignore[call-arg]
                        self.pending.append(n)
                else:
                    # psycopg 3.1: notifies() has no timeout; select on the
                    # socket (and the wake pipe), then read what came
                    r, _, _ = select.select([conn.fileno(), self._wake_r], [], [], timeout)
                    self._drain_wake()
                    if conn.fileno() in r:
                        conn.pgconn.consume_input()
                        if conn.pgconn.status != pq.ConnStatus.OK:
                            raise psycopg.OperationalError("the listening connection was lost")
            if not _NOTIFIES_TIMEOUT:
                enc = conn.info.encoding
                while True:
                    pgn = conn.pgconn.notifies()
                    if pgn is None:
                        break
                    self.pending.append(psycopg.Notify(pgn.relname.decode(enc), pgn.extra.decode(enc),
                                                       pgn.be_pid))
        except (psycopg.Error, OSError, ValueError) as err:
            c.log.warning("hoplock: lost the listening connection: %s", err)
            with contextlib.suppress(Exception):
                conn.close()
            self._close_conn()
            return True
        got, self.pending = self.pending, []
        return self._relevant([n.payload for n in got])

    def _watch_call(self, timeout: float) -> List[Tuple[Any, ...]]:
        """One hoplock_watch, cancelled in the server by wake() or stop()
        (then _Cancelled, the connection given back idle)."""
        e = self.e
        conn = e._src.take()
        try:
            with self._mu:
                self._call = conn
            with e._mu:
                e._inflight.add(conn)
            if self.woken.is_set() or e._stop_evt.is_set():
                raise _Cancelled()
            try:
                return conn.execute(e.q.watch, (self.after, c.interval(min(timeout, e.s.watch_wait))),
                                    prepare=False).fetchall()
            except psycopg.errors.QueryCanceled:
                if self.woken.is_set() or e._stop_evt.is_set():
                    raise _Cancelled() from None
                raise
        finally:
            with self._mu:
                self._call = None
            with e._mu:
                e._inflight.discard(conn)
            e._src.give(conn)

    def _poll_watch(self, timeout: float) -> bool:
        e = self.e
        if self.after is None:
            return self.start()
        if self.woken.is_set() or e._stop_evt.is_set():
            return False
        try:
            rows = self._watch_call(timeout)
        except _Cancelled:
            return False
        except psycopg.Error as err:
            if err.sqlstate == "HL001":
                self.after = None
                self.start()
                return True
            c.log.warning("hoplock: hoplock_watch failed: %s", err)
            e._stop_evt.wait(min(timeout, e.s.renew / 10))
            return True
        hit = False
        for row in rows:
            seq = int(row[0])
            if seq > self.after:
                self.after = seq
            if row[1] == e.s.name and not c.other_slot(row[2] if len(row) > 2 else None, self.slot):
                hit = True
        return hit


class _Cancelled(Exception):
    """A blocking call cancelled by stop()."""


class Term:
    """The term fn runs in. lost tells whether it is over (it looks at the
    deadline itself: a process that was stopped past it learns so at once);
    wait() sleeps until it is; check() raises LeadershipLost once it is.
    cause says why it ended. fenced() runs a unit of work in a fenced
    transaction."""

    def __init__(self, e: "Elector", lease: Lease, sent: float, own_watcher: Optional[_Watcher],
                 events: Optional["queue.Queue[Optional[Event]]"]) -> None:
        self.e = e
        self._lease = lease
        self._mu = threading.RLock()
        self._ended = threading.Event()
        self._stopped = threading.Event()
        self._hint = threading.Event()
        self._calls = threading.Lock()
        self.deadline = sent + e.s.ttl
        self._lease = _with(lease, deadline=self.deadline)
        self.cause: Optional[BaseException] = None
        self.lost_flag = False
        self.stepping = False
        self.handed_off = False
        self._last_err: Optional[BaseException] = None
        self._events = events
        self._watcher = own_watcher
        if own_watcher is not None:
            own_watcher.slot = lease.slot
        e._health.leading, e._health.deadline, e._health.slot = True, self.deadline, lease.slot
        self._thread = threading.Thread(target=self._loop, args=(sent,), daemon=True,
                                        name="hoplock-term-%d" % lease.generation)
        self._thread.start()

    @property
    def lease(self) -> Lease:
        with self._mu:
            return self._lease

    @property
    def generation(self) -> int:
        return self._lease.generation

    @property
    def slot(self) -> Optional[int]:
        """The slot this term runs in (1 to slots) with slots above 1;
        None without slots, or if it could not be read."""
        return self._lease.slot

    @property
    def lost(self) -> bool:
        """True once the term is over for this process (or stopping)."""
        self._expire()
        return self._ended.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Sleeps until the term is over or timeout passes; True if over."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            self._expire()
            if self._ended.is_set():
                return True
            now = time.monotonic()
            left = self.deadline - self.e.s.guard - now
            if end is not None:
                if now >= end:
                    return False
                left = min(left, end - now)
            self._ended.wait(max(left, 0.001))

    def check(self) -> None:
        if self.lost:
            raise LeadershipLost(self.cause)

    @contextlib.contextmanager
    def fenced(self) -> Iterator[Conn]:
        """A connection in a transaction that first called
        hoplock_fence(name, generation); commits when the block ends
        without an error, rolls back otherwise. Raises FenceRefused when
        the fence refuses, LeadershipLost if the term is already over."""
        self.check()
        with self.e.fenced(self.generation) as conn:
            yield conn

    def handoff(self, to: Optional[str] = None) -> None:
        """Hands the term to the candidate waiting as owner to (None: the
        first), in one step; raises NoCandidate when none such waits. On
        success the term is over (cause HandedOff)."""
        e = self.e
        with self._calls:
            with self._mu:
                if self._ended.is_set() or self.handed_off:
                    raise NoLease("hoplock: this term is over")
            row = e._one(e.q.handoff, (e.s.name, e.s.owner, self.generation, to))
            nl = c.lease_from_row(row)
            if nl is None:
                raise NoCandidate("hoplock: no such candidate waits")
            with self._mu:
                self.handed_off = True
            c.log.info("hoplock: %s handed off generation %d to %s", e.s.owner, self.generation, nl.owner)
            self._lose(HandedOff("hoplock: handed off to %s" % nl.owner))

    # -- internals
    def _expire(self) -> None:
        with self._mu:
            if self._ended.is_set() or time.monotonic() < self.deadline - self.e.s.guard:
                return
            cause = LeaseExpired("hoplock: no renewal succeeded within the ttl"
                                 + ("" if self._last_err is None else " (last renewal: %s)" % self._last_err))
        self._lose(cause)

    def _lose(self, cause: Optional[BaseException], stepping: bool = False) -> None:
        with self._mu:
            if self._ended.is_set():
                return
            if stepping:
                self.stepping = True
            else:
                self.lost_flag = cause is not None
            self.cause = cause
            self._ended.set()
            self.e._health.leading = False
            gen = self._lease.generation
        self._hint.set()
        if self._watcher is not None:
            self._watcher.wake()
        if cause is not None:
            c.log.info("hoplock: %s lost generation %d: %s", self.e.s.owner, gen, cause)

    def _loop(self, sent: float) -> None:
        e, s = self.e, self.e.s
        retry = c.Backoff(s.renew)
        next_at = sent + s.renew
        try:
            while not self._stopped.is_set() and not self._ended.is_set():
                now = time.monotonic()
                left = min(next_at, self.deadline - s.guard) - now
                if left > 0:
                    if self._watcher is not None:
                        hinted = self._watcher.poll(min(left, 1.0))
                    else:
                        hinted = self._hint.wait(min(left, 1.0))
                        self._hint.clear()
                    if self._stopped.is_set() or self._ended.is_set():
                        return
                    if hinted:
                        self._confirm()
                    self._expire()
                    continue
                self._expire()
                if self._ended.is_set():
                    return
                start = time.monotonic()
                limit = min(s.renew, self.deadline - start)
                err: Optional[BaseException] = None
                nl: Optional[Lease] = None
                with self._calls:
                    if self._ended.is_set():
                        return
                    try:
                        row = e._one(e.q.renew, (s.name, s.owner, c.interval(s.ttl), self.generation),
                                     timeout=limit)
                        nl = c.lease_from_row(row)
                        if nl is not None and nl.step_down:
                            r2 = e._one(e.q.step_down_to, (s.name, self.generation), timeout=limit)
                            nl = _with(nl, step_down_to=(r2[0] if r2 else None))
                    except Exception as ex:  # noqa: BLE001
                        err = c.classify(ex)
                if err is None:
                    if nl is None or nl.generation != self.generation:
                        self._lose(NoLease("hoplock: the term is over (renewal returned no lease)"))
                        return
                    with self._mu:
                        if self._ended.is_set():
                            return
                        self.deadline = start + s.ttl
                        self._lease = _with(nl, deadline=self.deadline, acquired_at=nl.acquired_at
                                            or self._lease.acquired_at, slot=self._lease.slot)
                        self._last_err = None
                        e._health.deadline = self.deadline
                        if self._events is not None:
                            self._events.put(Event(EventKind.RENEWED, self._lease))
                    if nl.step_down:
                        self._lose(StepDown("hoplock: a step-down was requested"), stepping=True)
                        return
                    retry.reset()
                    next_at = start + s.renew
                elif isinstance(err, Permanent):
                    self._lose(err)
                    return
                else:
                    d = retry.next()
                    c.log.warning("hoplock: renewal failed, retrying in %.3f s: %s", d, err)
                    with self._mu:
                        self._last_err = err
                    next_at = time.monotonic() + d
        except BaseException as ex:  # noqa: BLE001 - a bug: never lead on silently
            e._health.failure = "the renewal thread died: %r" % (ex,)
            self._lose(ex)

    def _confirm(self) -> None:
        e = self.e
        with self._calls:
            if self._ended.is_set():
                return
            if e.s.slots > 1:
                self._confirm_slot()
                return
            try:
                row = e._one(e.q.holder, (e.s.name,), timeout=e.s.renew)
            except Exception as ex:  # noqa: BLE001 - the renewal decides
                c.log.warning("hoplock: could not confirm the lease: %s", ex)
                return
            cur = c.lease_from_row(row)
            if cur is None:
                self._lose(NoLease("hoplock: the term is over"))
            elif cur.owner != e.s.owner or cur.generation != self.generation:
                self._lose(LeaseHeld("hoplock: another term holds the lease"))

    def _confirm_slot(self) -> None:
        """With slots, the holder is one of several (hoplock_holder reads
        the lowest slot's term): ask for this term itself, renewing it by
        generation, which succeeds only while it runs."""
        e, s = self.e, self.e.s
        try:
            row = e._one(e.q.renew, (s.name, s.owner, c.interval(s.ttl), self.generation), timeout=s.renew)
        except Exception as ex:  # noqa: BLE001 - the renewal decides
            if isinstance(c.classify(ex), Permanent):
                self._lose(c.classify(ex))
            else:
                c.log.warning("hoplock: could not confirm the lease: %s", ex)
            return
        nl = c.lease_from_row(row)
        if nl is None or nl.generation != self.generation:
            self._lose(NoLease("hoplock: the term is over"))

    def _stop(self) -> None:
        self._stopped.set()
        with self._mu:
            self._ended.set()
            self.e._health.leading = False
        self._hint.set()
        if self._watcher is not None:
            self._watcher.wake()
        self._thread.join(self.e.s.release_timeout + self.e.s.renew)


def _with(lease: Lease, **kw: Any) -> Lease:
    import dataclasses
    return dataclasses.replace(lease, **kw)


class Elector:
    """Campaigns for the lease name, renews it while it leads, and tells
    its program when it leads and when it has lost (see the README).

    source is a conninfo string (the Elector opens its connections) or a
    psycopg_pool.ConnectionPool (it borrows them; it holds up to three at
    once: one following the events, one waiting, one for other calls).
    """

    def __init__(self, source: Union[str, "ConnectionPool"], name: str, owner: Optional[str] = None, *,
                 ttl: float = 15.0, renew: Optional[float] = None, poll: Optional[float] = None,
                 schema: str = "hoplock", session_bound: bool = False, priority: int = 0,
                 value: Optional[str] = None, min_hold: Optional[float] = None,
                 follow: Union[Follow, str] = Follow.LISTEN, watch_wait: float = 10.0,
                 release_timeout: Optional[float] = None, handoff_linger: float = 0.1,
                 no_cancel: bool = False, slots: int = 1,
                 connect_kwargs: Optional[dict[str, Any]] = None) -> None:
        self.s = c.Settings.make(name, owner, ttl, renew, poll, schema, session_bound, priority,
                                 value, min_hold, follow, watch_wait, release_timeout, handoff_linger,
                                 no_cancel, slots)
        self._src = _Source(source, dict(connect_kwargs or {}))
        self._has_min_hold: Optional[bool] = None
        self.q = c.Queries(schema, False)
        self._stop_evt = threading.Event()
        self._mu = threading.RLock()   # a signal handler may call stop()
        self._inflight: set[Conn] = set()
        self._term: Optional[Term] = None
        self._health = c.HealthState()

    @property
    def name(self) -> str:
        return self.s.name

    @property
    def owner(self) -> str:
        return self.s.owner

    # -- public API
    def stop(self) -> None:
        """Ends lead() and run() gracefully: the running term's function is
        told (Term.lost, cause None) and, when it returns, the term is handed
        to the first waiting candidate, or released. A campaign's wait is
        cancelled in the server -- with no_cancel, left to end by itself
        within poll (and a hoplock_watch within watch_wait). Safe from a signal handler and from any
        thread."""
        self._stop_evt.set()
        with self._mu:
            conns, term = list(self._inflight), self._term
        if term is not None:
            term._lose(None)
        if self.s.no_cancel:
            return
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.cancel()

    @property
    def stopped(self) -> bool:
        return self._stop_evt.is_set()

    def health(self) -> Health:
        """Unhealthy when it believes it leads but has not renewed within
        the ttl, or its campaign is wedged."""
        return self._health.judge(self.s)

    def leader(self) -> Optional[Lease]:
        """Who leads now (hoplock_holder), with the value it proclaimed;
        with slots, the term of the lowest slot running, with its slot."""
        cur = c.lease_from_row(self._one(self.q.holder, (self.s.name,)))
        return None if cur is None else self._find_slot(cur)

    @contextlib.contextmanager
    def fenced(self, generation: int) -> Iterator[Conn]:
        """A connection in a transaction whose first statement is
        hoplock_fence(name, generation): committed when the block ends,
        rolled back on an error. FenceRefused if the fence refuses."""
        conn = self._src.take()
        try:
            with conn.transaction():
                try:
                    conn.execute(self.q.fence, (self.s.name, generation), prepare=False)
                except psycopg.errors.LockNotAvailable as err:
                    raise FenceRefused("hoplock: generation %d does not hold lease %r: %s"
                                       % (generation, self.s.name, err)) from err
                yield conn
        finally:
            self._src.give(conn)

    def lead(self, fn: Callable[[Term], T]) -> T:
        """Waits until this Elector leads, runs fn(term) while it holds the
        lease, and returns what fn returns. The term's renewals run in a
        thread of their own, which also follows the events; term.lost turns
        True the moment a renewal says the term is over, or no renewal has
        succeeded by the deadline (last renewal sent + ttl, monotonic). When
        fn returns the term is released, or handed over (hoplock_handoff) if
        stop() was called or a step-down was requested. Raises Stopped if
        stop() comes first, Permanent on errors no retry can mend."""
        watcher = _Watcher(self)
        watcher.start()
        try:
            lease, sent, conn = self._campaign()
            term = Term(self, lease, sent, watcher, None)
            with self._mu:
                self._term = term
                if self._stop_evt.is_set():
                    term._lose(None)
            try:
                return fn(term)
            finally:
                term._stop()
                with self._mu:
                    self._term = None
                self._end(term, conn)
        finally:
            watcher.close()

    def run(self) -> Iterator[Event]:
        """Campaigns until stop() (or until the iterator is closed),
        yielding ACQUIRED, RENEWED and LOST for each term of its own and,
        while it does not lead, LEADER for each term of another instance
        (with its value). Events arrive after the fact: work that must stop
        with leadership belongs under lead()."""
        events: "queue.Queue[Optional[Event]]" = queue.Queue()
        th = threading.Thread(target=self._run, args=(events,), daemon=True, name="hoplock-run")
        th.start()
        try:
            while True:
                ev = events.get()
                if ev is None:
                    return
                yield ev
        finally:
            self.stop()
            th.join(self.s.release_timeout + self.s.ttl)

    # -- internals
    def _one(self, query: Any, params: Sequence[Any], timeout: Optional[float] = None) -> Optional[Tuple[Any, ...]]:
        with self._src.conn() as conn:
            if timeout is None:
                return conn.execute(query, params, prepare=False).fetchone()
            with conn.transaction():
                conn.execute("SELECT pg_catalog.set_config('statement_timeout', %s, true)",
                             (str(max(int(timeout * 1000), 1)),), prepare=False)
                return conn.execute(query, params, prepare=False).fetchone()

    def _min_hold(self) -> bool:
        if self._has_min_hold is None:
            row = self._one(c.HAS_MIN_HOLD, (c.min_hold_signature(self.s.schema),))
            self._has_min_hold = bool(row and row[0])
            self.q = c.Queries(self.s.schema, self._has_min_hold)
            if self.s.min_hold is not None and not self._has_min_hold:
                raise Permanent("hoplock: min_hold needs a hoplock that has it (1.2 with min_hold)")
            if self.s.slots > 1 and not self._has_min_hold:
                raise Permanent("hoplock: slots needs hoplock 1.2 or later")
        return self._has_min_hold

    def _campaign(self) -> Tuple[Lease, float, Optional[Conn]]:
        """A term just begun, the monotonic time its call was sent, and the
        connection a session-bound term is bound to."""
        s, h = self.s, self._health
        retry = c.Backoff(s.renew)
        h.campaigning, h.campaign_beat = True, time.monotonic()
        try:
            while True:
                if self._stop_evt.is_set():
                    raise Stopped("hoplock: stopped")
                try:
                    has_hold = self._min_hold()
                except Exception as ex:  # noqa: BLE001
                    err = c.classify(ex)
                    if isinstance(err, Permanent):
                        raise err
                    self._stop_evt.wait(retry.next())
                    continue
                conn = None
                lease = None
                sent = time.monotonic()
                h.campaign_beat = sent
                try:
                    conn = self._src.take()
                    with self._mu:
                        if self._stop_evt.is_set():
                            raise _Cancelled()
                        self._inflight.add(conn)
                    conn.execute(c.CHECK_CONNECTION, prepare=False)
                    sent = time.monotonic()
                    row = conn.execute(self.q.wait, c.wait_params(s, has_hold), prepare=False).fetchone()
                    lease = c.lease_from_row(row)
                except KeyboardInterrupt:
                    # psycopg cancelled the statement and read its end:
                    # give the connection back idle, end any term the
                    # wait may have begun, and let the interrupt go on
                    if conn is not None:
                        with self._mu:
                            self._inflight.discard(conn)
                        held, conn = conn, None
                        self._src.give(held)
                    self._cleanup()
                    raise
                except (_Cancelled, psycopg.errors.QueryCanceled):
                    if not self._stop_evt.is_set():
                        lease = None   # a statement_timeout, say: wait again
                    else:
                        if conn is not None:   # give it back first: the cleanup needs one
                            with self._mu:
                                self._inflight.discard(conn)
                            held, conn = conn, None
                            self._src.give(held)
                        self._cleanup()
                        raise Stopped("hoplock: stopped") from None
                except Exception as ex:  # noqa: BLE001
                    err = c.classify(ex)
                    if isinstance(err, Permanent):
                        raise err
                    d = retry.next()
                    c.log.warning("hoplock: campaign failed, retrying in %.3f s: %s", d, err)
                    self._stop_evt.wait(d)
                    continue
                finally:
                    if conn is not None:
                        with self._mu:
                            self._inflight.discard(conn)
                    h.campaign_beat = time.monotonic()
                    if conn is not None and not (lease is not None and s.session_bound):
                        self._src.give(conn)
                if lease is None:
                    retry.reset()
                    d = time.monotonic() - sent
                    if d < s.poll / 2:   # the wait ended early: do not spin
                        self._stop_evt.wait(s.poll / 2 - d)
                    continue
                bound = conn if s.session_bound else None
                lease, sent, ok = self._freshen(lease, sent)
                if not ok or self._stop_evt.is_set():
                    self._release(lease, bound)
                    if self._stop_evt.is_set():
                        raise Stopped("hoplock: stopped")
                    continue
                lease = self._proclaim(lease)
                lease = self._find_slot(lease)
                h.campaigning = False
                return _with(lease, deadline=sent + s.ttl), sent, bound
        finally:
            h.campaigning = False

    def _freshen(self, lease: Lease, sent: float) -> Tuple[Lease, float, bool]:
        """A term that began long after its call was sent (a wait that
        lasted) is renewed before use, so its deadline counts from a recent
        send. A wait that lasted past the ttl leaves a term this process
        cannot vouch for by its own clock, but renewing it is safe (a
        renewal by generation succeeds only while the term is current): it
        gets renew seconds to succeed, and the term is dropped only if the
        renewal says it is over or fails."""
        s = self.s
        retry = c.Backoff(s.renew)
        # the last instant a renewal may end: the term's own deadline, or
        # for a wait that lasted past the ttl, renew from now
        limit = max(sent + s.ttl - s.guard, time.monotonic() + s.renew)
        while time.monotonic() - sent >= s.renew:
            start = time.monotonic()
            if start >= limit:
                return lease, sent, False
            try:
                row = self._one(self.q.renew, (s.name, s.owner, c.interval(s.ttl), lease.generation),
                                timeout=limit - start)
            except Exception as ex:  # noqa: BLE001
                if isinstance(c.classify(ex), Permanent):
                    return lease, sent, False
                time.sleep(retry.next())
                continue
            nl = c.lease_from_row(row)
            if nl is None or nl.generation != lease.generation:
                return lease, sent, False
            lease, sent = nl, start
            limit = start + s.ttl - s.guard
        return lease, sent, True

    def _find_slot(self, lease: Lease) -> Lease:
        """With slots, the lease with the slot its term runs in (the
        hoplock_lease row has none). A failure is logged, not fatal: the
        term is no less this Elector's (its slot is then None)."""
        s = self.s
        if s.slots <= 1:
            return lease
        try:
            row = self._one(self.q.slot, (s.name, lease.generation), timeout=s.renew)
        except Exception as ex:  # noqa: BLE001
            c.log.warning("hoplock: could not read the slot of generation %d: %s", lease.generation, ex)
            return lease
        return _with(lease, slot=int(row[0])) if row and row[0] is not None else lease

    def _proclaim(self, lease: Lease) -> Lease:
        s = self.s
        if s.value is None or lease.value == s.value:
            return lease
        try:
            self._one(self.q.proclaim, (s.name, s.owner, lease.generation, s.value), timeout=s.renew)
            return _with(lease, value=s.value)
        except Exception as ex:  # noqa: BLE001 - the term is no less ours
            c.log.warning("hoplock: could not proclaim the value: %s", ex)
            return lease

    def _release(self, lease: Lease, bound: Optional[Conn]) -> None:
        s = self.s
        try:
            self._one(self.q.release, (s.name, s.owner, lease.generation), timeout=s.release_timeout)
        except Exception as ex:  # noqa: BLE001
            c.log.warning("hoplock: could not release generation %d: %s", lease.generation, ex)
        finally:
            if bound is not None:
                self._src.give(bound, discard=True)   # ends a bound term in any case

    def _cleanup(self) -> None:
        """After an interrupted wait: end any term it may have begun."""
        s = self.s
        with contextlib.suppress(Exception):
            self._one(self.q.release_any, (s.name, s.owner), timeout=s.release_timeout)

    def _end(self, term: Term, bound: Optional[Conn]) -> None:
        """Hands the term over on a graceful stop or a step-down, else
        releases it; a term handed off already is left alone."""
        s = self.s
        graceful = self._stop_evt.is_set()
        with term._mu:
            handed, lost, stepping, lease = term.handed_off, term.lost_flag, term.stepping, term._lease
        if handed:
            if bound is not None:
                self._src.give(bound, discard=True)
            return
        if (graceful or stepping) and not lost:
            try:
                nl = None
                if stepping and lease.step_down_to:
                    nl = c.lease_from_row(self._one(self.q.handoff, (s.name, s.owner, lease.generation,
                                                                     lease.step_down_to),
                                                    timeout=s.release_timeout))
                if nl is None:
                    nl = c.lease_from_row(self._one(self.q.handoff, (s.name, s.owner, lease.generation, None),
                                                    timeout=s.release_timeout))
                if nl is not None:
                    c.log.info("hoplock: %s handed generation %d to %s", s.owner, lease.generation, nl.owner)
                    if bound is not None:
                        self._src.give(bound, discard=True)
                    if graceful and s.handoff_linger > 0:
                        time.sleep(s.handoff_linger)
                    return
            except Exception as ex:  # noqa: BLE001
                c.log.warning("hoplock: could not hand the lease over, releasing it: %s", ex)
        self._release(lease, bound)
        if graceful and not lost and s.handoff_linger > 0:
            time.sleep(s.handoff_linger)

    def _run(self, events: "queue.Queue[Optional[Event]]") -> None:
        """run()'s thread: campaigns and leads; a second thread follows the
        events (hints to the term, LEADER reports while following)."""
        watcher = _Watcher(self)
        watcher.start()
        mu = threading.Lock()
        state = {"leading": False, "top": 0, "done": False}

        def report_leader() -> None:
            try:
                cur = self.leader()
            except Exception:  # noqa: BLE001 - tried again at the next hint
                return
            with mu:
                if (cur is not None and not state["leading"] and not state["done"]
                        and cur.owner != self.s.owner and cur.generation > int(state["top"])):
                    state["top"] = cur.generation
                    events.put(Event(EventKind.LEADER, cur))

        def follow() -> None:
            report_leader()
            while not self._stop_evt.is_set():
                hinted = watcher.poll(0.5)
                if self._stop_evt.is_set():
                    break
                if hinted:
                    with self._mu:
                        term = self._term
                    if term is not None:
                        term._hint.set()
                    else:
                        report_leader()

        follower = threading.Thread(target=follow, daemon=True, name="hoplock-follow")
        follower.start()
        try:
            while not self._stop_evt.is_set():
                try:
                    lease, sent, bound = self._campaign()
                except Stopped:
                    break
                except Permanent as err:
                    events.put(Event(EventKind.LOST, None, err))
                    self._stop_evt.wait(self.s.ttl)
                    continue
                with mu:
                    state["leading"] = True
                    state["top"] = max(int(state["top"]), lease.generation)
                    events.put(Event(EventKind.ACQUIRED, lease))
                term = Term(self, lease, sent, None, events)
                watcher.slot = lease.slot
                with self._mu:
                    self._term = term
                    if self._stop_evt.is_set():
                        term._lose(None)
                term.wait()
                cause = term.cause if term.cause is not None else Stopped("hoplock: stopped")
                term._stop()
                watcher.slot = None
                with self._mu:
                    self._term = None
                self._end(term, bound)
                with mu:
                    events.put(Event(EventKind.LOST, term.lease, cause))
                    state["leading"] = False
                if not self._stop_evt.is_set():
                    report_leader()
        finally:
            with mu:
                state["done"] = True
            self._stop_evt.set()
            watcher.wake()
            follower.join(self.s.watch_wait + 1)
            watcher.close()
            events.put(None)

    def close(self) -> None:
        """Closes the connections the Elector opened itself."""
        self._src.close()

    def __enter__(self) -> "Elector":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        self.close()
