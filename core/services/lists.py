"""The users' sent and received lists: written from the lists queue (rows and best-luck flags
as the pays and opens queued them), and repaired from the database by the reconciler for what a
queue that was down at a pay or an open did not carry."""

from __future__ import annotations

from collections.abc import Sequence

from hongbao.core.clock import Clock
from hongbao.core.messages import LISTS_STREAM, BestLuckDue, ListRowDue, decode_lists
from hongbao.core.packet import Packet
from hongbao.core.ports import Flags, ListRow, ListScans, PacketStore, Queue, UserListStore
from hongbao.core.rules import Limits
from hongbao.core.services.outbox import Outbox
from hongbao.core.services.scans import page, scan_window
from hongbao.core.view_cache import lists_entry
from hongbao.core.vocabulary import Direction

LISTS_CURSOR = "lists_repaired_until:{}"  # the flag of a region: its list rows are repaired up to this time (ms)
LISTS_LOOKBACK_MS = 3600_000  # how far back the first (or a long-stalled) list repair looks


class ListKeeper:
    """The lists over ``lists`` (the rows), ``packets`` (best luck), ``queue`` (the lists
    stream) and ``scans`` (what the repair reads: this ``region``'s packets; None: nothing to
    repair, the queue cannot be lost), with the repair's cursor of the region in ``flags``."""

    __slots__ = ("lists", "packets", "queue", "flags", "clock", "limits", "outbox", "scans", "region")

    def __init__(
        self,
        lists: UserListStore,
        packets: PacketStore,
        queue: Queue,
        flags: Flags,
        clock: Clock,
        limits: Limits,
        outbox: Outbox,
        scans: ListScans | None,
        region: int = 1,
    ) -> None:
        self.lists, self.packets, self.queue, self.flags, self.clock = lists, packets, queue, flags, clock
        self.limits, self.outbox, self.scans, self.region = limits, outbox, scans, region

    async def drain(self, max_messages: int = 100, lease_ms: int = 30_000) -> int:
        """Write queued sent/received rows and best-luck flags to the user lists: one claim of up
        to ``max_messages``, one write of them all (a second only in the race below), one ack;
        returns how many messages."""
        messages = await self.queue.claim(LISTS_STREAM, max_messages, lease_ms, self.clock.now_ms())
        if not messages:
            return 0
        decoded = [decode_lists(body) for _, body in messages]
        rows = [
            ListRow(m.user_id, m.direction, m.order_id, m.amount_fen, m.created_at_ms)
            for m in decoded
            if isinstance(m, ListRowDue)
        ]
        finished = [m.order_id for m in decoded if isinstance(m, BestLuckDue)]
        bests = await self._best_lucks({*(r.order_id for r in rows), *finished})
        flags = [(best, order_id) for order_id in finished if (best := bests[order_id]) is not None]
        await self.lists.write(rows, [*flags, *_best_rows(rows, bests)])
        # Batches publish after their own transaction, so a packet still open when read above may
        # have finished since and its "best" been drained elsewhere before these rows existed (the
        # flag found nothing): read those packets again now that the rows are in.
        late = _best_rows(rows, await self._best_lucks({r.order_id for r in rows if bests[r.order_id] is None}))
        if late:
            await self.lists.write([], late)
        await self.outbox.changed([lists_entry(u) for u in {*(r.user_id for r in rows), *(u for u, _ in flags)}])
        await self.queue.ack(LISTS_STREAM, *(message_id for message_id, _ in messages))
        return len(messages)

    async def repair(self, window_ms: int, limit: int = 2000) -> int:
        """Write the list rows and best-luck flags the lists queue lost (it was down at a pay or an
        open) for the receipts opened and packets paid since the last repair (the region's
        LISTS_CURSOR flag; at most LISTS_LOOKBACK_MS back) until ``window_ms`` ago, a page of ``limit``
        of each (hongbao.core.services.scans.page: all of one millisecond when a page falls within
        it); returns how many rows and flags it wrote. Idempotent, on any number of workers at once."""
        scans = self.scans
        if scans is None:
            return 0
        cursor = LISTS_CURSOR.format(self.region)
        start, end = await scan_window(self.flags, self.clock, cursor, window_ms, LISTS_LOOKBACK_MS)
        if start >= end:
            return 0
        expiry_ms = self.limits.expiry_ms
        opened, opened_until = await page(scans.opened_between, lambda r: r.opened_at_ms, start, end, limit)

        async def paid_between(start_ms: int, end_ms: int, limit: int) -> list[Packet]:
            return await scans.paid_between(start_ms, end_ms, expiry_ms, limit)

        paid, paid_until = await page(paid_between, lambda p: p.expires_at_ms - expiry_ms, start, end, limit)
        rows = [ListRow(r.user_id, Direction.RECEIVED, r.order_id, r.amount_fen, r.opened_at_ms) for r in opened]
        rows += [
            ListRow(p.sender_id, Direction.SENT, p.order_id, p.total_fen, p.expires_at_ms - expiry_ms) for p in paid
        ]
        bests = {o: b for o, b in (await self._best_lucks({r.order_id for r in opened})).items() if b is not None}
        keys = [(r.user_id, r.direction, r.order_id) for r in rows]
        recorded = await self.lists.recorded([*keys, *((b, Direction.RECEIVED, o) for o, b in bests.items())])
        missing = [r for r, k in zip(rows, keys, strict=True) if k not in recorded]
        flags = [(b, o) for o, b in bests.items() if not recorded.get((b, Direction.RECEIVED, o), False)]
        if missing or flags:
            await self.lists.write(missing, flags)
            await self.outbox.changed([lists_entry(u) for u in {*(r.user_id for r in missing), *(u for u, _ in flags)}])
        await self.flags.set(cursor, str(min(opened_until, paid_until)))  # the next run: from the oldest point left
        return len(missing) + len(flags)

    async def _best_lucks(self, order_ids: set[str]) -> dict[str, str | None]:
        """Each packet's best-luck user (None: not finished)."""
        return await self.packets.best_lucks(sorted(order_ids)) if order_ids else {}


def _best_rows(rows: Sequence[ListRow], bests: dict[str, str | None]) -> list[tuple[str, str]]:
    """(user_id, order_id) of each received row whose user is its packet's best luck in ``bests``."""
    return [
        (r.user_id, r.order_id)
        for r in rows
        if r.direction == Direction.RECEIVED and bests.get(r.order_id) == r.user_id
    ]
