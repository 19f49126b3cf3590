"""Crediting: when a receipt's amount reaches its receiver's balance (the mode, switched at run
time for every worker through a flag) and the credit itself, exactly once per receipt."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from hongbao.core import events
from hongbao.core.clock import Clock
from hongbao.core.messages import CreditDue
from hongbao.core.packet import Receipt
from hongbao.core.ports import Flags, LedgerStore, PacketStore, credit_entry
from hongbao.core.services.outbox import Outbox

MODE_FLAG = "crediting_mode"


class CreditingMode(StrEnum):
    """When a receipt's amount reaches the receiver's balance (docs/architecture.md, crediting)."""

    REALTIME_LARGE = "realtime_large"  # amounts >= the threshold in the request, the rest queued
    QUEUED = "queued"  # every credit through the queue
    DEFERRED = "deferred"  # none in the request path: the reconciler credits from the receipts


class Crediting:
    """Credits over ``ledger`` and ``packets`` (the receipts' marks), in ``mode`` with
    ``realtime_threshold_fen`` splitting realtime_large; the mode is shared through ``flags``."""

    __slots__ = ("ledger", "packets", "flags", "clock", "outbox", "mode", "realtime_threshold_fen")

    def __init__(
        self,
        ledger: LedgerStore,
        packets: PacketStore,
        flags: Flags,
        clock: Clock,
        outbox: Outbox,
        *,
        mode: CreditingMode = CreditingMode.REALTIME_LARGE,
        realtime_threshold_fen: int = 2000,
    ) -> None:
        self.ledger, self.packets, self.flags, self.clock, self.outbox = ledger, packets, flags, clock, outbox
        self.mode, self.realtime_threshold_fen = mode, realtime_threshold_fen

    def credit_from(self) -> int | None:
        """The least amount in fen that the open credits itself (realtime_large), else None."""
        return self.realtime_threshold_fen if self.mode is CreditingMode.REALTIME_LARGE else None

    def in_request(self, receipt: Receipt) -> bool:
        """Whether the open credits ``receipt`` itself (realtime_large, at or above the threshold)."""
        return self.mode is CreditingMode.REALTIME_LARGE and receipt.amount_fen >= self.realtime_threshold_fen

    def queued(self, receipt: Receipt) -> bool:
        """Whether the open queues a credit for ``receipt`` (not credited by its transaction, and
        neither in the request nor deferred)."""
        return not receipt.credited and not self.in_request(receipt) and self.mode is not CreditingMode.DEFERRED

    async def set_mode(self, mode: CreditingMode) -> None:
        """Switch the mode for every worker (they sync within their interval) and here now."""
        await self.flags.set(MODE_FLAG, mode.value)
        self.mode = mode

    async def sync(self) -> None:
        """Pick up a mode switched by another worker or node."""
        mode = await self.flags.get(MODE_FLAG)
        if mode is not None:
            self.mode = CreditingMode(mode)

    async def credit(self, order_id: str, user_id: str) -> bool:
        """Credit one receipt to its receiver, once (the receipt is the ledger ref); False if
        there is no such receipt. Safe to repeat at any point."""
        receipt = await self.packets.receipt(order_id, user_id)
        if receipt is None:
            return False
        await self.apply([receipt])
        return True

    async def apply(self, receipts: Sequence[Receipt]) -> None:
        """Credit each receipt not marked credited: every ledger entry in one write (ref
        ``order_id:user_id``, so an entry already there is not applied again), then every mark in
        one (``enter``, then ``mark``). Ledger before mark: a stop between the two leaves a pending
        receipt whose next credit finds its entry and only marks it."""
        await self.mark(await self.enter(receipts))

    async def enter(self, receipts: Sequence[Receipt]) -> list[Receipt]:
        """The first step of ``apply``: the ledger entries of the receipts not marked credited, in
        one write, and the ``credited`` push of each entry applied now; returns those receipts
        (``mark`` marks them). Raises as LedgerStore.post_many."""
        due = [r for r in receipts if not r.credited]
        if not due:
            return due
        now = self.clock.now_ms()
        applied = await self.ledger.post_many([credit_entry(r, now) for r in due])
        for receipt, new in zip(due, applied, strict=True):
            if new:
                self.outbox.notify(events.credited(receipt.order_id, receipt.user_id, receipt.amount_fen))
        return due

    async def mark(self, receipts: Sequence[Receipt]) -> None:
        """The second step of ``apply``: mark ``receipts`` (their ledger entries written) credited,
        in one write. Raises as PacketStore.mark_credited."""
        if receipts:
            await self.packets.mark_credited([(r.order_id, r.user_id) for r in receipts])

    async def apply_queued(self, bodies: Sequence[bytes]) -> None:
        """Credit the receipts the credit-queue messages ``bodies`` name (each once, read together)."""
        keys = list(dict.fromkeys((m.order_id, m.user_id) for m in map(CreditDue.decode, bodies)))
        await self.apply(await self.packets.receipts_of(keys) if keys else [])
