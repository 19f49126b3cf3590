"""What the SQL PacketStores share: the row shapes of packets and receipts, and the plan of one
batched open (DESIGN.md section 6), which decides every opener's outcome from the locked packet
row and the batch's existing receipts without touching storage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hongbao.core.packet import Kind, Packet, Receipt, Status
from hongbao.core.ports import Draw, OpenResult

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
    (order_id, user_id, position, amount_fen, opened_at), and the packet's new remainder."""

    results: list[OpenResult] = field(default_factory=list)
    inserts: list[tuple[str, str, int, int, int]] = field(default_factory=list)
    remaining_fen: int = 0
    remaining_count: int = 0

    @property
    def finished(self) -> bool:
        """True when this batch took the last share."""
        return self.remaining_count == 0


def plan_opens(
    packet: Packet, existing: dict[str, Receipt], user_ids: Sequence[str], now_ms: int, draw: Draw
) -> OpenPlan:
    """Decide each opener in order (hongbao.core.ports.PacketStore.open_batch): an existing
    receipt (also one made earlier in this batch) is a repeat; otherwise a share is drawn while
    the packet is active, unexpired and has shares left; refusals are "finished" or "expired".
    ``existing`` maps user id -> receipt for the batch's users and is updated in place."""
    plan = OpenPlan(remaining_fen=packet.remaining_fen, remaining_count=packet.remaining_count)
    for user_id in user_ids:
        if user_id in existing:
            plan.results.append(OpenResult(existing[user_id], repeat=True))
        elif packet.status is not Status.ACTIVE or plan.remaining_count == 0:
            plan.results.append(
                OpenResult(None, "finished" if packet.status in (Status.ACTIVE, Status.FINISHED) else "expired")
            )
        elif now_ms >= packet.expires_at_ms:
            plan.results.append(OpenResult(None, "expired"))
        else:
            rem_fen, rem_count = plan.remaining_fen, plan.remaining_count
            amount = draw(rem_fen, rem_count) if packet.kind is Kind.LUCKY else rem_fen // rem_count
            plan.remaining_fen, plan.remaining_count = rem_fen - amount, rem_count - 1
            receipt = existing[user_id] = Receipt(packet.order_id, user_id, amount, now_ms)
            plan.inserts.append((packet.order_id, user_id, packet.count - rem_count + 1, amount, now_ms))
            plan.results.append(OpenResult(receipt, last=plan.remaining_count == 0))
    return plan
