"""What the grab filter knows of a packet (docs/architecture.md section 6: grab answers from the caches), and
the port of its shared second level (Redis in production, hongbao.core.adapters.redis.grab).

Levels: per-worker memory with a short TTL (hongbao.core.ttl_cache, in the service), then the
shared level (state of every live packet plus the users who opened it), then the database. The
shared level is written after the database (pay, open, refund), never before, so it may lag;
grab is advisory (open re-checks everything in its transaction), and the lag is always in the
harmless direction: a stale entry can say "ok" for a finished packet, never "finished" for one
with shares left (see RedisGrabState for how).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hongbao.core.packet import Kind, Packet, Status
from hongbao.core.ports import OpenResult
from hongbao.core.soon import Soon


@dataclass(frozen=True, slots=True)
class PacketState:
    """The fields of a packet grab decides on: shares (``count``, ``remaining_count``), status,
    audience (``group_id`` or ``receiver_id``) and ``expires_at_ms`` (ms since the epoch, UTC)."""

    order_id: str
    kind: Kind
    count: int
    remaining_count: int
    status: Status
    group_id: str | None
    receiver_id: str | None
    expires_at_ms: int

    @classmethod
    def of(cls, packet: Packet) -> PacketState:
        """The state of a packet row."""
        return cls(
            packet.order_id,
            packet.kind,
            packet.count,
            packet.remaining_count,
            packet.status,
            packet.group_id,
            packet.receiver_id,
            packet.expires_at_ms,
        )


@dataclass(slots=True)  # not frozen: made for every grab on the shared level, and frozen __init__ costs ~0.5 us
class Lookup:
    """A shared-level answer for (packet, user): the packet's ``state``; ``amount_fen`` the user
    opened, or None; ``complete``: True when None means "has not opened" (the level saw every
    open), False when the database must be asked (the entry was rebuilt after opens)."""

    state: PacketState
    amount_fen: int | None
    complete: bool


class SharedGrabState(Protocol):
    """The shared level of the grab filter. Writes never raise (a lost write leaves the entry to be
    repaired and is counted); reads raise ``hongbao.core.breaker.BreakerOpen`` when the level is
    down and a database check is allowed, ``hongbao.core.errors.Degraded`` when it is not (the
    database is protected by a rate limiter, docs/architecture.md section 10: "Redis down at grab")."""

    async def lookup(self, order_id: str, user_id: str) -> Lookup | None:
        """The packet's state and what ``user_id`` opened; None when the level does not hold it."""
        ...

    def lookup_soon(self, order_id: str, user_id: str) -> Soon[Lookup | None] | None:
        """``lookup`` without a coroutine when the level is healthy (hongbao.core.soon); None when
        only ``lookup`` can answer now. Its result raises ``Later`` where ``lookup`` would have
        had to retry, fall back or raise."""
        ...

    async def put(self, packet: Packet, now_ms: int) -> None:
        """Hold ``packet`` (just paid, or read from the database after a miss) unless already held;
        ``now_ms``: the caller's clock (the entry lives a while past the packet's expiry)."""
        ...

    async def fixed(self, order_id: str) -> Packet | None:
        """The packet for its fixed fields only (sender, kind, count, total, group, receiver, times;
        not its remainder or status); None when the level does not hold them or is down."""
        ...

    async def opened(self, order_id: str, results: Sequence[OpenResult]) -> None:
        """Record one committed open batch: new receipts, a finish, or a refusal (finished / expired)."""
        ...

    async def ended(self, order_id: str, status: Status) -> None:
        """Record a status the database moved to outside an open (expired, refunded)."""
        ...
