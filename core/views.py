"""The read side: packet details with best luck, sent/received lists with the yearly summary,
the caller's bill. Nothing here reveals an amount before it is opened (none is pre-allocated)."""

from __future__ import annotations

from datetime import datetime

from hongbao.core.packet import Status
from hongbao.core.service import PacketService
from hongbao.core.times import BUSINESS_TZ, rfc3339

PAGE_SIZE = 20
DEFAULT_NICKNAME = ""
DEFAULT_AVATAR = ""


def year_bounds_ms(year: int) -> tuple[int, int]:
    """[start, end) of ``year`` in the business time zone, in ms since the epoch."""
    start = datetime(year, 1, 1, tzinfo=BUSINESS_TZ)
    end = datetime(year + 1, 1, 1, tzinfo=BUSINESS_TZ)
    return int(start.timestamp()) * 1000, int(end.timestamp()) * 1000


async def details(svc: PacketService, user_id: str, order_id: str) -> dict[str, object]:
    """Packet details for a member: totals, status, receipts in open order, best luck once finished.

    Raises BadOrderId, NotFound, NotPaid, NotMember."""
    packet = await svc.visible_packet(user_id, order_id)  # checks the order id first
    receipts = await svc.ports.packets.receipts(order_id)
    best = await svc.ports.packets.best_luck(order_id) if packet.status is Status.FINISHED else None
    try:
        greeting = await svc.ports.profiles.greeting(order_id) or ""
    except Exception:  # non-critical store down: default greeting
        greeting = ""
    return {
        "order_id": order_id, "sender_id": packet.sender_id, "kind": packet.kind.value, "status": packet.status.value,
        "count": packet.count, "total_fen": packet.total_fen, "opened_count": len(receipts),
        "opened_fen": sum(r.amount_fen for r in receipts), "remaining_count": packet.remaining_count,
        "refunded_fen": packet.refunded_fen, "group_id": packet.group_id, "receiver_id": packet.receiver_id,
        "greeting": greeting, "created_at": rfc3339(packet.created_at_ms), "expires_at": rfc3339(packet.expires_at_ms),
        "receipts": [{"user_id": r.user_id, "amount_fen": r.amount_fen, "opened_at": rfc3339(r.opened_at_ms)} for r in receipts],
        "best_luck_user_id": best,
    }


async def user_list(svc: PacketService, user_id: str, direction: str, year: int, page: int) -> dict[str, object]:
    """Page ``page`` (20 rows, newest first) of the user's ``direction`` list ("sent" | "received")
    in ``year``, with the year's summary: count, total fen, best-luck count."""
    start, end = year_bounds_ms(year)
    rows = await svc.ports.lists.page(user_id, direction, start, end, (page - 1) * PAGE_SIZE, PAGE_SIZE)
    count, total, best = await svc.ports.lists.summary(user_id, direction, start, end)
    return {
        "year": year, "page": page,
        "summary": {"count": count, "total_fen": total, "best_luck_count": best},
        "items": [{"order_id": r.order_id, "amount_fen": r.amount_fen, "created_at": rfc3339(r.created_at_ms),
                   "best_luck": r.best_luck} for r in rows],
    }


async def bill(svc: PacketService, user_id: str, page: int) -> dict[str, object]:
    """Page ``page`` of the caller's ledger entries, newest first."""
    entries = await svc.ports.ledger.entries(user_id, (page - 1) * PAGE_SIZE, PAGE_SIZE)
    return {
        "page": page,
        "items": [{"kind": e.kind, "ref": e.ref, "amount_fen": e.amount_fen, "created_at": rfc3339(e.created_at_ms)} for e in entries],
    }

