"""Settlement: the credit queue drained, the refunds of expired packets, and the reconciler that
completes every money movement cut between its steps (a crash, a restart, a dependency down).
Every step is idempotent, so any number of workers may run any of them at once."""

from __future__ import annotations

import asyncio
import logging
import math
import time

from hongbao.core import errors, events
from hongbao.core.grab_state import SharedGrabState
from hongbao.core.messages import CREDIT_STREAM, PreOrder
from hongbao.core.packet import Kind, Packet, Status
from hongbao.core.ports import LedgerEntry, Ports
from hongbao.core.rules import Limits
from hongbao.core.services.audience import region_of
from hongbao.core.services.crediting import Crediting
from hongbao.core.services.lists import ListKeeper
from hongbao.core.services.outbox import Outbox
from hongbao.core.services.scans import page, scan_window
from hongbao.core.services.sending import Sending
from hongbao.core.view_cache import details_entry
from hongbao.core.vocabulary import EntryKind

log = logging.getLogger("hongbao.service")
REFUND_SCAN_S = 60.0  # seconds between the refund job's scans of the databases (the index answers between)
PAYS_CURSOR = "pays_reconciled_until:{}"  # the flag of a region: its send debits are settled up to this time (ms)
PAYS_LOOKBACK_MS = 24 * 3600_000  # how far back the first (or a long-stalled) pay reconciliation looks
PAYS_PAGES = 20  # pages of debits one reconciliation run goes through at most (the next run goes on)


class Settlement:
    """Credits, refunds and reconciliation over ``ports``: ``crediting`` applies credits,
    ``sending`` follows up a pay the reconciler completes, ``lists`` repairs the user lists;
    ``shared``: the grab filter's shared level, told of every refund."""

    __slots__ = ("ports", "limits", "crediting", "sending", "lists", "outbox", "shared", "scan_every_s", "_scanned_at")

    def __init__(
        self,
        ports: Ports,
        limits: Limits,
        crediting: Crediting,
        sending: Sending,
        lists: ListKeeper,
        outbox: Outbox,
        shared: SharedGrabState | None,
    ) -> None:
        self.ports, self.limits, self.crediting, self.sending = ports, limits, crediting, sending
        self.lists, self.outbox, self.shared = lists, outbox, shared
        self.scan_every_s = REFUND_SCAN_S  # the refund job's database scan, besides the expiry index
        self._scanned_at = -math.inf  # time.monotonic() of the last scan

    async def drain_credits(self, max_messages: int = 100, lease_ms: int = 30_000) -> int:
        """Credit what the queue holds: one claim of up to ``max_messages``, their receipts
        credited together (Crediting.apply), then one ack of them all; returns how many messages."""
        queue = self.ports.queue
        messages = await queue.claim(CREDIT_STREAM, max_messages, lease_ms, self.ports.clock.now_ms())
        if not messages:
            return 0
        await self.crediting.apply_queued([body for _, body in messages])
        await queue.ack(CREDIT_STREAM, *(message_id for message_id, _ in messages))
        return len(messages)

    async def credits_pending(self) -> int:
        """How many credit messages the queue holds (raises as the queue does when it is down)."""
        return await self.ports.queue.depth(CREDIT_STREAM)

    async def refund_due(self, limit: int = 500) -> int:
        """Record and pay the refund of every packet past expiry; returns how many were refunded
        now. Exactly once per packet however many workers run it at the same time. The expired
        packets come from the expiry index, and from a scan of the databases on the first run,
        every ``scan_every_s`` seconds after it (what a lost or unreachable index missed) and
        whenever the index cannot answer."""
        now = self.ports.clock.now_ms()
        due = None
        if time.monotonic() < self._scanned_at + self.scan_every_s:
            due = await self.ports.expiries.due(now, limit)
        if due is None:
            due = await self.ports.packets.due_refunds(now, limit)
            self._scanned_at = time.monotonic()
        done = 0
        for order_id in due:
            packet = await self.ports.packets.refund(order_id, now)
            if packet is not None:
                if self.shared is not None:
                    await self.shared.ended(order_id, packet.status)
                await self.outbox.changed([details_entry(order_id)])
                self.outbox.notify(events.expired(packet))
                await self.pay_refund(packet)
                done += 1
        await self.ports.expiries.remove(due)  # refunded, finished or not there: settled either way
        return done

    async def pay_refund(self, packet: Packet) -> None:
        """Credit an expired packet's refunded fen to its sender (ref = order id), then mark it refunded."""
        now = self.ports.clock.now_ms()
        entry = LedgerEntry(packet.sender_id, EntryKind.REFUND, packet.order_id, packet.refunded_fen, now)
        if await self.ports.ledger.post(entry):
            self.outbox.notify(events.refunded(packet))
        await self.ports.packets.mark_refunded(packet.order_id)
        await self.outbox.changed([details_entry(packet.order_id)])

    async def reconcile(self, window_ms: int, limit: int = 500) -> int:
        """Complete every money movement that spans two shards and was cut between its steps,
        once it is ``window_ms`` old; returns how many movements it completed:

        - pay: the sender's debit (their shard), then the packet row (the packet's shard), then the
          follow-ups (``reconcile_pays``: a debit with no packet is activated from its claimed
          pre-order, or undone when the pre-order is gone; a packet whose pre-order is still there
          is followed up);
        - open: the receipts (the packet's shard), then each credit: the receiver's ledger entry
          (their shard), then the receipt's mark (receipts still pending are credited here);
        - refund: the refund recorded on the packet (its shard), then the sender's ledger entry,
          then the mark refunded (recorded refunds not yet paid are paid here);
        - the user lists, written from a queue (ListKeeper.repair).

        Pays whose pre-orders cannot be read (Degraded: the cache that holds them is silent) wait
        for a later run; the other movements go on. A run that completed any logs one INFO line
        with the pays, credits and refunds it completed (the list rows are ListKeeper's to tell)."""
        try:
            pays = await self.reconcile_pays(window_ms, limit)
        except errors.Degraded as exc:
            log.warning("reconciler: pays left for a later run: %s", exc)
            pays = 0
        receipts = await self.ports.packets.uncredited(self.ports.clock.now_ms() - window_ms, limit)
        await self.crediting.apply(receipts)
        refunds = await self.ports.packets.unpaid_refunds(limit)
        for packet in refunds:
            await self.pay_refund(packet)
        await self.lists.repair(window_ms, 4 * limit)
        done = pays + len(receipts) + len(refunds)
        if done:
            log.info(
                "reconciler completed %d pays, %d credits and %d refunds cut between their steps",
                pays,
                len(receipts),
                len(refunds),
            )
        return done

    async def reconcile_pays(self, window_ms: int, limit: int = 500) -> int:
        """Settle the pays cut between their steps, for the send debits of this region's packets
        (the order id's region digit: another region's packets are in its shards, and its own
        reconciler settles them) made since the last run (the region's PAYS_CURSOR flag; at most
        PAYS_LOOKBACK_MS back) until ``window_ms`` ago, in pages of ``limit`` debits (their packets
        read together, one query per database; hongbao.core.services.scans.page: all of one
        millisecond when a page falls within it), at most PAYS_PAGES pages a run, the cursor moved
        after each; returns how many it settled. A debit with no packet is activated from its
        pre-order (claimed for that pay) with the expiry counted from the debit; with the pre-order
        gone (a cache that lost it), the pay is undone: the packet is recorded expired with its
        whole total refunded, and the refund is paid at once (ledger entry ``refund`` keyed by the
        order id, exactly once). The packet row's key decides a race with a retried pay: whichever
        inserts first stands, so a pay is never both undone and activated. A packet whose
        pre-order is still there gets the follow-ups its pay did not reach. Raises Degraded when a
        page's pre-orders cannot be read (their cache is silent): the cursor stays before that
        page, so its pays are settled by a later run, never undone for want of a pre-order."""
        ports = self.ports
        now = ports.clock.now_ms()
        region = self.sending.region
        cursor = PAYS_CURSOR.format(region)
        start, end = await scan_window(ports.flags, ports.clock, cursor, window_ms, PAYS_LOOKBACK_MS)
        settled = 0
        for _ in range(PAYS_PAGES):
            if start >= end:
                break
            seen, start = await page(self._send_debits, _debited_at, start, end, limit)
            settled += await self._settle_pays([d for d in seen if region_of(d.ref) == region], now)
            await ports.flags.set(cursor, str(start))
        return settled

    async def _send_debits(self, start_ms: int, end_ms: int, limit: int) -> list[LedgerEntry]:
        return await self.ports.ledger.entries_between(EntryKind.SEND, start_ms, end_ms, limit)

    async def _settle_pays(self, debits: list[LedgerEntry], now_ms: int) -> int:
        """Settle each of ``debits`` (reconcile_pays): their packets read together, their pre-orders
        read together (``get_many``); returns how many were settled."""
        if not debits:
            return 0
        order_ids = [d.ref for d in debits]
        packets, raws = await asyncio.gather(
            self.ports.packets.get_packets(order_ids),
            self.ports.preorders.get_many(order_ids, now_ms),
        )
        settled = 0
        for debit, raw in zip(debits, raws, strict=True):
            packet = packets.get(debit.ref)
            if packet is None:
                settled += await self._settle_pay(debit, raw, now_ms)
            elif raw is not None and packet.status is Status.ACTIVE:
                await self.sending.follow_up(packet, PreOrder.decode(raw).greeting, now_ms)
                settled += 1
        return settled

    async def _settle_pay(self, debit: LedgerEntry, raw: bytes | None, now_ms: int) -> int:
        """Activate (pre-order ``raw``) or undo (None) the pay of send ``debit`` whose packet is
        missing; 1 when this call did it, 0 when a racing pay inserted the packet first."""
        order_id = debit.ref
        pre = None if raw is None else PreOrder.decode(raw)
        if pre is not None:
            packet = pre.active_packet(order_id, debit.created_at_ms + self.limits.expiry_ms)
        else:
            packet = _undone_packet(order_id, debit)
        if not await self.ports.packets.insert_packet(packet):
            return 0
        if pre is not None:
            log.warning("reconciler: pay of %s was cut after its debit; packet activated", order_id)
            await self.sending.follow_up(packet, pre.greeting, now_ms)
        else:
            log.warning(
                "reconciler: pay of %s was cut after its debit and its pre-order is gone; %d fen refunded",
                order_id,
                packet.total_fen,
            )
            await self.pay_refund(packet)
        return 1


def _undone_packet(order_id: str, debit: LedgerEntry) -> Packet:
    """The record of a pay undone after send ``debit``: a packet of the debit's total for its
    sender, expired at the debit's time with the whole total to refund and nothing opened (its
    pre-order is gone: kind lucky, one share, no audience)."""
    total, at = -debit.amount_fen, debit.created_at_ms
    return Packet(order_id, debit.user_id, Kind.LUCKY, 1, total, None, None, 0, 1, Status.EXPIRED, at, at, at, total)


def _debited_at(debit: LedgerEntry) -> int:
    return debit.created_at_ms
