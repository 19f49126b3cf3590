"""The read side: packet details with best luck, and the sent/received lists with the yearly
summary. Nothing here reveals an amount before it is opened (none is pre-allocated).

Details and lists go through the read caches when there are any (production: memory, then
Redis, then the database; hongbao.core.view_cache); the embedded backend reads the database. A
cached view holds nothing about its reader: details are checked against the reader's membership
(memory for a second, then the database) on every read. What changes without a write is added
to the view on every read, not cached with it: the status of a packet past its expiry
(``expired`` from the moment ``now >= expires_at``, before the refund job got to it), and the
sender's and openers' nicknames and avatars (hongbao.core.services.profiles: memory, then one
read of the non-critical store, else the defaults). Pages past the first SERVED_PAGES of a list
are refused while the pressure switch is on (hongbao.core.services.pressure)."""

from __future__ import annotations

from datetime import datetime

from hongbao.core import errors
from hongbao.core.clock import Clock
from hongbao.core.packet import Packet, Status
from hongbao.core.ports import GroupStore, PacketStore, UserListStore
from hongbao.core.services.audience import Audience, check_order_id
from hongbao.core.services.pressure import SERVED_PAGES, ListsPressure
from hongbao.core.services.profiles import Profiles
from hongbao.core.times import BUSINESS_TZ, rfc3339
from hongbao.core.view_cache import View, ViewCache, details_entry, lists_entry
from hongbao.core.vocabulary import Direction

PAGE_SIZE = 20
CACHED_PAGES = SERVED_PAGES  # the lists' first two pages are cached: those served under pressure


def year_bounds_ms(year: int) -> tuple[int, int]:
    """[start, end) of ``year`` in the business time zone, in ms since the epoch."""
    start = datetime(year, 1, 1, tzinfo=BUSINESS_TZ)
    end = datetime(year + 1, 1, 1, tzinfo=BUSINESS_TZ)
    return int(start.timestamp()) * 1000, int(end.timestamp()) * 1000


class Reading:
    """Details and lists over ``packets``, ``lists``, ``profiles`` (the non-critical fields) and
    ``groups``, checked by ``audience``, through ``views`` (the read caches; None: every read from
    the database); list pages follow the ``pressure`` switch."""

    __slots__ = ("audience", "packets", "lists", "profiles", "groups", "clock", "views", "pressure")

    def __init__(
        self,
        audience: Audience,
        packets: PacketStore,
        lists: UserListStore,
        profiles: Profiles,
        groups: GroupStore,
        clock: Clock,
        views: ViewCache | None,
        pressure: ListsPressure,
    ) -> None:
        self.audience, self.packets, self.lists, self.profiles = audience, packets, lists, profiles
        self.groups, self.clock, self.views, self.pressure = groups, clock, views, pressure

    async def details(self, user_id: str, order_id: str) -> dict[str, object]:
        """Packet details for a member: totals, status (``expired`` once past its expiry until
        refunded), receipts in open order, best luck once finished (a finished or refunded
        packet's details are final), the sender and every opener with their nickname and
        avatar_url. Raises BadOrderId, NotFound, NotPaid, NotMember."""
        check_order_id(order_id)
        cache = self.views
        now_ms = self.clock.now_ms()
        if cache is None:
            view = (await self._details_of(await self.audience.visible_packet(user_id, order_id, reading=True)))[0]
            return await self._as_of(view, now_ms)

        async def load() -> tuple[View, bool]:
            return await self._details_of(await self.audience.visible_packet(user_id, order_id, reading=True))

        view = await cache.read(details_entry(order_id), "d", now_ms, load, "details")
        await self._check_audience(cache, view, user_id, now_ms)
        return await self._as_of(view, now_ms)

    async def _as_of(self, view: View, now_ms: int) -> View:
        """A copy of the details ``view`` (a cached one is shared: never changed) as of ``now_ms``:
        an active packet past its expiry shows ``expired``, and the sender and each receipt get
        their nickname and avatar_url (one read for all of them)."""
        receipts = view["receipts"]
        assert isinstance(receipts, list)
        sender = str(view["sender_id"])
        names = await self.profiles.names([sender, *(r["user_id"] for r in receipts)])
        out = dict(view)
        # RFC 3339 strings of one fixed width (times.rfc3339) sort as the times they name
        if out["status"] == Status.ACTIVE and rfc3339(now_ms) >= str(view["expires_at"]):
            out["status"] = Status.EXPIRED.value
        nickname, avatar_url = names[sender]
        out["sender"] = {"user_id": sender, "nickname": nickname, "avatar_url": avatar_url}
        out["receipts"] = [
            {**r, "nickname": names[r["user_id"]][0], "avatar_url": names[r["user_id"]][1]} for r in receipts
        ]
        return out

    async def _check_audience(self, cache: ViewCache, view: View, user_id: str, now_ms: int) -> None:
        """Raise NotMember unless ``user_id`` may see the packet of ``view`` (as
        ``Audience.visible_packet`` when reading)."""
        group_id, order_id = view["group_id"], view["order_id"]
        if not isinstance(group_id, str):
            if user_id not in (view["receiver_id"], view["sender_id"]):
                raise errors.NotMember(f"packet {order_id} is for someone else")
            return
        member = cache.members.get((group_id, user_id), now_ms)
        if member is None:
            member = await self.groups.is_member(group_id, user_id)
            cache.members.put((group_id, user_id), member, now_ms)
        if not member and not await self.audience.took_part(str(order_id), str(view["sender_id"]), user_id):
            raise errors.NotMember(f"{user_id} is not a member of the packet's group")

    async def _details_of(self, packet: Packet) -> tuple[View, bool]:
        """(the details of ``packet`` from the database, whether they are final: finished or
        refunded, with the greeting read)."""
        order_id = packet.order_id
        receipts = await self.packets.receipts(order_id)
        best = await self.packets.best_luck(order_id) if packet.status is Status.FINISHED else None
        greeting = await self.profiles.greeting(order_id)  # None: the non-critical store is down
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
            "greeting": greeting or "",
            "created_at": rfc3339(packet.created_at_ms),
            "expires_at": rfc3339(packet.expires_at_ms),
            "receipts": [
                {"user_id": r.user_id, "amount_fen": r.amount_fen, "opened_at": rfc3339(r.opened_at_ms)}
                for r in receipts
            ],
            "best_luck_user_id": best,
        }, packet.status in (Status.FINISHED, Status.REFUNDED) and greeting is not None  # kept long once whole

    async def user_list(self, user_id: str, direction: Direction, year: int, page: int) -> dict[str, object]:
        """Page ``page`` (PAGE_SIZE rows, newest first) of the user's ``direction`` list in
        ``year``, with the year's summary: count, total fen, best-luck count. The first
        CACHED_PAGES pages come from the read caches when there are any. Raises Degraded for a
        page the pressure switch sheds."""
        self.pressure.check(page)
        cache = self.views

        async def load() -> tuple[View, bool]:
            start, end = year_bounds_ms(year)
            rows = await self.lists.page(user_id, direction, start, end, (page - 1) * PAGE_SIZE, PAGE_SIZE)
            count, total, best = await self.lists.summary(user_id, direction, start, end)
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
        field = f"{direction.value}:{year}:{page}"
        return await cache.read(lists_entry(user_id), field, self.clock.now_ms(), load, "lists")
