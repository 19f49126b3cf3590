"""Appends to the users' logs share round trips: one write in flight, the next batch gathering.

Events come in bursts (a packet's opens, credits and its finish), and each append is a write
(one SQLite transaction, or a Redis pipeline). The appends made while a write is in flight (and
those of the loop turn that starts it) go together in the next one, so the store sees one
transaction per round trip however many pushes wait, never a queue of small ones. Appends of
one user keep their order: batches are written one after the other, in arrival order.
"""

from __future__ import annotations

import asyncio

from hongbao.core.push_ports import MessageLog, SharedBody, Stored
from hongbao.server.push_messages import now_ms

Entry = tuple[str, SharedBody, asyncio.Future[Stored]]


class Appender:
    """Batch ``log.append`` calls (group commit): at most one write in flight per worker."""

    __slots__ = ("log", "_batch", "_writer")

    def __init__(self, log: MessageLog) -> None:
        self.log = log
        self._batch: list[Entry] = []
        self._writer: asyncio.Task[None] | None = None

    async def append(self, uid: str, make_body: SharedBody) -> Stored:
        """Append ``make_body(offset, epoch)`` to ``uid``'s stream; raises what the log raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Stored] = loop.create_future()
        self._batch.append((uid, make_body, future))
        if self._writer is None:
            self._writer = loop.create_task(self._write_all())
        return await future

    async def _write_all(self) -> None:
        """Write the gathered batches one after the other until none is left."""
        try:
            while self._batch:
                batch, self._batch = self._batch, []
                await self._append(batch)
        finally:
            self._writer = None

    async def _append(self, batch: list[Entry]) -> None:
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
