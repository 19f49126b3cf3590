"""Open batching within one worker (docs/architecture.md section 6).

Concurrent opens wait in their packet's batch. Each database has at most ``flushers`` flushers in
this worker; a flusher takes, for every packet of its database with openers waiting (up to
``max_packets`` of them), an admission slot from the host-wide native table (at most
``max_in_db`` transactions per packet in the database at once, across every worker) and the
packet's openers, then runs ONE transaction for all of them (one row lock per packet, many
receipts). While the database is quick, a flusher is free when an opener arrives and the
transaction holds that opener alone; under load, everything that queued while the flushers were
busy goes in the next transaction, so the transactions per open fall as the load rises. A packet
whose batch is full refuses new openers with Busy (429) instead of queueing without bound.

Once a transaction committed, its packets' slots go back: another flusher may run the packet's
next transaction while this one starts the follow-ups (``follow_up``: the queue and cache
writes), answers the openers and waits for the follow-ups to end. The openers do not wait for
them; the flusher does, so under load (every flusher busy) the openers that queue meanwhile
share its next transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

import hongbao_native
from hongbao.core.errors import Busy
from hongbao.core.ports import OpenResult

#: run([(order_id, user_ids), ...]) -> per packet, one OpenResult per user id, from one transaction.
RunBatches = Callable[[Sequence[tuple[str, Sequence[str]]]], Awaitable[list[list[OpenResult]]]]
#: follow_up(batches, results): what follows a committed transaction, under way when it returns
#: (what the openers' next reads must see is in place by then; the awaitable: all of it done).
FollowUp = Callable[[Sequence[tuple[str, Sequence[str]]], list[list[OpenResult]]], Awaitable[None]]
_Taken = list[tuple[str, list[tuple[str, asyncio.Future[OpenResult]]]]]
log = logging.getLogger("hongbao.service")


class _Batch:
    __slots__ = ("waiting", "running")

    def __init__(self) -> None:
        self.waiting: list[tuple[str, asyncio.Future[OpenResult]]] = []
        self.running = 0  # openers inside the transactions under way


class OpenBatcher:
    """Queue openers per packet and flush them, per database, in batched transactions.

    ``run``: the transaction of several packets of one database; ``follow_up``: started once it
    committed, before its openers are answered (their packets' slots are free by then; None:
    nothing; see FollowUp);
    ``database``: order id -> its database; ``admission``: the shared AdmissionTable;
    ``max_in_db``: K, transactions per packet in the DB at once; ``max_batch``: openers of one
    packet in one transaction; ``max_packets``: packets in one transaction; ``flushers``:
    transactions per database this worker runs at once; ``max_waiting``: openers queued per
    packet per worker before Busy; ``admission_wait_s``: pause when no waiting packet is
    admitted, seconds.
    """

    __slots__ = (
        "_run",
        "_follow_up",
        "_database",
        "_admission",
        "_max_in_db",
        "_max_batch",
        "_max_packets",
        "_flushers",
        "_max_waiting",
        "_wait_s",
        "_batches",
        "_queued",
        "_running",
    )

    def __init__(
        self,
        run: RunBatches,
        database: Callable[[str], int],
        admission: hongbao_native.AdmissionTable,
        *,
        max_in_db: int = 2,
        max_batch: int = 100,
        max_packets: int = 32,
        flushers: int = 2,
        max_waiting: int = 1000,
        admission_wait_s: float = 0.001,
        follow_up: FollowUp | None = None,
    ) -> None:
        self._run, self._follow_up, self._database, self._admission = run, follow_up, database, admission
        self._max_in_db, self._max_batch, self._max_packets = max_in_db, max_batch, max_packets
        self._flushers, self._max_waiting, self._wait_s = flushers, max_waiting, admission_wait_s
        self._batches: dict[str, _Batch] = {}
        self._queued: dict[int, dict[str, None]] = {}  # database -> packets with openers waiting, oldest first
        self._running: dict[int, set[asyncio.Task[None]]] = {}  # database -> its flushers

    async def open(self, order_id: str, user_id: str) -> OpenResult:
        """Queue one opener and wait for its result. Raises Busy when the packet's queue is full."""
        batch = self._batches.get(order_id)
        if batch is None:
            batch = self._batches[order_id] = _Batch()
        if len(batch.waiting) >= self._max_waiting:
            raise Busy(f"packet {order_id} is busy, retry shortly", retry_after=1.0)
        database = self._database(order_id)
        future: asyncio.Future[OpenResult] = asyncio.get_running_loop().create_future()
        batch.waiting.append((user_id, future))
        self._queued.setdefault(database, {})[order_id] = None
        flushers = self._running.setdefault(database, set())
        if len(flushers) < self._flushers:
            flusher = asyncio.get_running_loop().create_task(self._flush(database))
            flushers.add(flusher)
        return await future

    def in_flight(self) -> int:
        """Openers of this worker not answered yet: waiting in a packet's batch or inside its transaction."""
        return sum(len(batch.waiting) + batch.running for batch in self._batches.values())

    def _take(self, database: int) -> tuple[_Taken, bool]:
        """The next transaction's packets and openers: each waiting packet of ``database`` with no
        transaction of this worker under way that gets an admission slot, oldest first, up to
        ``max_packets``; and whether a packet was refused a slot (the other workers hold them)."""
        queued = self._queued.get(database, {})
        taken: _Taken = []
        refused = False
        for order_id in list(queued):
            if len(taken) == self._max_packets:
                break
            batch = self._batches[order_id]
            if batch.running:  # one transaction per packet from this worker at a time: its flusher takes the rest
                continue
            if not self._admission.try_enter(order_id, self._max_in_db):
                refused = True
                continue
            openers, batch.waiting = batch.waiting[: self._max_batch], batch.waiting[self._max_batch :]
            if not batch.waiting:
                del queued[order_id]
            batch.running += len(openers)
            taken.append((order_id, openers))
        return taken, refused

    async def _flush(self, database: int) -> None:
        me = asyncio.current_task()
        try:
            while self._queued.get(database):
                taken, refused = self._take(database)
                if not taken:
                    if not refused:  # every waiting packet is in a transaction of another flusher here
                        break
                    await asyncio.sleep(self._wait_s)
                    continue
                batches = [(order_id, [user for user, _ in openers]) for order_id, openers in taken]
                try:
                    try:
                        results = await self._run(batches)
                    finally:
                        for order_id, openers in taken:
                            self._admission.leave(order_id)
                            self._settle(order_id, len(openers))
                    following = None if self._follow_up is None else self._follow_up(batches, results)
                except BaseException as exc:  # a follow-up that failed to start too: the receipts stand,
                    _fail(taken, exc)  # a retried open finds them
                    if not isinstance(exc, Exception):
                        raise
                    continue
                _resolve(taken, results)
                if following is not None:  # the flusher waits: under load its next transaction takes more
                    await _followed(following, batches)
        finally:
            flushers = self._running[database]
            flushers.discard(me)
            if not flushers:  # openers still queued now were left by a cancelled flusher: nobody would run them
                self._abandon(database)

    def _settle(self, order_id: str, done: int) -> None:
        """``done`` openers of ``order_id`` left their transaction; forget a batch with nobody left."""
        batch = self._batches[order_id]
        batch.running -= done
        if not batch.waiting and not batch.running:
            del self._batches[order_id]

    def _abandon(self, database: int) -> None:
        """Fail the openers still waiting on ``database`` (only left behind when its flushers were cancelled)."""
        for order_id in self._queued.pop(database, {}):
            batch = self._batches.pop(order_id, None)
            for _, future in batch.waiting if batch is not None else ():
                if not future.done():
                    future.set_exception(RuntimeError("open cancelled: the worker is shutting down"))


async def _followed(following: Awaitable[None], batches: Sequence[tuple[str, Sequence[str]]]) -> None:
    """Wait for ``following``; its failure is logged (its openers are answered: their receipts stand)."""
    try:
        await following
    except Exception:
        log.exception("the follow-ups of the opens of %s failed", ", ".join(order_id for order_id, _ in batches))


def _resolve(taken: _Taken, results: list[list[OpenResult]]) -> None:
    """Answer every opener of ``taken`` not answered yet with its result (``results``: per packet, per opener)."""
    for (_, openers), outcomes in zip(taken, results, strict=True):
        for (_, future), result in zip(openers, outcomes, strict=True):
            if not future.done():
                future.set_result(result)


def _fail(taken: _Taken, exc: BaseException) -> None:
    """Fail every opener of ``taken`` not answered yet with ``exc`` (a cancellation: RuntimeError)."""
    for _, openers in taken:
        for _, future in openers:
            if not future.done():
                future.set_exception(exc if isinstance(exc, Exception) else RuntimeError("open cancelled"))
