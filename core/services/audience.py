"""Who may see a packet: the members of its group, or the sender and receiver of an exclusive
packet; reading its details, also whoever took part and has left the group since (their own
money is in it). A pre-order is shown (as NotPaid) to the same audience only."""

from __future__ import annotations

import hongbao_native
from hongbao.core import errors
from hongbao.core.clock import Clock
from hongbao.core.grab_state import SharedGrabState
from hongbao.core.messages import PreOrder
from hongbao.core.packet import Packet
from hongbao.core.ports import GroupStore, PacketStore, PreOrderStore
from hongbao.core.ttl_cache import TtlCache

FIXED_TTL_MS = 60_000  # how long a worker keeps a packet's fixed fields (they never change once paid)
FIXED_MAX_ENTRIES = 20_000


def check_order_id(order_id: str) -> str:
    """Return ``order_id`` if it decodes (region, date, source, Damm check digit); else BadOrderId."""
    try:
        hongbao_native.decode_order_id(order_id)
    except (ValueError, TypeError) as exc:
        raise errors.BadOrderId(f"bad order id: {exc}") from None
    return order_id


def region_of(order_id: str) -> int | None:
    """The region an order id names, its first digit (1 north, 2 south; docs/architecture.md
    section 4), without checking the rest; None when it names none (a bad id: its route says so)."""
    head = order_id[:1]
    return int(head) if head in ("1", "2") else None


class Audience:
    """The visibility rules over ``packets``, ``preorders`` and ``groups``, with two levels in front
    of the database for the packets' fixed fields (sender, group, receiver, kind, count, total,
    expiry: a paid packet never changes them), for the callers that need only those: this
    worker's memory, then ``shared`` (the grab filter's shared level; None: none)."""

    __slots__ = ("packets", "preorders", "groups", "clock", "shared", "_fixed")

    def __init__(
        self,
        packets: PacketStore,
        preorders: PreOrderStore,
        groups: GroupStore,
        clock: Clock,
        shared: SharedGrabState | None = None,
    ) -> None:
        self.packets, self.preorders, self.groups, self.clock = packets, preorders, groups, clock
        self.shared = shared
        self._fixed: TtlCache[str, Packet] = TtlCache(FIXED_TTL_MS, FIXED_MAX_ENTRIES)

    async def visible_packet(
        self, user_id: str, order_id: str, *, reading: bool = False, fixed: bool = False
    ) -> Packet:
        """The packet if ``user_id`` may see it (``reading``: its details). With ``fixed`` the
        packet may come from this worker's memory (up to FIXED_TTL_MS old): only its fixed fields
        are to be read then, not its status or remainder. Raises BadOrderId, NotFound, NotPaid (a
        pre-order, to its audience), NotMember."""
        check_order_id(order_id)
        now_ms = self.clock.now_ms()
        if fixed:
            packet = await self.fixed_packet(order_id)
        else:
            packet = await self.packets.get_packet(order_id)
            if packet is not None:
                self._fixed.put(order_id, packet, now_ms)
        if packet is not None:
            await self.check(user_id, order_id, packet.sender_id, packet.receiver_id, packet.group_id, reading)
            return packet
        raw = await self.preorders.get(order_id, now_ms)
        if raw is None:
            raise errors.NotFound(f"no packet {order_id}")
        pre = PreOrder.decode(raw)  # a non-member learns no more of a pre-order than of a packet
        await self.check(user_id, order_id, pre.sender_id, pre.receiver_id, pre.group_id, reading)
        raise errors.NotPaid(f"packet {order_id} is awaiting payment")

    async def fixed_packet(self, order_id: str) -> Packet | None:
        """The paid packet ``order_id`` for its fixed fields only (sender, group, receiver, kind,
        count, total, expiry): from this worker's memory (up to FIXED_TTL_MS old), else the shared
        level, else the database; None when it is not paid."""
        now_ms = self.clock.now_ms()
        packet = self._fixed.get(order_id, now_ms)
        if packet is None and self.shared is not None:
            packet = await self.shared.fixed(order_id)
            if packet is not None:
                self._fixed.put(order_id, packet, now_ms)
        if packet is None:
            packet = await self.packets.get_packet(order_id)
            if packet is not None:
                self._fixed.put(order_id, packet, now_ms)
        return packet

    async def check(
        self, user_id: str, order_id: str, sender_id: str, receiver_id: str | None, group_id: str | None, reading: bool
    ) -> None:
        """Raise NotMember unless ``user_id`` may see packet ``order_id``: its sender or receiver
        when it has no group, else a member of ``group_id`` (or, ``reading``, one who took part)."""
        if group_id is None:
            if user_id not in (sender_id, receiver_id):
                raise errors.NotMember(f"packet {order_id} is for someone else")
        elif not await self.groups.is_member(group_id, user_id):
            if not (reading and await self.took_part(order_id, sender_id, user_id)):
                raise errors.NotMember(f"{user_id} is not a member of the packet's group")

    async def took_part(self, order_id: str, sender_id: str, user_id: str) -> bool:
        """Whether ``user_id`` sent packet ``order_id`` (of ``sender_id``) or opened a share of it."""
        return user_id == sender_id or await self.packets.receipt(order_id, user_id) is not None
