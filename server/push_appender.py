"""Appends to the users' logs made in one turn of the event loop share one round trip.

Events come in bursts (a packet's opens, credits and its finish), and each append is a write
(one SQLite transaction, or a Redis pipeline): batching them keeps the push store's writes
from queueing in front of the money's own on a busy worker. Appends of one user keep their order.
"""

from __future__ import annotations

import asyncio

from hongbao.core.push_ports import BodyMaker, MessageLog, Stored
from hongbao.server.push_messages import now_ms


class Appender:
    """Batch ``log.append`` calls: each ``append`` joins the batch of the current loop turn."""

    __slots__ = ("log", "_batch", "_writes")

    def __init__(self, log: MessageLog) -> None:
        self.log = log
        self._batch: list[tuple[str, BodyMaker, asyncio.Future[Stored]]] = []
        self._writes: set[asyncio.Task[None]] = set()

    async def append(self, uid: str, make_body: BodyMaker) -> Stored:
        """Append ``make_body(offset, epoch)`` to ``uid``'s stream; raises what the log raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Stored] = loop.create_future()
        self._batch.append((uid, make_body, future))
        if len(self._batch) == 1:
            loop.call_soon(self._write)
        return await future

    def _write(self) -> None:
        task = asyncio.get_running_loop().create_task(self._append(self._batch))
        self._batch = []
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _append(self, batch: list[tuple[str, BodyMaker, asyncio.Future[Stored]]]) -> None:
        try:
            stored = await self.log.append([(uid, make_body) for uid, make_body, _ in batch], now_ms())
        except Exception as exc:
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, _, future), message in zip(batch, stored, strict=True):
            if not future.done():
                future.set_result(message)
