"""The internal contracts between workers: the pre-order (held by the pre-order store between a
send and its pay) and the messages of the credit, lists and group-push queues, each with one
``encode`` and one ``decode``.

Each carries its version ``v``. A decoder reads the fields it knows and ignores the others, so a
worker reads a message a newer worker wrote (a field added later has a default); a message
without ``v`` is version 1 (what workers wrote before the field). The keys are short (the
queues hold millions of them at a peak); the dataclasses name them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from hongbao.core.packet import Kind, Packet, Status
from hongbao.core.vocabulary import Direction

VERSION = 1
#: The queues' streams: credits due in the crediting modes that queue them, the list rows, and
#: the pushes to a group's members (expanded by whichever worker claims them).
CREDIT_STREAM = "credit"
LISTS_STREAM = "lists"
GROUP_STREAM = "push_group"


def _fields(raw: bytes | str) -> dict[str, Any]:
    """The JSON object of ``raw``; ValueError when it is not one."""
    fields = orjson.loads(raw)
    if not isinstance(fields, dict):
        raise ValueError(f"a message is a JSON object, got {type(fields).__name__}")
    return fields


@dataclass(frozen=True, slots=True)
class PreOrder:
    """A sent packet awaiting its pay: who sends what to whom (fen, shares), the greeting, and
    when it was made and must be paid by (ms since the epoch, UTC)."""

    sender_id: str
    kind: Kind
    count: int
    total_fen: int
    group_id: str | None
    receiver_id: str | None
    greeting: str
    created_at_ms: int
    pay_by_ms: int

    def encode(self) -> bytes:
        """The stored form: JSON with the keys of version 1."""
        return orjson.dumps(
            {
                "v": VERSION,
                "sender_id": self.sender_id,
                "kind": self.kind.value,
                "count": self.count,
                "total_fen": self.total_fen,
                "group_id": self.group_id,
                "receiver_id": self.receiver_id,
                "greeting": self.greeting,
                "created_at": self.created_at_ms,
                "pay_by": self.pay_by_ms,
            }
        )

    @staticmethod
    def decode(raw: bytes | str) -> PreOrder:
        """The pre-order ``encode`` stored (unknown fields ignored); ValueError or KeyError for
        anything else."""
        f = _fields(raw)
        return PreOrder(
            f["sender_id"],
            Kind(f["kind"]),
            int(f["count"]),
            int(f["total_fen"]),
            f["group_id"],
            f["receiver_id"],
            f.get("greeting", ""),
            int(f["created_at"]),
            int(f["pay_by"]),
        )

    def active_packet(self, order_id: str, expires_at_ms: int) -> Packet:
        """The active packet this pre-order becomes when paid: every share left, nothing opened."""
        return Packet(
            order_id,
            self.sender_id,
            self.kind,
            self.count,
            self.total_fen,
            self.group_id,
            self.receiver_id,
            self.total_fen,
            self.count,
            Status.ACTIVE,
            self.created_at_ms,
            self.pay_by_ms,
            expires_at_ms,
        )


@dataclass(frozen=True, slots=True)
class CreditDue:
    """Credit-queue message: credit the receipt of ``user_id`` in packet ``order_id``."""

    order_id: str
    user_id: str

    def encode(self) -> bytes:
        """``{"v", "t": "receipt", "o", "u"}``."""
        return orjson.dumps({"v": VERSION, "t": "receipt", "o": self.order_id, "u": self.user_id})

    @staticmethod
    def decode(raw: bytes | str) -> CreditDue:
        """The message ``encode`` wrote (unknown fields ignored); ValueError or KeyError otherwise."""
        f = _fields(raw)
        return CreditDue(f["o"], f["u"])


@dataclass(frozen=True, slots=True)
class ListRowDue:
    """Lists-queue message: record a row in ``user_id``'s ``direction`` list (fen, ms UTC)."""

    direction: Direction
    user_id: str
    order_id: str
    amount_fen: int
    created_at_ms: int

    def encode(self) -> bytes:
        """``{"v", "t": direction, "u", "o", "a", "c"}``."""
        return orjson.dumps(
            {
                "v": VERSION,
                "t": self.direction.value,
                "u": self.user_id,
                "o": self.order_id,
                "a": self.amount_fen,
                "c": self.created_at_ms,
            }
        )


@dataclass(frozen=True, slots=True)
class BestLuckDue:
    """Lists-queue message: packet ``order_id`` finished; flag its best luck's received row."""

    order_id: str

    def encode(self) -> bytes:
        """``{"v", "t": "best", "o"}``."""
        return orjson.dumps({"v": VERSION, "t": "best", "o": self.order_id})


ListsMessage = ListRowDue | BestLuckDue


def decode_lists(raw: bytes | str) -> ListsMessage | None:
    """The lists-queue message ``raw`` (unknown fields ignored); None for a type this worker does
    not know (a newer worker's: it is acknowledged unread); ValueError or KeyError when malformed."""
    f = _fields(raw)
    kind = f.get("t")
    if kind == "best":
        return BestLuckDue(f["o"])
    if kind in (Direction.SENT, Direction.RECEIVED):
        return ListRowDue(Direction(kind), f["u"], f["o"], int(f["a"]), int(f["c"]))
    return None


@dataclass(frozen=True, slots=True)
class GroupPush:
    """Group-push message: event ``event`` with JSON ``data`` for every member of ``group_id``,
    pushed at ``pushed_at_ms`` (ms since the epoch; 0 when unknown: a message without ``t``)."""

    group_id: str
    event: str
    data: Any
    pushed_at_ms: int = 0

    def encode(self) -> bytes:
        """``{"v", "g", "e", "d", "t"}``."""
        return orjson.dumps({"v": VERSION, "g": self.group_id, "e": self.event, "d": self.data, "t": self.pushed_at_ms})

    @staticmethod
    def decode(raw: bytes | str) -> GroupPush:
        """The message ``encode`` wrote (unknown fields ignored); ValueError or KeyError otherwise."""
        f = _fields(raw)
        return GroupPush(f["g"], f["e"], f["d"], int(f.get("t", 0)))


#: A message on its stream, ready to publish: (stream, encoded body).
Outgoing = tuple[str, bytes]


def credit_due(order_id: str, user_id: str) -> Outgoing:
    """The credit-queue entry for one receipt."""
    return CREDIT_STREAM, CreditDue(order_id, user_id).encode()


def list_row_due(direction: Direction, user_id: str, order_id: str, amount_fen: int, created_at_ms: int) -> Outgoing:
    """The lists-queue entry for one row."""
    return LISTS_STREAM, ListRowDue(direction, user_id, order_id, amount_fen, created_at_ms).encode()


def best_luck_due(order_id: str) -> Outgoing:
    """The lists-queue entry for a finished packet's best-luck flag."""
    return LISTS_STREAM, BestLuckDue(order_id).encode()
