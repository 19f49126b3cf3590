"""The packet, its receipts and the shape of a send request, as plain data.

Amounts are integer fen; times are integer milliseconds since the Unix epoch, UTC
(docs/architecture.md section 4: every stored timestamp is UTC with milliseconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    """How a packet's total is divided (docs/architecture.md section 3)."""

    LUCKY = "lucky"
    EQUAL = "equal"
    EXCLUSIVE = "exclusive"


class Status(StrEnum):
    """A packet's life: pending_payment -> active -> finished | expired -> refunded."""

    PENDING_PAYMENT = "pending_payment"
    ACTIVE = "active"
    FINISHED = "finished"
    EXPIRED = "expired"
    REFUNDED = "refunded"


@dataclass(frozen=True, slots=True)
class PacketSpec:
    """A validated send request: what the sender asked for, before it has an order id.

    ``total_fen`` is always the full amount debited at pay (for equal packets,
    per-share x count). Exactly one of ``group_id`` and ``receiver_id`` is set.
    """

    kind: Kind
    count: int
    total_fen: int
    group_id: str | None
    receiver_id: str | None
    greeting: str


@dataclass(frozen=True, slots=True)
class Packet:
    """A packet row: the spec plus its order id, remainder, status and times (ms, UTC)."""

    order_id: str
    sender_id: str
    kind: Kind
    count: int
    total_fen: int
    group_id: str | None
    receiver_id: str | None
    remaining_fen: int
    remaining_count: int
    status: Status
    created_at_ms: int
    pay_by_ms: int
    expires_at_ms: int
    refunded_fen: int = 0

    @property
    def opened_fen(self) -> int:
        """Fen already opened by receivers: total - remaining - refunded."""
        return self.total_fen - self.remaining_fen - self.refunded_fen


@dataclass(frozen=True, slots=True)
class Receipt:
    """One open: ``amount_fen`` for ``user_id`` on ``order_id`` at ``opened_at_ms``."""

    order_id: str
    user_id: str
    amount_fen: int
    opened_at_ms: int
    credited: bool = False
