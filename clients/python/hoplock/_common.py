"""What the sync and asyncio Electors share: settings, queries, leases,
events, errors, payload parsing and the health report."""
from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import logging
import os
import re
import socket
import time
from typing import Any, Optional, Sequence, Tuple

import psycopg
from psycopg import sql

__all__ = [
    "Event", "EventKind", "Follow", "HandedOff", "Health", "HoplockError",
    "Lease", "LeaseExpired", "LeaseHeld", "LeadershipLost", "NoCandidate",
    "NoLease", "Permanent", "StepDown", "Stopped", "FenceRefused",
]

log = logging.getLogger("hoplock")


class HoplockError(Exception):
    """Base class of hoplock's own errors."""


class Stopped(HoplockError):
    """The Elector was stopped (stop()) before it led."""


class NoLease(HoplockError):
    """The term is over: released, expired, forced out, or not ours."""


class LeaseHeld(HoplockError):
    """Another owner (or another term of ours) holds the lease."""


class LeaseExpired(HoplockError):
    """No renewal succeeded within the ttl (by the local monotonic clock)."""


class HandedOff(HoplockError):
    """The term was handed to another candidate (Term.handoff)."""


class StepDown(HoplockError):
    """A step-down was requested: the term still holds, and is handed over
    when the function returns."""


class NoCandidate(HoplockError):
    """No such candidate waits for the lease."""


class Permanent(HoplockError):
    """A server error that retrying cannot mend (bad input, a missing
    function or privilege): it ends the campaign."""


class FenceRefused(HoplockError):
    """hoplock_fence refused the generation (SQLSTATE 55P03): another term
    holds the lease, or none does."""


class LeadershipLost(HoplockError):
    """Raised by Term.check() (and by the asyncio lead() when it cancelled
    the function): the term is over; .cause says why."""

    def __init__(self, cause: Optional[BaseException]) -> None:
        super().__init__("hoplock: leadership lost: %s" % (cause,))
        self.cause = cause


class Follow(enum.Enum):
    """How an Elector hears of changes to the lease."""
    LISTEN = "listen"   # LISTEN on the channel, on a connection of its own
    WATCH = "watch"     # hoplock_watch in a loop: behind a transaction pooler


class EventKind(enum.Enum):
    ACQUIRED = "acquired"   # this Elector leads, in the term of Event.lease
    RENEWED = "renewed"     # the term was renewed
    LOST = "lost"           # no longer leads; Event.error says why
    LEADER = "leader"       # another instance leads, in the term of Event.lease


@dataclasses.dataclass(frozen=True)
class Lease:
    """One term, as the server returned it. generation is the fencing
    token (an int, exact). deadline is when, by this process's monotonic
    clock (time.monotonic()), the term lapses unless renewed (None for
    another instance's term). slot is the term's slot (1 to slots) for an
    Elector with slots above 1, else None."""
    name: str
    owner: str
    generation: int
    handle: str
    acquired_at: Optional[datetime.datetime]
    expires_at: Optional[datetime.datetime]
    value: Optional[str] = None
    step_down: bool = False
    deadline: Optional[float] = None
    step_down_to: Optional[str] = None
    slot: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Event:
    kind: EventKind
    lease: Optional[Lease]
    error: Optional[BaseException] = None


@dataclasses.dataclass(frozen=True)
class Health:
    """ok is False when this instance believes it leads but has not renewed
    within the ttl, or its campaign is wedged; reason says which. slot is
    the slot of the term it leads in (slots above 1), else None."""
    ok: bool
    reason: str
    leading: bool
    slot: Optional[int] = None

    def __bool__(self) -> bool:
        return self.ok


def default_owner() -> str:
    return "%s:%d" % (socket.gethostname(), os.getpid())


@dataclasses.dataclass
class Settings:
    name: str
    owner: str
    ttl: float
    renew: float
    poll: float
    schema: str
    session_bound: bool
    priority: int
    value: Optional[str]
    min_hold: Optional[float]
    follow: Follow
    watch_wait: float
    release_timeout: float
    handoff_linger: float
    guard: float
    no_cancel: bool = False
    slots: int = 1

    @classmethod
    def make(cls, name: str, owner: Optional[str], ttl: float, renew: Optional[float],
             poll: Optional[float], schema: str, session_bound: bool, priority: int,
             value: Optional[str], min_hold: Optional[float], follow: Follow | str,
             watch_wait: float, release_timeout: Optional[float],
             handoff_linger: float, no_cancel: bool = False, slots: int = 1) -> "Settings":
        if not name:
            raise ValueError("hoplock: name is empty")
        owner = owner or default_owner()
        if ttl <= 0:
            raise ValueError("hoplock: ttl must be positive (%r)" % ttl)
        renew = ttl / 3 if renew is None else renew
        if not 0 < renew < ttl:
            raise ValueError("hoplock: renew (%r) must be positive and less than ttl (%r)" % (renew, ttl))
        poll = renew if poll is None else poll
        if poll <= 0:
            raise ValueError("hoplock: poll must be positive (%r)" % poll)
        if release_timeout is None:
            release_timeout = min(5.0, ttl)
        if min_hold is not None and not 0 < min_hold <= ttl:
            raise ValueError("hoplock: min_hold (%r) must be positive and at most ttl" % min_hold)
        if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= MAX_SLOTS:
            raise ValueError("hoplock: slots must be an integer from 1 to %d (%r)" % (MAX_SLOTS, slots))
        return cls(name=name, owner=owner, ttl=float(ttl), renew=float(renew), poll=float(poll),
                   schema=schema, session_bound=session_bound, priority=priority, value=value,
                   min_hold=min_hold, follow=Follow(follow), watch_wait=watch_wait,
                   release_timeout=release_timeout, handoff_linger=handoff_linger,
                   guard=min(ttl / 50, 0.05), no_cancel=bool(no_cancel), slots=slots)


# The most terms of a name hoplock runs at once (slots => N).
MAX_SLOTS = 1000


def interval(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=max(seconds, 1e-6))


LEASE_COLUMNS = ("l.name, l.owner, l.generation, l.handle, l.acquired_at, "
                 "l.expires_at, l.value, l.step_down")


class Queries:
    """Every statement, its functions qualified with the schema and every
    argument cast to its parameter's exact type (no overload planted beside
    hoplock's can capture a call)."""

    def __init__(self, schema: str, min_hold: bool) -> None:
        s = sql.Identifier(schema)

        def f(text: str) -> sql.Composed:
            return sql.SQL(text).format(s=s, cols=sql.SQL(LEASE_COLUMNS))

        # min_hold and slots came together (1.2's 10-argument hoplock_wait)
        hold = ", min_hold => %s::interval, slots => %s::integer" if min_hold else ""
        self.wait = f("SELECT {cols} FROM {s}.hoplock_wait(%s::text, %s::text, %s::interval, "
                      "%s::interval, %s::boolean, %s::integer, %s::text" + hold + ") AS l")
        self.renew = f("SELECT {cols} FROM {s}.hoplock_renew(%s::text, %s::text, %s::interval, %s::bigint) AS l")
        self.release = f("SELECT {s}.hoplock_release(%s::text, %s::text, %s::bigint)")
        self.release_any = f("SELECT {s}.hoplock_release(%s::text, %s::text)")
        self.holder = f("SELECT {cols} FROM {s}.hoplock_holder(%s::text) AS l")
        self.handoff = f("SELECT {cols} FROM {s}.hoplock_handoff(%s::text, %s::text, %s::bigint, %s::text) AS l")
        self.proclaim = f("SELECT {s}.hoplock_proclaim(%s::text, %s::text, %s::bigint, %s::text)")
        self.fence = f("SELECT {s}.hoplock_fence(%s::text, %s::bigint)")
        self.position = f("SELECT {s}.hoplock_position()")
        self.watch = f("SELECT w.seq, w.name" + (", w.slot" if min_hold else "")
                       + " FROM {s}.hoplock_watch(%s::bigint, %s::interval) AS w")
        self.step_down_to = f("SELECT v.step_down_to FROM {s}.hoplock_leases AS v "
                              "WHERE v.name OPERATOR(pg_catalog.=) %s::text "
                              "AND v.generation OPERATOR(pg_catalog.=) %s::bigint")
        self.slot = f("SELECT v.slot FROM {s}.hoplock_leases AS v "
                      "WHERE v.name OPERATOR(pg_catalog.=) %s::text "
                      "AND v.generation OPERATOR(pg_catalog.=) %s::bigint")


# Does the server's hoplock have min_hold (the 10-argument hoplock_wait of 1.2.0)?
HAS_MIN_HOLD = ("SELECT pg_catalog.to_regprocedure(%s::text) IS NOT NULL")


def min_hold_signature(schema: str) -> str:
    return ('"%s".hoplock_wait(text,text,interval,interval,boolean,integer,text,boolean,interval,integer)'
            % schema.replace('"', '""'))


# The server notices, while a wait sleeps, that its client has gone
# (PostgreSQL 14 and later), so that an abandoned wait takes no lease.
CHECK_CONNECTION = ("SELECT pg_catalog.set_config('client_connection_check_interval', '1000', false) "
                    "WHERE pg_catalog.current_setting('client_connection_check_interval', true) IS NOT NULL")

CHANNEL = "SELECT pg_catalog.current_setting('hoplock.channel', true)"


def wait_params(s: Settings, has_min_hold: bool) -> Tuple[Any, ...]:
    p: Tuple[Any, ...] = (s.name, s.owner, interval(s.ttl), interval(s.poll), s.session_bound,
                          s.priority, s.value)
    if has_min_hold:
        p += (interval(s.min_hold) if s.min_hold is not None else None, s.slots)
    return p


def lease_from_row(row: Optional[Sequence[Any]], deadline: Optional[float] = None) -> Optional[Lease]:
    """A hoplock_lease row; None for the NULL lease (a row of NULLs)."""
    if row is None or row[2] is None:
        return None
    return Lease(name=row[0], owner=row[1], generation=int(row[2]), handle=row[3],
                 acquired_at=row[4], expires_at=row[5], value=row[6] or None,
                 step_down=bool(row[7]), deadline=deadline)


# SQLSTATE classes and codes a retry may mend (as the Go client's Transient).
def transient(err: BaseException) -> bool:
    if not isinstance(err, psycopg.Error):
        return isinstance(err, (OSError, TimeoutError))
    code = err.sqlstate
    if code is None:
        return True   # a lost connection, a client-side failure
    if code == "53400":
        return False
    return code[:2] in ("08", "40", "53", "57", "58") or code in ("55P03", "25006")


def classify(err: BaseException) -> BaseException:
    """The error a call raised, made permanent when no retry can mend it."""
    if isinstance(err, psycopg.Error) and not transient(err):
        p = Permanent("hoplock: %s" % (err,))
        p.__cause__ = err
        return p
    return err


_INT = re.compile(r"-?[0-9]{1,19}\Z")


@dataclasses.dataclass(frozen=True)
class Payload:
    event: str
    name: str
    generation: Optional[int]
    seq: Optional[int]
    owner: Optional[str]
    value: Optional[str]
    slot: Optional[int] = None


def _exact(event: dict[str, Any], key: str) -> Optional[int]:
    text = event.get(key + "_text")
    if isinstance(text, str) and _INT.match(text):
        return int(text)
    v = event.get(key)
    if isinstance(v, int) and not isinstance(v, bool):
        return v   # Python's json reads integers exactly
    return None


def parse_payload(payload: str) -> Optional[Payload]:
    """What a notification claims, or None if it is not of hoplock's shape.
    Any role may NOTIFY on the channel: a payload is a hint, never proof.
    Generations and event numbers are read from seq_text and
    generation_text (exact), falling back to the numbers."""
    try:
        event = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    if not isinstance(event, dict):
        return None
    kind, name = event.get("event"), event.get("name")
    if not isinstance(kind, str) or not isinstance(name, str):
        return None
    owner, value, slot = event.get("owner"), event.get("value"), event.get("slot")
    return Payload(event=kind, name=name, generation=_exact(event, "generation"),
                   seq=_exact(event, "seq"),
                   owner=owner if isinstance(owner, str) else None,
                   value=value if isinstance(value, str) else None,
                   slot=slot if isinstance(slot, int) and not isinstance(slot, bool) else None)


def other_slot(slot: Optional[int], mine: Optional[int]) -> bool:
    """Is an event of slot (None: none given) about a slot other than mine
    (None: not known)? Such an event cannot end this Elector's term."""
    return slot is not None and mine is not None and slot != mine


class Backoff:
    """From renew/10 (at least 5 ms), doubling, up to renew/2."""

    def __init__(self, renew: float) -> None:
        self.min = max(renew / 10, 0.005)
        self.max = max(renew / 2, self.min)
        self.cur = 0.0

    def next(self) -> float:
        self.cur = self.min if self.cur == 0 else min(self.cur * 2, self.max)
        return self.cur

    def reset(self) -> None:
        self.cur = 0.0


class HealthState:
    """What health() judges by, updated by the campaign and the term."""

    def __init__(self) -> None:
        self.leading = False
        self.deadline = 0.0          # monotonic: last renewal sent + ttl
        self.campaigning = False
        self.campaign_beat = 0.0     # monotonic: last call of the campaign began or ended
        self.failure: Optional[str] = None
        self.slot: Optional[int] = None        # the slot of the term it leads in

    def judge(self, s: Settings, now: Optional[float] = None) -> Health:
        now = time.monotonic() if now is None else now
        slot = self.slot if self.leading else None
        if self.failure is not None:
            return Health(False, self.failure, self.leading, slot)
        if self.leading and now > self.deadline:
            return Health(False, "leads but has not renewed within the ttl (%.3f s late)"
                          % (now - self.deadline), True, slot)
        if self.campaigning and now - self.campaign_beat > s.poll + s.ttl + s.release_timeout:
            return Health(False, "campaign wedged: no call returned for %.3f s"
                          % (now - self.campaign_beat), False)
        return Health(True, "leading" if self.leading else "following", self.leading, slot)
