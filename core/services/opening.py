"""Opening: the admission table and the per-packet batcher (hongbao.core.batching) in front of
the open transaction. Once it commits: the push of each opener's share and the realtime credits
of the batch (one ledger write, under way while the rest follows), then the batch's follow-ups in
one queue write (list rows, the best-luck flag, queued credits), the grab filter's levels, the
details' invalidation and, with the last share, the packet's finish (the push goes with the
open, not after the lists queue); the openers are answered once these are under way. A packet
this worker knows finished (finished is final: no share ever comes back) is answered without a
transaction or its row lock, from its receipts read once (then held in memory) or, for a packet
of many shares, from the opener's receipt."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping, Sequence

import hongbao_native
from hongbao.core import errors, events
from hongbao.core.batching import OpenBatcher
from hongbao.core.clock import Clock
from hongbao.core.faults import NO_FAULTS, Faults
from hongbao.core.messages import Outgoing, best_luck_due, credit_due, list_row_due
from hongbao.core.packet import Kind, Receipt
from hongbao.core.ports import Draw, ExpiryIndex, OpenResult, PacketStore
from hongbao.core.services.audience import Audience
from hongbao.core.services.crediting import Crediting
from hongbao.core.services.grabbing import GrabFilter
from hongbao.core.services.outbox import Outbox
from hongbao.core.ttl_cache import TtlCache
from hongbao.core.view_cache import details_entry
from hongbao.core.vocabulary import Direction, Refusal

log = logging.getLogger("hongbao.service")
#: An open's refusal -> (its error, its message about order id {}), worded as grab's.
_REFUSALS: dict[str, tuple[type[errors.HongbaoError], str]] = {
    Refusal.FINISHED: (errors.Finished, "packet {} is finished"),
    Refusal.EXPIRED: (errors.Expired, "packet {} has expired"),
    Refusal.NOT_FOUND: (errors.NotFound, "no packet {}"),
}
FINISHED_TTL_MS = 600_000  # how long a worker remembers that a packet has no share left
FINISHED_MAX_ENTRIES = 50_000
FINISHED_RECEIPTS_TTL_MS = 60_000  # how long a worker holds a finished packet's receipts (its late opens come soon)
FINISHED_RECEIPTS_MAX_ENTRIES = 512  # packets whose receipts are held: at most 512 x 200 receipts (~15 MB)
FINISHED_RECEIPTS_MAX_COUNT = 200  # a finished packet of more shares answers each late open from a point read
SETTLE_TIMEOUT_S = 5.0  # how long a stop waits for the follow-ups and realtime credits under way


class Opening:
    """open over ``packets`` through the host's ``admission`` table, at most ``max_in_db`` open
    transactions per packet in the database at once (K); ``draw`` computes a lucky share (native
    split_lucky by default); ``faults``: the crash points armed (tests: ``open_committed``)."""

    __slots__ = (
        "packets",
        "expiries",
        "clock",
        "audience",
        "grabbing",
        "crediting",
        "outbox",
        "shared",
        "draw",
        "faults",
        "batcher",
        "_finished",
        "_receipts",
        "_credits",
        "_under_way",
    )

    def __init__(
        self,
        packets: PacketStore,
        expiries: ExpiryIndex,
        clock: Clock,
        audience: Audience,
        grabbing: GrabFilter,
        crediting: Crediting,
        outbox: Outbox,
        admission: hongbao_native.AdmissionTable,
        *,
        max_in_db: int = 2,
        draw: Draw = hongbao_native.split_lucky,
        faults: Faults = NO_FAULTS,
    ) -> None:
        self.packets, self.expiries, self.clock = packets, expiries, clock
        self.audience, self.grabbing = audience, grabbing
        self.crediting, self.outbox, self.shared = crediting, outbox, grabbing.shared
        self.draw, self.faults = draw, faults
        self.batcher = OpenBatcher(
            self.open_batches, self._database, admission, max_in_db=max_in_db, follow_up=self.follow_up
        )
        self._finished: TtlCache[str, bool] = TtlCache(FINISHED_TTL_MS, FINISHED_MAX_ENTRIES)
        self._receipts: TtlCache[str, asyncio.Future[Mapping[str, Receipt]]] = TtlCache(
            FINISHED_RECEIPTS_TTL_MS, FINISHED_RECEIPTS_MAX_ENTRIES
        )
        self._credits: dict[tuple[str, str], asyncio.Future[None]] = {}  # (order id, user id) -> its credit entered
        # the realtime credits and follow-ups under way, held until done (the loop keeps weak references)
        self._under_way: set[asyncio.Task[None]] = set()

    async def open(self, user_id: str, order_id: str) -> tuple[Receipt, bool]:
        """Open the packet for ``user_id``: (receipt, repeat). A repeat returns the first amount.
        Raises Finished/Expired (410), NotFound, NotPaid, NotMember, Busy (429)."""
        packet = await self.audience.visible_packet(user_id, order_id, fixed=True)  # the transaction checks the rest
        if packet.kind is Kind.EXCLUSIVE and user_id != packet.receiver_id:
            raise errors.NotMember(f"packet {order_id} is for someone else")
        if self._finished.get(order_id, self.clock.now_ms()):
            return await self._after_finish(user_id, order_id, packet.count)
        result = await self.batcher.open(order_id, user_id)
        if result.receipt is None:
            self.grabbing.forget(order_id)
            raise _refused(result.refusal, order_id)
        self.grabbing.opened(order_id, user_id, result.receipt.amount_fen)
        entered = None if result.repeat else self._credits.get((order_id, user_id))
        if entered is not None:  # started when the receipt committed: the answer waits for the balance
            await asyncio.shield(entered)
        return result.receipt, result.repeat

    async def _after_finish(self, user_id: str, order_id: str, count: int) -> tuple[Receipt, bool]:
        """open of a packet known finished (``count`` shares): the user's receipt as a repeat, else
        Finished. Every receipt of a finished packet committed with its last share, so a plain read
        sees them all: up to FINISHED_RECEIPTS_MAX_COUNT shares, one read of all of them serves
        every later open on this worker (``_finished_receipts``); beyond, one point read an open."""
        if count <= FINISHED_RECEIPTS_MAX_COUNT:
            receipt = (await self._finished_receipts(order_id)).get(user_id)
        else:
            receipt = await self.packets.receipt(order_id, user_id)
        if receipt is None:
            raise _refused(Refusal.FINISHED, order_id)
        self.grabbing.opened(order_id, user_id, receipt.amount_fen)
        return receipt, True

    def _finished_receipts(self, order_id: str) -> asyncio.Future[Mapping[str, Receipt]]:
        """The finished packet's receipts by user id, read once for every open waiting on them (a
        shared Task: an opener that goes away does not cancel the others' read); a read that
        fails is forgotten, so the next open reads again. Raises as PacketStore.receipts."""
        now_ms = self.clock.now_ms()
        held = self._receipts.get(order_id, now_ms)
        if held is None:
            held = asyncio.ensure_future(self._read_receipts(order_id))
            self._receipts.put(order_id, held, now_ms)
            held.add_done_callback(lambda done: self._forget_failed(order_id, done))
        return asyncio.shield(held)

    async def _read_receipts(self, order_id: str) -> Mapping[str, Receipt]:
        return {receipt.user_id: receipt for receipt in await self.packets.receipts(order_id)}

    def _forget_failed(self, order_id: str, done: asyncio.Future[Mapping[str, Receipt]]) -> None:
        if (done.cancelled() or done.exception() is not None) and self._receipts.get(order_id, 0) is done:
            self._receipts.drop(order_id)

    def _database(self, order_id: str) -> int:
        return self.packets.database(order_id)

    async def open_batches(self, batches: Sequence[tuple[str, Sequence[str]]]) -> list[list[OpenResult]]:
        """The batcher's transaction: open for each (order id, user ids) of ``batches`` (packets of
        one database) at the clock's current time; the packets it finished or found finished are
        remembered here at once (``follow_up`` does the rest)."""
        outcomes = await self.packets.open_batches(
            batches, self.clock.now_ms(), self.draw, self.crediting.credit_from()
        )
        self.faults.point("open_committed")
        now_ms = self.clock.now_ms()
        credits: list[Receipt] = []
        for (order_id, _), results in zip(batches, outcomes, strict=True):
            if any(r.last or r.refusal is Refusal.FINISHED for r in results):
                self._finished.put(order_id, True, now_ms)
            for result in results:
                receipt = result.receipt
                if receipt is not None and not result.repeat:
                    self.outbox.notify(events.opened(receipt))
                    if receipt.credited:  # credited in the open's transaction
                        self.outbox.notify(events.credited(receipt.order_id, receipt.user_id, receipt.amount_fen))
                    elif self.crediting.in_request(receipt):
                        credits.append(receipt)
        if credits:
            self._start_credits(credits)
        return outcomes

    def _start_credits(self, receipts: list[Receipt]) -> None:
        """Credit ``receipts`` (committed just now, realtime) in one ``Crediting.apply``, in a task
        of its own: it runs while the follow-ups do, and each opener waits until the ledger entries
        are written (``_credits``), not for the receipts' marks. A failure is logged and leaves the
        credits to the reconciler: the receipts are committed, and the open is answered all the same."""
        entered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = [(receipt.order_id, receipt.user_id) for receipt in receipts]
        for key in keys:
            self._credits[key] = entered
        entered.add_done_callback(lambda done: self._forget_credits(keys, done))
        task = asyncio.ensure_future(self._credit(receipts, entered))
        self._under_way.add(task)
        task.add_done_callback(lambda done: self._credited(done, entered))

    def _credited(self, task: asyncio.Task[None], entered: asyncio.Future[None]) -> None:
        """The credit ``task`` ended: forget it, and release its openers if it never began (cancelled first)."""
        self._under_way.discard(task)
        if not entered.done():
            entered.set_result(None)

    def _forget_credits(self, keys: list[tuple[str, str]], done: asyncio.Future[None]) -> None:
        for key in keys:
            if self._credits.get(key) is done:
                del self._credits[key]

    async def _credit(self, receipts: list[Receipt], entered: asyncio.Future[None]) -> None:
        try:
            try:
                due = await self.crediting.enter(receipts)  # in hand: nothing to read again
            finally:
                entered.set_result(None)  # the openers' answers: the balance holds the share, or the reconciler will
            await self.crediting.mark(due)
        except errors.Degraded as exc:  # an expected answer under overload or an outage: one line
            log.warning("realtime credit of %s deferred to the reconciler: %s", _names(receipts), exc)
        except Exception:  # the receipts are committed: the reconciler credits (or marks) them later
            log.exception("realtime credit of %s failed; left to the reconciler", _names(receipts))

    def follow_up(
        self, batches: Sequence[tuple[str, Sequence[str]]], outcomes: list[list[OpenResult]]
    ) -> asyncio.Future[None]:
        """Start what follows a committed transaction (``batches``, its ``outcomes``), before its
        openers are answered (OpenBatcher): in one tick, the follow-ups (list rows, best luck, queued
        credits) in one queue write and the caches' updates, the details' bump among them (this
        worker's reads of the details wait for it from now on: a details read after the answer
        sees the receipt); then the packets whose last share went leave the expiry index and are
        announced finished. The future: all of it done (it never fails: each step logs its own)."""
        messages: list[Outgoing] = []
        updates: list[Awaitable[None]] = []
        changed: list[str] = []
        finished: list[tuple[str, Receipt]] = []
        for (order_id, _), results in zip(batches, outcomes, strict=True):
            for result in results:
                receipt = result.receipt
                if receipt is None or result.repeat:
                    continue
                messages.append(
                    list_row_due(
                        Direction.RECEIVED, receipt.user_id, order_id, receipt.amount_fen, receipt.opened_at_ms
                    )
                )
                if result.last:
                    messages.append(best_luck_due(order_id))
                if self.crediting.queued(receipt):
                    messages.append(credit_due(order_id, receipt.user_id))
            if self.shared is not None:
                updates.append(self.shared.opened(order_id, results))
            if any(r.refusal is not None or not r.repeat for r in results):  # the details show the batch
                changed.append(details_entry(order_id))
            best = next((result.best for result in results if result.last), None)
            if best is not None:  # nothing left to refund
                finished.append((order_id, best))
        if finished:
            updates.append(self.expiries.remove([order_id for order_id, _ in finished]))
        # one tick: the queue write (first: the Redis breaker's trial call when one is due), the caches' updates
        started = [asyncio.ensure_future(self.outbox.publish(messages)), self.outbox.changed(changed)]
        started += map(asyncio.ensure_future, updates)
        following = asyncio.ensure_future(self._followed(started, finished, batches))
        self._under_way.add(following)
        following.add_done_callback(self._under_way.discard)
        return following

    async def settle(self, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        """Wait until no follow-up nor realtime credit is under way, for ``timeout_s`` seconds at
        most (before a stop closes the connections they use; what is cut then is the reconciler's).
        Their failures are theirs to log."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self._under_way and (left := deadline - asyncio.get_running_loop().time()) > 0:
            await asyncio.wait(set(self._under_way), timeout=left)

    async def _followed(
        self,
        started: list[Awaitable[None]],
        finished: list[tuple[str, Receipt]],
        batches: Sequence[tuple[str, Sequence[str]]],
    ) -> None:
        """Wait for the follow-ups ``started`` of ``batches`` (one that fails is logged: the caches'
        TTLs and the reconciler mend what it left), then announce each of ``finished`` (order id,
        best luck)."""
        for outcome in await asyncio.gather(*started, return_exceptions=True):
            if isinstance(outcome, Exception):
                order_ids = ", ".join(order_id for order_id, _ in batches)
                log.error("a follow-up of the opens of %s failed", order_ids, exc_info=outcome)
        for order_id, best in finished:
            await self._announce_finished(order_id, best)

    async def _announce_finished(self, order_id: str, best: Receipt) -> None:
        """Notify ``finished`` with best luck (``best``, the transaction's) for a packet whose last
        share went; its audience from the packet's fixed fields (Audience.fixed_packet)."""
        try:
            packet = await self.audience.fixed_packet(order_id)
        except Exception:  # the packet is finished all the same; its push is lost, and told
            log.exception("could not read packet %s for its finished event: every push stream is renewed", order_id)
            self.outbox.lost()
            return
        if packet is not None:
            self.outbox.notify(events.finished(packet, best.user_id, best.amount_fen))


def _names(receipts: list[Receipt]) -> str:
    """``order_id/user_id`` of each of ``receipts``, for a log line."""
    return ", ".join(f"{receipt.order_id}/{receipt.user_id}" for receipt in receipts)


def _refused(refusal: Refusal | None, order_id: str) -> errors.HongbaoError:
    """The error an open refused with ``refusal`` raises (Finished and Expired: 410, NotFound: 404)."""
    error, message = _REFUSALS.get(refusal or "", (errors.HongbaoError, f"packet {{}}: {refusal}"))
    return error(message.format(order_id))
