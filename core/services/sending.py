"""Sending and paying: a send validates and stores a pre-order under a fresh order id; a pay
debits the sender, activates the packet and follows it up (the grab filter's shared level, the
greeting, the push to its audience, the sender's list row); a cancel drops an unpaid pre-order.
A pay and a cancel never both succeed (the pre-order store's claim decides)."""

from __future__ import annotations

import asyncio

import hongbao_native
from hongbao.core import errors, events
from hongbao.core.faults import NO_FAULTS, Faults
from hongbao.core.grab_state import SharedGrabState
from hongbao.core.messages import PreOrder, list_row_due
from hongbao.core.packet import Packet, Status
from hongbao.core.ports import LedgerEntry, Ports, SendRate
from hongbao.core.rules import Limits, validate_send
from hongbao.core.services.audience import check_order_id
from hongbao.core.services.outbox import Outbox
from hongbao.core.times import business_yymmdd
from hongbao.core.vocabulary import Direction, EntryKind


class Sending:
    """send -> pay (or cancel) over ``ports`` under ``limits``; ``region``: the order ids' region
    (1 north, 2 south); ``shared``: the grab filter's shared level, told of every activation;
    ``node_rate``, ``region_rate``: the sends this host and this region take a second (flow
    control, docs/architecture.md section 9; None: unlimited); ``faults``: the crash points armed
    (tests: ``pay_debited``, ``pay_inserted``)."""

    __slots__ = ("ports", "limits", "outbox", "shared", "region", "node_rate", "region_rate", "faults")

    def __init__(
        self,
        ports: Ports,
        limits: Limits,
        outbox: Outbox,
        shared: SharedGrabState | None,
        *,
        region: int = 1,
        node_rate: hongbao_native.RateLimiter | None = None,
        region_rate: SendRate | None = None,
        faults: Faults = NO_FAULTS,
    ) -> None:
        self.ports, self.limits, self.outbox, self.shared, self.region = ports, limits, outbox, shared, region
        self.node_rate, self.region_rate, self.faults = node_rate, region_rate, faults

    async def send(self, sender_id: str, body: dict[str, object]) -> tuple[str, int]:
        """Validate, take a token of the host's and of the region's send rate, assign an order id,
        store the pre-order; returns (order_id, pay_by_ms). A send refused by a rate stores
        nothing (its order id, if one was drawn, is never used).

        Raises InvalidAmount/InvalidCount/InvalidRequest, NotMember for a group the sender is not
        in, Busy (429, Retry-After) over the host's or the region's send rate."""
        spec = validate_send(body, sender_id, self.limits)
        node_rate = self.node_rate
        if node_rate is not None and not node_rate.try_acquire():
            raise errors.Busy(
                "this node is at its send rate, retry shortly", node_rate.retry_after(), "send_rejections"
            )
        if spec.group_id is not None and not await self.ports.groups.is_member(spec.group_id, sender_id):
            raise errors.NotMember(f"{sender_id} is not a member of group {spec.group_id}")
        now = self.ports.clock.now_ms()
        yymmdd = business_yymmdd(now)
        if self.region_rate is None:
            source, sequence = await self.ports.sequence.next(self.region, yymmdd)
        else:  # the region's token and the id in one round trip; a refused send leaves a gap in the sequence
            wait_s, (source, sequence) = await asyncio.gather(
                self.region_rate.take(), self.ports.sequence.next(self.region, yymmdd)
            )
            if wait_s > 0:
                raise errors.Busy(f"region {self.region} is at its send rate, retry shortly", wait_s, "send_rejections")
        order_id = hongbao_native.encode_order_id(self.region, yymmdd, source, sequence)
        pay_by = now + self.limits.pay_ttl_ms
        preorder = PreOrder(
            sender_id,
            spec.kind,
            spec.count,
            spec.total_fen,
            spec.group_id,
            spec.receiver_id,
            spec.greeting,
            now,
            pay_by,
        )
        await self.ports.preorders.put(order_id, preorder.encode(), pay_by, now)
        return order_id, pay_by

    async def pay(self, sender_id: str, order_id: str) -> Packet:
        """Debit the sender and activate the packet; a repeat (or a retry of a half-done pay)
        completes it and changes nothing else: a packet whose pre-order is still there was cut
        before its follow-ups, which the repeat does. The sequential steps of a first pay: the
        pre-order read and claimed (cache), the debit (the sender's shard), the packet row (the
        packet's shard), the follow-ups (one cache round trip), the pre-order dropped. Raises
        NotFound (unknown or lapsed pre-order), Forbidden (not the sender), InsufficientBalance,
        Degraded (the cache that may hold the pre-order is down; nothing moved)."""
        check_order_id(order_id)
        now = self.ports.clock.now_ms()
        try:
            raw = await self.ports.preorders.get(order_id, now)
        except errors.Degraded:  # the pre-orders' cache is silent: a paid packet still answers
            packet = await self.ports.packets.get_packet(order_id)
            if packet is None:
                raise
            return _paid(sender_id, order_id, packet)
        if raw is None:  # paid and followed up (its pre-order is gone), or unknown, cancelled, lapsed
            return _paid(sender_id, order_id, await self.ports.packets.get_packet(order_id))
        if PreOrder.decode(raw).sender_id != sender_id:
            raise errors.Forbidden("only the sender can pay for a packet")
        raw = await self.ports.preorders.claim_for_pay(order_id, now)  # from here on, no cancel
        if raw is None:  # cancelled or lapsed since, or a racing pay of the same packet just finished
            return _paid(sender_id, order_id, await self.ports.packets.get_packet(order_id))
        pre = PreOrder.decode(raw)
        try:
            await self.ports.ledger.post(LedgerEntry(sender_id, EntryKind.SEND, order_id, -pre.total_fen, now))
        except errors.InsufficientBalance:
            await self.ports.preorders.release(order_id)  # nothing moved: the sender may cancel again
            raise
        self.faults.point("pay_debited")
        packet = pre.active_packet(order_id, now + self.limits.expiry_ms)
        if await self.ports.packets.insert_packet(packet):
            self.faults.point("pay_inserted")
        else:  # a retried half-done pay, a racing pay or the reconciler inserted it: theirs stands
            packet = _paid(sender_id, order_id, await self.ports.packets.get_packet(order_id))
        if packet.status is Status.ACTIVE:
            await self.follow_up(packet, pre.greeting, now)
        return packet

    async def follow_up(self, packet: Packet, greeting: str, now_ms: int) -> None:
        """What follows a packet's activation (by a pay, a repeated pay or the reconciler), in one
        cache round trip: the grab state, the expiry index, the greeting, the sender's list row;
        the push to its audience; then the pre-order goes, which marks these done (a pay cut
        before that point is followed up again)."""
        paid_at = packet.expires_at_ms - self.limits.expiry_ms
        updates = [
            self.ports.expiries.add(packet.order_id, packet.expires_at_ms),
            self.outbox.note_greeting(packet.order_id, greeting),
            self.outbox.publish(
                [list_row_due(Direction.SENT, packet.sender_id, packet.order_id, packet.total_fen, paid_at)]
            ),
        ]
        if self.shared is not None:
            updates.append(self.shared.put(packet, now_ms))
        await asyncio.gather(*updates)
        self.outbox.notify(events.packet_received(packet, greeting))
        await self.ports.preorders.delete(packet.order_id)

    async def cancel(self, sender_id: str, order_id: str) -> None:
        """The sender drops an unpaid pre-order. Raises NotFound, Forbidden, Conflict (409)
        once a pay has claimed it (a pay and a cancel never both succeed), or Degraded (the
        cache that may hold the pre-order is down)."""
        check_order_id(order_id)
        if await self.ports.packets.get_packet(order_id) is not None:
            raise errors.Conflict("the packet is already paid and cannot be cancelled")
        now = self.ports.clock.now_ms()
        raw = await self.ports.preorders.get(order_id, now)
        if raw is None:
            if await self.ports.packets.get_packet(order_id) is not None:  # a pay completed since the first look
                raise errors.Conflict("the packet is already paid and cannot be cancelled")
            raise errors.NotFound(f"no pre-order {order_id}")
        if PreOrder.decode(raw).sender_id != sender_id:
            raise errors.Forbidden("only the sender can cancel a pre-order")
        if not await self.ports.preorders.cancel(order_id, now):
            raise errors.Conflict("the packet is being paid and cannot be cancelled")


def _paid(sender_id: str, order_id: str, packet: Packet | None) -> Packet:
    """The paid ``packet`` for its sender; NotFound when there is none, Forbidden for another user."""
    if packet is None:
        raise errors.NotFound(f"no pre-order {order_id} awaiting payment (unknown, cancelled or past pay_by)")
    if packet.sender_id != sender_id:
        raise errors.Forbidden("only the sender can pay for a packet")
    return packet
