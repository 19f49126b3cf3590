"""What the SQL adapters (SQLite, MySQL/MariaDB) share: the day tables' names, the row shapes of
packets and receipts, the plan of one batched open (docs/architecture.md section 6), which decides every
opener's outcome from the locked packet row and the batch's existing receipts without touching
storage, and the DB block allocator of order-id sequence numbers (source 1: each worker takes a
block of ``SEQUENCE_BLOCK`` numbers per region and day in one transaction, then hands them out
from memory).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hongbao.core.packet import Kind, Packet, Receipt, Status
from hongbao.core.ports import Draw, OpenResult
from hongbao.core.vocabulary import Refusal

DAYS = range(1, 32)  # the day tables of packets and receipts: dd = 01..31 from the order id's date


def packet_table(table: int, day: int) -> str:
    """Name of the packet day table: ``t_packet_{table:02}_{day:02}``."""
    return f"t_packet_{table:02}_{day:02}"


def receipt_table(table: int, day: int) -> str:
    """Name of the receipt day table: ``t_receipt_{table:02}_{day:02}``."""
    return f"t_receipt_{table:02}_{day:02}"


#: the per-packet row of the audit: order_id, total, count, remaining_fen, remaining_count,
#: refunded_fen, status, receipts, opened fen, smallest share (1 when there is none).
PACKET_AUDIT = (
    "SELECT p.order_id, p.total_fen, p.count, p.remaining_fen, p.remaining_count, p.refunded_fen, p.status, "
    "COUNT(r.user_id), COALESCE(SUM(r.amount_fen), 0), COALESCE(MIN(r.amount_fen), 1) "
    "FROM {ptable} p LEFT JOIN {rtable} r ON r.order_id = p.order_id GROUP BY p.order_id"
)
RECEIPT_AUDIT = "SELECT order_id, user_id, amount_fen, credit_status FROM {rtable}"


PACKET_COLUMNS = (
    "order_id, sender_id, kind, count, total_fen, group_id, receiver_id, remaining_fen, "
    "remaining_count, status, created_at, pay_by, expires_at, refunded_fen"
)
RECEIPT_COLUMNS = "order_id, user_id, amount_fen, opened_at, credit_status"


def packet_from_row(row: Sequence[object]) -> Packet:
    """A Packet from a row of PACKET_COLUMNS."""
    (
        order_id,
        sender,
        kind,
        count,
        total,
        group,
        receiver,
        rem_fen,
        rem_count,
        status,
        created,
        pay_by,
        expires,
        refunded,
    ) = row
    return Packet(
        str(order_id),
        str(sender),
        Kind(str(kind)),
        int(count),  # type: ignore[call-overload]
        int(total),  # type: ignore[call-overload]
        group if group is None else str(group),
        receiver if receiver is None else str(receiver),
        int(rem_fen),  # type: ignore[call-overload]
        int(rem_count),  # type: ignore[call-overload]
        Status(str(status)),
        int(created),  # type: ignore[call-overload]
        int(pay_by),  # type: ignore[call-overload]
        int(expires),  # type: ignore[call-overload]
        int(refunded),  # type: ignore[call-overload]
    )


def packet_values(packet: Packet) -> tuple[object, ...]:
    """The values of PACKET_COLUMNS for ``packet``."""
    return (
        packet.order_id,
        packet.sender_id,
        packet.kind.value,
        packet.count,
        packet.total_fen,
        packet.group_id,
        packet.receiver_id,
        packet.remaining_fen,
        packet.remaining_count,
        packet.status.value,
        packet.created_at_ms,
        packet.pay_by_ms,
        packet.expires_at_ms,
        packet.refunded_fen,
    )


def receipt_from_row(row: Sequence[object]) -> Receipt:
    """A Receipt from a row of RECEIPT_COLUMNS."""
    order_id, user_id, amount, opened_at, credit_status = row
    return Receipt(str(order_id), str(user_id), int(amount), int(opened_at), credit_status == "credited")  # type: ignore[call-overload]


@dataclass(slots=True)
class OpenPlan:
    """One batch's outcome: a result per opener, the receipt rows to insert as
    (order_id, user_id, position, amount_fen, opened_at, credit_status), and the packet's new remainder."""

    results: list[OpenResult] = field(default_factory=list)
    inserts: list[tuple[str, str, int, int, int, str]] = field(default_factory=list)
    remaining_fen: int = 0
    remaining_count: int = 0

    @property
    def finished(self) -> bool:
        """True when this batch took the last share."""
        return self.remaining_count == 0

    def crowned(self, best: Receipt | None) -> list[OpenResult]:
        """The results, the one that took the last share carrying ``best`` (the packet's best luck)."""
        return [dataclasses.replace(r, best=best) if r.last else r for r in self.results]


def plan_opens(
    packet: Packet,
    existing: dict[str, Receipt],
    user_ids: Sequence[str],
    now_ms: int,
    draw: Draw,
    credit: Callable[[str, int], bool] | None = None,
) -> OpenPlan:
    """Decide each opener in order (hongbao.core.ports.PacketStore.open_batches): an existing
    receipt (also one made earlier in this batch) is a repeat; otherwise a share is drawn while
    the packet is active, unexpired and has shares left; refusals are "finished" or "expired".
    ``existing`` maps user id -> receipt for the batch's users and is updated in place.
    ``credit(user_id, amount_fen)``: whether a new receipt is credited in the same transaction
    (it is inserted ``credited``; the caller writes its ledger entry); None: none is."""
    plan = OpenPlan(remaining_fen=packet.remaining_fen, remaining_count=packet.remaining_count)
    for user_id in user_ids:
        if user_id in existing:
            plan.results.append(OpenResult(existing[user_id], repeat=True))
        elif packet.status is not Status.ACTIVE or plan.remaining_count == 0:
            plan.results.append(
                OpenResult(
                    None, Refusal.FINISHED if packet.status in (Status.ACTIVE, Status.FINISHED) else Refusal.EXPIRED
                )
            )
        elif now_ms >= packet.expires_at_ms:
            plan.results.append(OpenResult(None, Refusal.EXPIRED))
        else:
            rem_fen, rem_count = plan.remaining_fen, plan.remaining_count
            amount = draw(rem_fen, rem_count) if packet.kind is Kind.LUCKY else rem_fen // rem_count
            plan.remaining_fen, plan.remaining_count = rem_fen - amount, rem_count - 1
            credited = credit is not None and credit(user_id, amount)
            receipt = existing[user_id] = Receipt(packet.order_id, user_id, amount, now_ms, credited)
            position = packet.count - rem_count + 1
            status = "credited" if credited else "pending"
            plan.inserts.append((packet.order_id, user_id, position, amount, now_ms, status))
            plan.results.append(OpenResult(receipt, last=plan.remaining_count == 0))
    return plan


SEQUENCE_BLOCK = 1000
DB_SOURCE = 1  # docs/architecture.md section 4: source 1 = the DB's block allocator


class BlockSequence:
    """A SequenceSource over blocks; subclasses implement ``take_block``."""

    __slots__ = ("_blocks",)

    def __init__(self) -> None:
        self._blocks: dict[tuple[int, int], tuple[int, int]] = {}

    async def take_block(self, region: int, yymmdd: int) -> int:
        """Advance the stored counter of (region, day) by SEQUENCE_BLOCK, atomically, and return
        its new value: the block is [value - SEQUENCE_BLOCK, value)."""
        raise NotImplementedError

    async def next(self, region: int, yymmdd: int) -> tuple[int, int]:
        """The next (1, sequence) for the region and day; never repeats across workers or restarts."""
        key = (region, yymmdd)
        start, end = self._blocks.get(key, (0, 0))
        if start >= end:
            end = await self.take_block(region, yymmdd)
            start = end - SEQUENCE_BLOCK
        self._blocks[key] = (start + 1, end)
        return DB_SOURCE, start
