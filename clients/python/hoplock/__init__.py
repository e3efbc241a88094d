"""hoplock: lease-based leader election on PostgreSQL (the hoplock
extension), over psycopg 3. Elector (sync) and AsyncElector (asyncio)."""
from ._common import (Event, EventKind, FenceRefused, Follow, HandedOff, Health, HoplockError,
                      Lease, LeadershipLost, LeaseExpired, LeaseHeld, NoCandidate, NoLease,
                      Permanent, StepDown, Stopped, parse_payload)
from ._sync import Elector, Term
from ._async import AsyncElector, AsyncTerm

__all__ = [
    "Elector", "Term", "AsyncElector", "AsyncTerm", "Event", "EventKind", "FenceRefused", "Follow",
    "HandedOff", "Health", "HoplockError", "Lease", "LeadershipLost",
    "LeaseExpired", "LeaseHeld", "NoCandidate", "NoLease", "Permanent",
    "StepDown", "Stopped", "parse_payload",
]
__version__ = "0.1.0"
