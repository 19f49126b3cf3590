"""The read side: packet details with best luck, sent/received lists with the yearly summary,
the caller's bill. Nothing here reveals an amount before it is opened (none is pre-allocated).

Details and lists go through the service's read caches when it has them (production: memory,
then Redis, then the database; hongbao.core.view_cache), the embedded backend reads the database.
A cached view holds nothing about its reader: details are checked against the reader's membership
(memory for a second, then the database) on every read."""

from __future__ import annotations

from datetime import datetime

from hongbao.core import errors
from hongbao.core.packet import Packet, Status
from hongbao.core.service import PacketService, check_order_id
from hongbao.core.times import BUSINESS_TZ, rfc3339
from hongbao.core.view_cache import View, ViewCache, details_entry, lists_entry

PAGE_SIZE = 20
CACHED_PAGES = 2  # DESIGN.md section 6: lists cache their first two pages
DEFAULT_NICKNAME = ""
DEFAULT_AVATAR = ""


def year_bounds_ms(year: int) -> tuple[int, int]:
    """[start, end) of ``year`` in the business time zone, in ms since the epoch."""
    start = datetime(year, 1, 1, tzinfo=BUSINESS_TZ)
    end = datetime(year + 1, 1, 1, tzinfo=BUSINESS_TZ)
    return int(start.timestamp()) * 1000, int(end.timestamp()) * 1000


async def details(svc: PacketService, user_id: str, order_id: str) -> dict[str, object]:
    """Packet details for a member: totals, status, receipts in open order, best luck once finished;
    from the read caches when the service has them (hongbao.core.view_cache: a finished or refunded
    packet's details are final). Raises BadOrderId, NotFound, NotPaid, NotMember."""
    check_order_id(order_id)
    cache = svc.views
    if cache is None:
        return (await _details_of(svc, await svc.visible_packet(user_id, order_id, reading=True)))[0]
    now_ms = svc.ports.clock.now_ms()

    async def load() -> tuple[View, bool]:
        return await _details_of(svc, await svc.visible_packet(user_id, order_id, reading=True))

    view = await cache.read(details_entry(order_id), "d", now_ms, load, "details")
    await _check_audience(svc, cache, view, user_id, now_ms)
    return view


async def _check_audience(svc: PacketService, cache: ViewCache, view: View, user_id: str, now_ms: int) -> None:
    """Raise NotMember unless ``user_id`` may see the packet of ``view`` (as ``visible_packet``
    when reading)."""
    group_id, order_id = view["group_id"], view["order_id"]
    if not isinstance(group_id, str):
        if user_id not in (view["receiver_id"], view["sender_id"]):
            raise errors.NotMember(f"packet {order_id} is for someone else")
        return
    member = cache.members.get((group_id, user_id), now_ms)
    if member is None:
        member = await svc.ports.groups.is_member(group_id, user_id)
        cache.members.put((group_id, user_id), member, now_ms)
    if not member and not await svc.took_part(str(order_id), str(view["sender_id"]), user_id):
        raise errors.NotMember(f"{user_id} is not a member of the packet's group")


async def _details_of(svc: PacketService, packet: Packet) -> tuple[View, bool]:
    """(the details of ``packet`` from the database, whether they are final: finished or refunded)."""
    order_id = packet.order_id
    receipts = await svc.ports.packets.receipts(order_id)
    best = await svc.ports.packets.best_luck(order_id) if packet.status is Status.FINISHED else None
    try:
        greeting = await svc.ports.profiles.greeting(order_id) or ""
    except Exception:  # non-critical store down: default greeting
        greeting = ""
    return {
        "order_id": order_id,
        "sender_id": packet.sender_id,
        "kind": packet.kind.value,
        "status": packet.status.value,
        "count": packet.count,
        "total_fen": packet.total_fen,
        "opened_count": len(receipts),
        "opened_fen": sum(r.amount_fen for r in receipts),
        "remaining_count": packet.remaining_count,
        "refunded_fen": packet.refunded_fen,
        "group_id": packet.group_id,
        "receiver_id": packet.receiver_id,
        "greeting": greeting,
        "created_at": rfc3339(packet.created_at_ms),
        "expires_at": rfc3339(packet.expires_at_ms),
        "receipts": [
            {"user_id": r.user_id, "amount_fen": r.amount_fen, "opened_at": rfc3339(r.opened_at_ms)} for r in receipts
        ],
        "best_luck_user_id": best,
    }, packet.status in (Status.FINISHED, Status.REFUNDED)


async def user_list(svc: PacketService, user_id: str, direction: str, year: int, page: int) -> dict[str, object]:
    """Page ``page`` (20 rows, newest first) of the user's ``direction`` list ("sent" | "received")
    in ``year``, with the year's summary: count, total fen, best-luck count. The first
    CACHED_PAGES pages come from the read caches when the service has them."""
    cache = svc.views

    async def load() -> tuple[View, bool]:
        start, end = year_bounds_ms(year)
        rows = await svc.ports.lists.page(user_id, direction, start, end, (page - 1) * PAGE_SIZE, PAGE_SIZE)
        count, total, best = await svc.ports.lists.summary(user_id, direction, start, end)
        return {
            "year": year,
            "page": page,
            "summary": {"count": count, "total_fen": total, "best_luck_count": best},
            "items": [
                {
                    "order_id": r.order_id,
                    "amount_fen": r.amount_fen,
                    "created_at": rfc3339(r.created_at_ms),
                    "best_luck": r.best_luck,
                }
                for r in rows
            ],
        }, False

    if cache is None or page > CACHED_PAGES:
        return (await load())[0]
    return await cache.read(lists_entry(user_id), f"{direction}:{year}:{page}", svc.ports.clock.now_ms(), load, "lists")


async def bill(svc: PacketService, user_id: str, page: int) -> dict[str, object]:
    """Page ``page`` of the caller's ledger entries, newest first."""
    entries = await svc.ports.ledger.entries(user_id, (page - 1) * PAGE_SIZE, PAGE_SIZE)
    return {
        "page": page,
        "items": [
            {"kind": e.kind, "ref": e.ref, "amount_fen": e.amount_fen, "created_at": rfc3339(e.created_at_ms)}
            for e in entries
        ],
    }
