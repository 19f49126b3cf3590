"""Per-packet open batching within one worker (docs/architecture.md section 6).

Concurrent opens of the same packet in one worker wait in that packet's batch; one flusher per
packet takes an admission slot from the host-wide native table (at most ``max_in_db``
transactions per packet in the database at once, across every worker), then runs ONE
transaction for everything queued so far (one row lock, many receipts). A batch that is full
refuses new openers with Busy (429) instead of queueing without bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import hongbao_native
from hongbao.core.errors import Busy
from hongbao.core.ports import OpenResult

#: run(order_id, user_ids) -> one OpenResult per user id, from one transaction.
RunBatch = Callable[[str, Sequence[str]], Awaitable[list[OpenResult]]]


class _Batch:
    __slots__ = ("waiting", "running", "flusher")

    def __init__(self) -> None:
        self.waiting: list[tuple[str, asyncio.Future[OpenResult]]] = []
        self.running = 0  # openers inside the transaction under way
        self.flusher: asyncio.Task[None] | None = None


class OpenBatcher:
    """Queue openers per packet and flush them in batched transactions.

    ``admission``: the shared AdmissionTable; ``max_in_db``: K, transactions per packet in the DB
    at once; ``max_batch``: openers in one transaction; ``max_waiting``: openers queued per packet
    per worker before Busy; ``admission_wait_s``: pause between admission attempts, seconds.
    """

    __slots__ = ("_run", "_admission", "_max_in_db", "_max_batch", "_max_waiting", "_wait_s", "_batches")

    def __init__(
        self,
        run: RunBatch,
        admission: hongbao_native.AdmissionTable,
        *,
        max_in_db: int = 2,
        max_batch: int = 100,
        max_waiting: int = 1000,
        admission_wait_s: float = 0.001,
    ) -> None:
        self._run, self._admission = run, admission
        self._max_in_db, self._max_batch, self._max_waiting = max_in_db, max_batch, max_waiting
        self._wait_s = admission_wait_s
        self._batches: dict[str, _Batch] = {}

    async def open(self, order_id: str, user_id: str) -> OpenResult:
        """Queue one opener and wait for its result. Raises Busy when the packet's queue is full."""
        batch = self._batches.get(order_id)
        if batch is None:
            batch = self._batches[order_id] = _Batch()
        if len(batch.waiting) >= self._max_waiting:
            raise Busy(f"packet {order_id} is busy, retry shortly", retry_after=1.0)
        future: asyncio.Future[OpenResult] = asyncio.get_running_loop().create_future()
        batch.waiting.append((user_id, future))
        if batch.flusher is None:
            batch.flusher = asyncio.get_running_loop().create_task(self._flush(order_id, batch))
        return await future

    def in_flight(self) -> int:
        """Openers of this worker not answered yet: waiting in a packet's batch or inside its transaction."""
        return sum(len(batch.waiting) + batch.running for batch in self._batches.values())

    async def _flush(self, order_id: str, batch: _Batch) -> None:
        try:
            while batch.waiting:
                while not self._admission.try_enter(order_id, self._max_in_db):
                    await asyncio.sleep(self._wait_s)
                taken, batch.waiting = batch.waiting[: self._max_batch], batch.waiting[self._max_batch :]
                batch.running = len(taken)
                try:
                    results = await self._run(order_id, [user_id for user_id, _ in taken])
                except BaseException as exc:
                    for _, future in taken:
                        if not future.done():
                            future.set_exception(exc if isinstance(exc, Exception) else RuntimeError("open cancelled"))
                    if not isinstance(exc, Exception):
                        raise
                    continue
                finally:
                    batch.running = 0
                    self._admission.leave(order_id)
                for (_, future), result in zip(taken, results, strict=True):
                    if not future.done():
                        future.set_result(result)
        finally:
            batch.flusher = None
            for _, future in batch.waiting:  # only left behind when the flusher was cancelled
                if not future.done():
                    future.set_exception(RuntimeError("open cancelled: the worker is shutting down"))
            self._batches.pop(order_id, None)
