"""The Queue port behind a circuit breaker (DESIGN.md section 10, "queue down at open: receipt
still committed; reconciler credits later"): while the queue's Redis is down, every call raises
:class:`~hongbao.core.breaker.BreakerOpen` at once instead of waiting out redis-py's connection
retries, so an open whose follow-ups cannot be queued costs microseconds more, not a second.

The breaker is the one of the queue's Redis client (shared with the send path and grab, so one
outage opens one breaker). Messages a publish could not write are counted in ``counts`` as
``redis_fallback_queue`` (the worker's metrics events): their credits fall to the reconciler,
which credits receipts still pending from the database.
"""

from __future__ import annotations

from collections.abc import Sequence

from hongbao.core.breaker import Breaker, BreakerOpen, tally
from hongbao.core.ports import Queue

COUNTER = "redis_fallback_queue"


class GuardedQueue:
    """``queue`` with every call through ``breaker``; each call raises BreakerOpen while the
    dependency is down (or when its down error opened the breaker), else what ``queue`` raises."""

    __slots__ = ("_queue", "_breaker", "_counts")

    def __init__(self, queue: Queue, breaker: Breaker, counts: dict[str, int]) -> None:
        self._queue, self._breaker, self._counts = queue, breaker, counts

    async def publish(self, messages: Sequence[tuple[str, bytes]]) -> None:
        """Append each (stream, body), all or none; the skipped messages are counted."""
        try:
            await self._breaker.call(lambda: self._queue.publish(messages))
        except BreakerOpen:
            tally(self._counts, COUNTER, len(messages))
            raise

    async def claim(self, stream: str, count: int, lease_ms: int, now_ms: int) -> list[tuple[int, bytes]]:
        """Up to ``count`` (id, body) of ``stream``, leased for ``lease_ms`` (see the Queue port)."""
        return await self._breaker.call(lambda: self._queue.claim(stream, count, lease_ms, now_ms))

    async def ack(self, stream: str, *message_ids: int) -> None:
        """Remove handled messages (idempotent)."""
        await self._breaker.call(lambda: self._queue.ack(stream, *message_ids))

    async def depth(self, stream: str) -> int:
        """Messages in ``stream`` not acked yet."""
        return await self._breaker.call(lambda: self._queue.depth(stream))
