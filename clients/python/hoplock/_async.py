"""The Elector on psycopg 3's AsyncConnection and AsyncConnectionPool."""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import Any, AsyncIterator, cast, Awaitable, Callable, List, Optional, Sequence, Set, Tuple, TypeVar, Union

import psycopg
from psycopg import pq, sql

from . import _common as c
from ._common import (Event, EventKind, Follow, HandedOff, Health, Lease, LeaseExpired, LeaseHeld,
                      LeadershipLost, NoCandidate, NoLease, Permanent, StepDown, Stopped, FenceRefused)

try:
    from psycopg_pool import AsyncConnectionPool
except ImportError:  # pragma: no cover
    AsyncConnectionPool = None  # type: ignore[assignment,misc]

T = TypeVar("T")
AConn = psycopg.AsyncConnection[Any]
_IDLE = pq.TransactionStatus.IDLE


async def _execute(conn: AConn, query: Any, params: Sequence[Any], fetch: str = "one",
                   cancel: bool = True) -> Any:
    """Runs one statement so that a cancellation of the caller never leaves
    the connection mid-query: the statement is cancelled in the server, its
    end awaited (psycopg 3.1 does not do so for asyncio), then the
    CancelledError goes on. With cancel=False (no_cancel) no cancel request
    is sent: the statement, bounded by its own timeout, is awaited to its
    end."""
    async def go() -> Any:
        cur = await conn.execute(query, params, prepare=False)
        return await (cur.fetchone() if fetch == "one" else cur.fetchall())

    task = asyncio.ensure_future(go())
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if cancel:
            with contextlib.suppress(Exception):
                conn.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 5.0)
        else:
            with contextlib.suppress(BaseException):
                await task
        if not task.done() or conn.info.transaction_status != _IDLE:
            with contextlib.suppress(Exception):
                await conn.close()
        raise


class _ASource:
    def __init__(self, source: Union[str, "AsyncConnectionPool"], kwargs: dict[str, Any]) -> None:
        self.pool = None if isinstance(source, str) else source
        self.conninfo = source if isinstance(source, str) else ""
        self.kwargs = kwargs
        self.free: List[AConn] = []
        self.autocommit: dict[int, bool] = {}

    async def take(self) -> AConn:
        if self.pool is not None:
            conn: AConn = cast(AConn, await self.pool.getconn())
            self.autocommit[id(conn)] = conn.autocommit
            if conn.info.transaction_status != _IDLE:
                await conn.rollback()
            await conn.set_autocommit(True)
            return conn
        while self.free:
            conn = self.free.pop()
            if not conn.closed:
                return conn
        new: AConn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True, **self.kwargs)
        return new

    async def give(self, conn: AConn, discard: bool = False) -> None:
        clean = not conn.closed and not conn.broken and conn.info.transaction_status == _IDLE
        if not clean or discard:
            with contextlib.suppress(Exception):
                await conn.close()
        if self.pool is not None:
            ac = self.autocommit.pop(id(conn), False)
            if not conn.closed:
                await conn.set_autocommit(ac)
            await self.pool.putconn(conn)
        elif not conn.closed:
            self.free.append(conn)

    async def close(self) -> None:
        free, self.free = self.free, []
        for conn in free:
            with contextlib.suppress(Exception):
                await conn.close()


class _AWatcher:
    def __init__(self, e: "AsyncElector") -> None:
        self.e = e
        self.conn: Optional[AConn] = None
        self.after: Optional[int] = None
        self.seen: Set[int] = set()
        self.pending: List[psycopg.Notify] = []
        # the slot of the term this Elector runs (slots above 1): an event
        # of another slot is not about it
        self.slot: Optional[int] = None

    async def start(self) -> bool:
        e = self.e
        try:
            if e.s.follow is Follow.WATCH:
                row = await e._one(e.q.position, ())
                self.after = int(row[0]) if row and row[0] is not None else 0
                return True
            conn = await e._src.take()
            row = await _execute(conn, c.CHANNEL, ())
            conn.add_notify_handler(self.pending.append)
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(row[0] if row and row[0] else "hoplock")))
            self.conn = conn
            return True
        except Exception as err:  # noqa: BLE001
            c.log.warning("hoplock: could not follow the events: %s", err)
            return False

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.remove_notify_handler(self.pending.append)
                if not conn.closed:
                    await conn.execute("UNLISTEN *")
            await self.e._src.give(conn)

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
                    continue
                self.seen.add(p.seq)
                if len(self.seen) > 4096:
                    self.seen = set(sorted(self.seen)[-1024:])
            hit = True
        return hit

    async def poll(self, timeout: float) -> bool:
        timeout = max(timeout, 0.0)
        e = self.e
        if e.s.follow is Follow.WATCH:
            if self.after is None:
                return await self.start()
            try:
                rows = await e._one(e.q.watch, (self.after, c.interval(min(timeout, e.s.watch_wait))),
                                    fetch="all", cancel=not e.s.no_cancel)
            except psycopg.Error as err:
                if err.sqlstate == "HL001":
                    self.after = None
                    await self.start()
                    return True
                c.log.warning("hoplock: hoplock_watch failed: %s", err)
                await asyncio.sleep(min(timeout, e.s.renew / 10))
                return True
            hit = False
            for row in rows:
                self.after = max(self.after, int(row[0]))
                hit = hit or (row[1] == e.s.name
                              and not c.other_slot(row[2] if len(row) > 2 else None, self.slot))
            return hit
        if self.conn is None or self.conn.closed:
            if self.conn is not None:
                await self.close()
            if not await self.start():
                await asyncio.sleep(min(timeout, 1.0))
                return False
            return True
        conn = self.conn
        try:
            if not self.pending:
                loop = asyncio.get_running_loop()
                fut: asyncio.Future[None] = loop.create_future()
                fd = conn.fileno()

                def ready() -> None:
                    if not fut.done():
                        fut.set_result(None)
                loop.add_reader(fd, ready)
                try:
                    await asyncio.wait_for(fut, timeout)
                except asyncio.TimeoutError:
                    pass
                finally:
                    loop.remove_reader(fd)
                if fut.done():
                    conn.pgconn.consume_input()
                    if conn.pgconn.status != pq.ConnStatus.OK:
                        raise psycopg.OperationalError("the listening connection was lost")
            enc = conn.info.encoding
            while True:
                n = conn.pgconn.notifies()
                if n is None:
                    break
                self.pending.append(psycopg.Notify(n.relname.decode(enc), n.extra.decode(enc), n.be_pid))
        except (psycopg.Error, OSError, ValueError) as err:
            c.log.warning("hoplock: lost the listening connection: %s", err)
            with contextlib.suppress(Exception):
                await conn.close()
            await self.close()
            return True
        got, self.pending = self.pending, []
        return self._relevant([n.payload for n in got])


class AsyncTerm:
    """The term an async fn runs in: as Term, with lost_event an
    asyncio.Event; lead() also cancels fn's task the moment the term is
    lost."""

    def __init__(self, e: "AsyncElector", lease: Lease, sent: float) -> None:
        self.e = e
        self.deadline = sent + e.s.ttl
        self._lease = dataclasses.replace(lease, deadline=self.deadline)
        self.lost_event = asyncio.Event()
        self.cause: Optional[BaseException] = None
        self.lost_flag = False
        self.stepping = False
        self.handed_off = False
        self._last_err: Optional[BaseException] = None
        self._calls = asyncio.Lock()
        self._hint = asyncio.Event()
        self._on_end: Optional[Callable[[], object]] = None
        self._timer: Optional[asyncio.TimerHandle] = None
        e._health.leading, e._health.deadline, e._health.slot = True, self.deadline, lease.slot
        self._arm()

    @property
    def lease(self) -> Lease:
        return self._lease

    @property
    def generation(self) -> int:
        return self._lease.generation

    @property
    def slot(self) -> Optional[int]:
        """The slot this term runs in (as Term.slot)."""
        return self._lease.slot

    @property
    def lost(self) -> bool:
        self._expire()
        return self.lost_event.is_set()

    async def wait(self, timeout: Optional[float] = None) -> bool:
        try:
            await asyncio.wait_for(self.lost_event.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return self.lost

    def check(self) -> None:
        if self.lost:
            raise LeadershipLost(self.cause)

    @contextlib.asynccontextmanager
    async def fenced(self) -> AsyncIterator[AConn]:
        self.check()
        async with self.e.fenced(self.generation) as conn:
            yield conn

    async def handoff(self, to: Optional[str] = None) -> None:
        e = self.e
        async with self._calls:
            if self.lost_event.is_set() or self.handed_off:
                raise NoLease("hoplock: this term is over")
            nl = c.lease_from_row(await e._one(e.q.handoff, (e.s.name, e.s.owner, self.generation, to)))
            if nl is None:
                raise NoCandidate("hoplock: no such candidate waits")
            self.handed_off = True
            self._lose(HandedOff("hoplock: handed off to %s" % nl.owner))

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(self.deadline - self.e.s.guard - time.monotonic(), 0),
                                      self._expire)

    def _expire(self) -> None:
        if self.lost_event.is_set() or time.monotonic() < self.deadline - self.e.s.guard:
            return
        self._lose(LeaseExpired("hoplock: no renewal succeeded within the ttl"
                                + ("" if self._last_err is None else " (last renewal: %s)" % self._last_err)))

    def _lose(self, cause: Optional[BaseException], stepping: bool = False) -> None:
        if self.lost_event.is_set():
            return
        if stepping:
            self.stepping = True
        else:
            self.lost_flag = cause is not None
        self.cause = cause
        self.lost_event.set()
        self.e._health.leading = False
        if self._timer is not None:
            self._timer.cancel()
        if cause is not None:
            c.log.info("hoplock: %s lost generation %d: %s", self.e.s.owner, self.generation, cause)
        if self._on_end is not None:
            self._on_end()

    async def _loop(self, sent: float, watcher: Optional[_AWatcher]) -> None:
        e, s = self.e, self.e.s
        retry = c.Backoff(s.renew)
        next_at = sent + s.renew
        while not self.lost_event.is_set():
            left = min(next_at, self.deadline - s.guard) - time.monotonic()
            if left > 0:
                if watcher is not None:
                    hinted = await watcher.poll(min(left, 1.0))
                else:
                    try:
                        await asyncio.wait_for(self._hint.wait(), min(left, 1.0))
                        hinted = True
                    except asyncio.TimeoutError:
                        hinted = False
                    self._hint.clear()
                if hinted and not self.lost_event.is_set():
                    await self._confirm()
                self._expire()
                continue
            start = time.monotonic()
            limit = min(s.renew, self.deadline - start)
            err: Optional[BaseException] = None
            nl: Optional[Lease] = None
            async with self._calls:
                if self.lost_event.is_set():
                    return
                try:
                    nl = c.lease_from_row(await e._one(e.q.renew, (s.name, s.owner, c.interval(s.ttl),
                                                                   self.generation), timeout=limit))
                    if nl is not None and nl.step_down:
                        r2 = await e._one(e.q.step_down_to, (s.name, self.generation), timeout=limit)
                        nl = dataclasses.replace(nl, step_down_to=r2[0] if r2 else None)
                except Exception as ex:  # noqa: BLE001
                    err = c.classify(ex)
            if err is None:
                if nl is None or nl.generation != self.generation:
                    self._lose(NoLease("hoplock: the term is over (renewal returned no lease)"))
                    return
                if self.lost_event.is_set():
                    return
                self.deadline = start + s.ttl
                self._lease = dataclasses.replace(nl, deadline=self.deadline,
                                                  acquired_at=nl.acquired_at or self._lease.acquired_at,
                                                  slot=self._lease.slot)
                self._last_err = None
                e._health.deadline = self.deadline
                self._arm()
                if e._events is not None:
                    e._events.put_nowait(Event(EventKind.RENEWED, self._lease))
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
                self._last_err = err
                next_at = time.monotonic() + d

    async def _confirm(self) -> None:
        e = self.e
        async with self._calls:
            if self.lost_event.is_set():
                return
            if e.s.slots > 1:
                await self._confirm_slot()
                return
            try:
                cur = c.lease_from_row(await e._one(e.q.holder, (e.s.name,), timeout=e.s.renew))
            except Exception as ex:  # noqa: BLE001
                c.log.warning("hoplock: could not confirm the lease: %s", ex)
                return
            if cur is None:
                self._lose(NoLease("hoplock: the term is over"))
            elif cur.owner != e.s.owner or cur.generation != self.generation:
                self._lose(LeaseHeld("hoplock: another term holds the lease"))

    async def _confirm_slot(self) -> None:
        """With slots, the holder is one of several (hoplock_holder reads
        the lowest slot's term): ask for this term itself, renewing it by
        generation, which succeeds only while it runs."""
        e, s = self.e, self.e.s
        try:
            row = await e._one(e.q.renew, (s.name, s.owner, c.interval(s.ttl), self.generation), timeout=s.renew)
        except Exception as ex:  # noqa: BLE001 - the renewal decides
            if isinstance(c.classify(ex), Permanent):
                self._lose(c.classify(ex))
            else:
                c.log.warning("hoplock: could not confirm the lease: %s", ex)
            return
        nl = c.lease_from_row(row)
        if nl is None or nl.generation != self.generation:
            self._lose(NoLease("hoplock: the term is over"))


class AsyncElector:
    """The Elector for asyncio: the same settings and semantics as
    Elector, on psycopg.AsyncConnection (a conninfo string) or a
    psycopg_pool.AsyncConnectionPool. lead(fn) takes an async fn and
    cancels its task the moment the term is lost."""

    def __init__(self, source: Union[str, "AsyncConnectionPool"], name: str, owner: Optional[str] = None, *,
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
        self._src = _ASource(source, dict(connect_kwargs or {}))
        self._has_min_hold: Optional[bool] = None
        self.q = c.Queries(schema, False)
        self._stopping = False
        self._stop_waiters: Set[asyncio.Future[None]] = set()
        self._term: Optional[AsyncTerm] = None
        self._health = c.HealthState()
        self._events: Optional[asyncio.Queue[Optional[Event]]] = None
        self._campaign_task: Optional[asyncio.Task[Any]] = None

    @property
    def name(self) -> str:
        return self.s.name

    @property
    def owner(self) -> str:
        return self.s.owner

    @property
    def stopped(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """Ends lead() and run() gracefully (see Elector.stop); call it from
        the event loop's thread (loop.add_signal_handler(SIGTERM,
        elector.stop))."""
        self._stopping = True
        if self._term is not None:
            self._term._lose(None)
        if self._campaign_task is not None:
            self._campaign_task.cancel()
        for f in list(self._stop_waiters):
            if not f.done():
                f.set_result(None)

    async def _sleep(self, d: float) -> None:
        if self._stopping:
            return
        f: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stop_waiters.add(f)
        try:
            await asyncio.wait_for(f, d)
        except asyncio.TimeoutError:
            pass
        finally:
            self._stop_waiters.discard(f)

    def health(self) -> Health:
        return self._health.judge(self.s)

    async def leader(self) -> Optional[Lease]:
        """As Elector.leader."""
        cur = c.lease_from_row(await self._one(self.q.holder, (self.s.name,)))
        return None if cur is None else await self._find_slot(cur)

    @contextlib.asynccontextmanager
    async def fenced(self, generation: int) -> AsyncIterator[AConn]:
        conn = await self._src.take()
        try:
            async with conn.transaction():
                try:
                    await conn.execute(self.q.fence, (self.s.name, generation), prepare=False)
                except psycopg.errors.LockNotAvailable as err:
                    raise FenceRefused("hoplock: generation %d does not hold lease %r: %s"
                                       % (generation, self.s.name, err)) from err
                yield conn
        finally:
            await self._src.give(conn)

    async def _one(self, query: Any, params: Sequence[Any], timeout: Optional[float] = None,
                   fetch: str = "one", cancel: bool = True) -> Any:
        conn = await self._src.take()
        try:
            if timeout is None:
                return await _execute(conn, query, params, fetch, cancel)
            async with conn.transaction():
                await conn.execute("SELECT pg_catalog.set_config('statement_timeout', %s, true)",
                                   (str(max(int(timeout * 1000), 1)),), prepare=False)
                return await _execute(conn, query, params, fetch)
        finally:
            await self._src.give(conn)

    async def _min_hold(self) -> bool:
        if self._has_min_hold is None:
            row = await self._one(c.HAS_MIN_HOLD, (c.min_hold_signature(self.s.schema),))
            self._has_min_hold = bool(row and row[0])
            self.q = c.Queries(self.s.schema, self._has_min_hold)
            if self.s.min_hold is not None and not self._has_min_hold:
                raise Permanent("hoplock: min_hold needs a hoplock that has it")
            if self.s.slots > 1 and not self._has_min_hold:
                raise Permanent("hoplock: slots needs hoplock 1.2 or later")
        return self._has_min_hold

    async def _campaign(self) -> Tuple[Lease, float, Optional[AConn]]:
        task = asyncio.ensure_future(self._campaign_inner())
        self._campaign_task = task
        try:
            return await task
        except asyncio.CancelledError:
            if self._stopping:
                raise Stopped("hoplock: stopped") from None
            raise
        finally:
            self._campaign_task = None

    async def _campaign_inner(self) -> Tuple[Lease, float, Optional[AConn]]:
        s, h = self.s, self._health
        retry = c.Backoff(s.renew)
        h.campaigning, h.campaign_beat = True, time.monotonic()
        try:
            while True:
                if self._stopping:
                    raise Stopped("hoplock: stopped")
                conn: Optional[AConn] = None
                lease: Optional[Lease] = None
                sent = time.monotonic()
                h.campaign_beat = sent
                try:
                    has_hold = await self._min_hold()
                    conn = await self._src.take()
                    await _execute(conn, c.CHECK_CONNECTION, ())
                    sent = time.monotonic()
                    lease = c.lease_from_row(await _execute(conn, self.q.wait, c.wait_params(s, has_hold),
                                                            cancel=not s.no_cancel))
                except asyncio.CancelledError:
                    # give the connection back first: the cleanup needs one
                    if conn is not None:
                        held, conn = conn, None
                        await asyncio.shield(self._src.give(held))
                    await asyncio.shield(self._cleanup())
                    raise
                except psycopg.errors.QueryCanceled:
                    lease = None
                except Exception as ex:  # noqa: BLE001
                    err = c.classify(ex)
                    if isinstance(err, Permanent):
                        raise err
                    d = retry.next()
                    c.log.warning("hoplock: campaign failed, retrying in %.3f s: %s", d, err)
                    await self._sleep(d)
                    continue
                finally:
                    h.campaign_beat = time.monotonic()
                    if conn is not None and not (lease is not None and s.session_bound):
                        await asyncio.shield(self._src.give(conn))
                if lease is None:
                    retry.reset()
                    d = time.monotonic() - sent
                    if d < s.poll / 2:
                        await self._sleep(s.poll / 2 - d)
                    continue
                bound = conn if s.session_bound else None
                try:
                    lease, sent, ok = await self._freshen(lease, sent)
                except asyncio.CancelledError:
                    await asyncio.shield(self._release(lease, bound))
                    raise
                if not ok or self._stopping:
                    await self._release(lease, bound)
                    if self._stopping:
                        raise Stopped("hoplock: stopped")
                    continue
                lease = await self._proclaim(lease)
                lease = await self._find_slot(lease)
                return dataclasses.replace(lease, deadline=sent + s.ttl), sent, bound
        finally:
            h.campaigning = False

    async def _freshen(self, lease: Lease, sent: float) -> Tuple[Lease, float, bool]:
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
                row = await self._one(self.q.renew, (s.name, s.owner, c.interval(s.ttl), lease.generation),
                                      timeout=limit - start)
            except Exception as ex:  # noqa: BLE001
                if isinstance(c.classify(ex), Permanent):
                    return lease, sent, False
                await asyncio.sleep(retry.next())
                continue
            nl = c.lease_from_row(row)
            if nl is None or nl.generation != lease.generation:
                return lease, sent, False
            lease, sent = nl, start
            limit = start + s.ttl - s.guard
        return lease, sent, True

    async def _find_slot(self, lease: Lease) -> Lease:
        """As Elector._find_slot."""
        s = self.s
        if s.slots <= 1:
            return lease
        try:
            row = await self._one(self.q.slot, (s.name, lease.generation), timeout=s.renew)
        except Exception as ex:  # noqa: BLE001
            c.log.warning("hoplock: could not read the slot of generation %d: %s", lease.generation, ex)
            return lease
        return dataclasses.replace(lease, slot=int(row[0])) if row and row[0] is not None else lease

    async def _proclaim(self, lease: Lease) -> Lease:
        s = self.s
        if s.value is None or lease.value == s.value:
            return lease
        try:
            await self._one(self.q.proclaim, (s.name, s.owner, lease.generation, s.value), timeout=s.renew)
            return dataclasses.replace(lease, value=s.value)
        except Exception as ex:  # noqa: BLE001
            c.log.warning("hoplock: could not proclaim the value: %s", ex)
            return lease

    async def _release(self, lease: Lease, bound: Optional[AConn]) -> None:
        s = self.s
        try:
            await self._one(self.q.release, (s.name, s.owner, lease.generation), timeout=s.release_timeout)
        except Exception as ex:  # noqa: BLE001
            c.log.warning("hoplock: could not release generation %d: %s", lease.generation, ex)
        finally:
            if bound is not None:
                await self._src.give(bound, discard=True)

    async def _cleanup(self) -> None:
        with contextlib.suppress(Exception):
            await self._one(self.q.release_any, (self.s.name, self.s.owner), timeout=self.s.release_timeout)

    async def _end(self, term: AsyncTerm, bound: Optional[AConn]) -> None:
        s = self.s
        graceful = self._stopping
        lease = term.lease
        if term.handed_off:
            if bound is not None:
                await self._src.give(bound, discard=True)
            return
        if (graceful or term.stepping) and not term.lost_flag:
            try:
                nl = None
                if term.stepping and lease.step_down_to:
                    nl = c.lease_from_row(await self._one(self.q.handoff, (s.name, s.owner, lease.generation,
                                                                           lease.step_down_to),
                                                          timeout=s.release_timeout))
                if nl is None:
                    nl = c.lease_from_row(await self._one(self.q.handoff, (s.name, s.owner, lease.generation,
                                                                           None), timeout=s.release_timeout))
                if nl is not None:
                    c.log.info("hoplock: %s handed generation %d to %s", s.owner, lease.generation, nl.owner)
                    if bound is not None:
                        await self._src.give(bound, discard=True)
                    if graceful and s.handoff_linger > 0:
                        await asyncio.sleep(s.handoff_linger)
                    return
            except Exception as ex:  # noqa: BLE001
                c.log.warning("hoplock: could not hand the lease over, releasing it: %s", ex)
        await self._release(lease, bound)
        if graceful and not term.lost_flag and s.handoff_linger > 0:
            await asyncio.sleep(s.handoff_linger)

    async def lead(self, fn: Callable[[AsyncTerm], Awaitable[T]]) -> T:
        """As Elector.lead, for an async fn, whose task is cancelled the
        moment the term is lost (then LeadershipLost is raised, with the
        cause) or stop() is called (then Stopped, unless fn returns a value
        on its own). Cancelling lead() itself is a graceful stop too."""
        watcher = _AWatcher(self)
        await watcher.start()
        try:
            lease, sent, bound = await self._campaign()
            term = AsyncTerm(self, lease, sent)
            self._term = term
            fn_task: asyncio.Task[T] = asyncio.ensure_future(fn(term))
            term._on_end = fn_task.cancel
            if self._stopping:
                term._lose(None)
            watcher.slot = lease.slot
            loop_task = asyncio.ensure_future(term._loop(sent, watcher))
            try:
                try:
                    return await asyncio.shield(fn_task)
                except asyncio.CancelledError:
                    if not fn_task.done():   # lead() itself was cancelled: stop
                        self._stopping = True
                        term._lose(None)
                        with contextlib.suppress(BaseException):
                            await fn_task
                        raise
                    if term.cause is not None:
                        raise LeadershipLost(term.cause) from None
                    if self._stopping:
                        raise Stopped("hoplock: stopped") from None
                    raise
            finally:
                term._on_end = None
                if not term.lost_event.is_set():
                    term.lost_event.set()
                    self._health.leading = False
                    if term._timer is not None:
                        term._timer.cancel()
                loop_task.cancel()
                with contextlib.suppress(BaseException):
                    await loop_task
                self._term = None
                await asyncio.shield(self._end(term, bound))
        finally:
            await asyncio.shield(watcher.close())

    async def run(self) -> AsyncIterator[Event]:
        """As Elector.run: an async iterator of events, until stop() (or
        the iterator is closed)."""
        events: asyncio.Queue[Optional[Event]] = asyncio.Queue()
        self._events = events
        task = asyncio.ensure_future(self._run(events))
        try:
            while True:
                ev = await events.get()
                if ev is None:
                    return
                yield ev
        finally:
            self.stop()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, self.s.release_timeout + self.s.ttl)
            self._events = None

    async def _run(self, events: "asyncio.Queue[Optional[Event]]") -> None:
        watcher = _AWatcher(self)
        await watcher.start()
        state = {"leading": False, "top": 0, "done": False}

        async def report_leader() -> None:
            try:
                cur = await self.leader()
            except Exception:  # noqa: BLE001
                return
            if (cur is not None and not state["leading"] and not state["done"]
                    and cur.owner != self.s.owner and cur.generation > int(state["top"])):
                state["top"] = cur.generation
                events.put_nowait(Event(EventKind.LEADER, cur))

        async def follow() -> None:
            await report_leader()
            while not self._stopping:
                hinted = await watcher.poll(0.5)
                if hinted and not self._stopping:
                    if self._term is not None:
                        self._term._hint.set()
                    else:
                        await report_leader()

        follower = asyncio.ensure_future(follow())
        try:
            while not self._stopping:
                try:
                    lease, sent, bound = await self._campaign()
                except Stopped:
                    break
                except Permanent as err:
                    events.put_nowait(Event(EventKind.LOST, None, err))
                    await self._sleep(self.s.ttl)
                    continue
                state["leading"] = True
                state["top"] = max(int(state["top"]), lease.generation)
                events.put_nowait(Event(EventKind.ACQUIRED, lease))
                term = AsyncTerm(self, lease, sent)
                self._term = term
                watcher.slot = lease.slot
                if self._stopping:
                    term._lose(None)
                loop_task = asyncio.ensure_future(term._loop(sent, None))
                await term.lost_event.wait()
                cause = term.cause if term.cause is not None else Stopped("hoplock: stopped")
                loop_task.cancel()
                with contextlib.suppress(BaseException):
                    await loop_task
                self._term = None
                watcher.slot = None
                await asyncio.shield(self._end(term, bound))
                events.put_nowait(Event(EventKind.LOST, term.lease, cause))
                state["leading"] = False
                if not self._stopping:
                    await report_leader()
        finally:
            state["done"] = True
            self._stopping = True
            follower.cancel()
            with contextlib.suppress(BaseException):
                await follower
            await asyncio.shield(watcher.close())
            events.put_nowait(None)

    async def close(self) -> None:
        await self._src.close()

    async def __aenter__(self) -> "AsyncElector":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.stop()
        await self.close()
