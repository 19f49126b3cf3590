"""Appends to the users' logs share round trips: one write in flight, the next batch gathering.

Events come in bursts (a packet's opens, credits and its finish), and each append is a write
(one SQLite transaction, or a Redis pipeline). The appends made while a write is in flight (and
those of the loop turn that starts it) go together in the next one, so the store sees one
transaction per round trip however many pushes wait, never a queue of small ones. Appends of
one user keep their order: batches are written one after the other, in arrival order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from hongbao.core.push_ports import MessageLog, SharedBody, Stored
from hongbao.server.push_messages import now_ms

Entry = tuple[str, SharedBody, asyncio.Future[Stored] | None, float]  # no future: posted (at time.time())
#: (the posted messages logged, in order; the time.time() of each one's post, seconds)
Logged = Callable[[list[tuple[str, Stored]], list[float]], None]
Failed = Callable[[list[str], Exception], None]  # (the uids of the posted messages not logged, why)


class Appender:
    """Batch ``log.append`` calls (group commit): at most one write in flight per worker."""

    __slots__ = ("log", "on_logged", "on_failed", "_batch", "_writer")

    def __init__(self, log: MessageLog, on_logged: Logged | None = None, on_failed: Failed | None = None) -> None:
        self.log, self.on_logged, self.on_failed = log, on_logged, on_failed
        self._batch: list[Entry] = []
        self._writer: asyncio.Task[None] | None = None

    async def append(self, uid: str, make_body: SharedBody) -> Stored:
        """Append ``make_body(offset, epoch)`` to ``uid``'s stream; raises what the log raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Stored] = loop.create_future()
        self._batch.append((uid, make_body, future, 0.0))
        if self._writer is None:
            self._writer = loop.create_task(self._write_all())
        return await future

    def post(self, uid: str, make_body: SharedBody) -> None:
        """Append ``make_body(offset, epoch)`` to ``uid``'s stream in the next write and return at
        once: the logged message goes to ``on_logged`` (with the time of this post), a failure to
        ``on_failed`` (never raised)."""
        self._batch.append((uid, make_body, None, time.time()))
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write_all())

    async def drained(self) -> None:
        """Wait until every append made so far is written (or has failed)."""
        while self._writer is not None:
            await asyncio.wait([self._writer])

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
            stored = await self.log.append([(uid, make_body) for uid, make_body, _, _ in batch], now_ms())
        except Exception as exc:
            posted: list[str] = []
            for uid, _, future, _ in batch:
                if future is None:
                    posted.append(uid)
                elif not future.done():
                    future.set_exception(exc)
            if posted and self.on_failed is not None:
                self.on_failed(posted, exc)
            return
        logged: list[tuple[str, Stored]] = []
        posted_at: list[float] = []
        for (uid, _, future, at), message in zip(batch, stored, strict=True):
            if future is None:
                logged.append((uid, message))
                posted_at.append(at)
            elif not future.done():
                future.set_result(message)
        if logged and self.on_logged is not None:
            self.on_logged(logged, posted_at)
