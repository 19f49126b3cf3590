"""The ports on Redis behind the circuit breaker of their Redis: the push ports (docs/architecture.md sections 7
and 10) and the queue (``GuardedQueue``: queue down at open, the receipt is still committed and the
reconciler credits later), so a dead Redis costs a push, a login or an open's follow-ups
microseconds, not redis-py's connection retries (~0.3-1 s a call), and logs one line per outage
(the breaker's), not one per call.

The breaker is the one of the worker's Redis: with the production backend, the money side's
(``Backend.breaker``; push also shares its Redis commands, ``Backend.redis``, so one
outage opens one breaker whichever side meets it first); with the embedded
backend, one of the push stores' own (name ``redis`` as well: counter ``redis_breaker_opens``).

While it is open:

- calls on a request's path (``login``, lookups, ``address``, ``append``, ``replay``,
  ``publish``) raise :class:`~hongbao.core.breaker.BreakerOpen` at once and are never the
  breaker's trial call, so no push or login waits out a dead Redis; a refused ``append`` counts
  its messages as ``redis_fallback_push`` (the push answers 503 or, for a service event, counts
  in ``push_failures``): nothing is queued for them. A message is not sent to a socket without
  its place in the user's log either (offsets and epochs come from the log; a message sent
  without one would break the client's dedupe and resume), so "delivered if possible" is not
  possible while the log is down;
- background calls (heartbeat, sweep, leave, ``touch``, ``ack``, ``logout``, ``read``,
  ``online_count``) go through ``Breaker.call``: skipped at once, except one trial per cooldown
  (the node's heartbeat, every second, is the usual one), whose success closes the breaker.

The hub counts the background failures: ``push_store_failures`` in a row drop its connections
(three by default), and new logins are refused before the upgrade while the breaker is
open (server/ws_handshake.py: 503 with Retry-After).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from hongbao.core.breaker import Breaker, BreakerOpen, tally
from hongbao.core.ports import Queue
from hongbao.core.push_ports import (
    BodyMaker,
    Gaps,
    MessageLog,
    NodeDirectory,
    Replay,
    Route,
    SessionStore,
    SharedBody,
    Stored,
    TopicLog,
)

COUNTER = "redis_fallback_push"
T = TypeVar("T")


class _Guarded:
    __slots__ = ("_breaker",)

    def __init__(self, breaker: Breaker) -> None:
        self._breaker = breaker

    async def _now(self, op: Callable[[], Awaitable[T]]) -> T:
        """``op`` through the breaker, refused at once while it is open (never the trial call)."""
        if self._breaker.is_open:
            raise BreakerOpen(f"{self._breaker.name} is down (breaker open)")
        return await self._breaker.call(op)


class GuardedSessionStore(_Guarded):
    """``store`` behind ``breaker`` (see the module docstring); each call raises BreakerOpen while
    Redis is down, else what ``store`` raises."""

    __slots__ = ("_store",)

    def __init__(self, store: SessionStore, breaker: Breaker) -> None:
        super().__init__(breaker)
        self._store = store

    async def login(self, uid: str, sid: str, node: str, now_ms: int) -> Route | None:
        """SessionStore.login, refused at once while Redis is down."""
        return await self._now(lambda: self._store.login(uid, sid, node, now_ms))

    async def touch(self, sessions: Sequence[tuple[str, str]], now_ms: int) -> list[tuple[str, str]]:
        """SessionStore.touch (background: may be the trial call)."""
        return await self._breaker.call(lambda: self._store.touch(sessions, now_ms))

    async def restore(self, sessions: Sequence[tuple[str, str, int]], node: str, now_ms: int) -> None:
        """SessionStore.restore (background: may be the trial call)."""
        await self._breaker.call(lambda: self._store.restore(sessions, node, now_ms))

    async def logout(self, uid: str, sid: str, node: str) -> bool:
        """SessionStore.logout (background: may be the trial call)."""
        return await self._breaker.call(lambda: self._store.logout(uid, sid, node))

    async def lookup(self, uid: str) -> Route | None:
        """SessionStore.lookup, refused at once while Redis is down."""
        return await self._now(lambda: self._store.lookup(uid))

    async def lookup_many(self, uids: Sequence[str]) -> dict[str, Route]:
        """SessionStore.lookup_many, refused at once while Redis is down."""
        return await self._now(lambda: self._store.lookup_many(uids))

    async def online_count(self) -> int:
        """SessionStore.online_count (background: may be the trial call)."""
        return await self._breaker.call(self._store.online_count)


class GuardedNodeDirectory(_Guarded):
    """``nodes`` behind ``breaker``: the heartbeat and the sweep are the usual trial calls."""

    __slots__ = ("_nodes",)

    def __init__(self, nodes: NodeDirectory, breaker: Breaker) -> None:
        super().__init__(breaker)
        self._nodes = nodes

    async def heartbeat(self, node: str, address: str, ttl_s: float) -> None:
        """NodeDirectory.heartbeat (the breaker's probe, once a second)."""
        await self._breaker.call(lambda: self._nodes.heartbeat(node, address, ttl_s))

    async def address(self, node: str) -> str | None:
        """NodeDirectory.address, refused at once while Redis is down."""
        return await self._now(lambda: self._nodes.address(node))

    async def sweep(self, alive_node: str) -> int:
        """NodeDirectory.sweep (background)."""
        return await self._breaker.call(lambda: self._nodes.sweep(alive_node))

    async def leave(self, node: str) -> None:
        """NodeDirectory.leave (background)."""
        await self._breaker.call(lambda: self._nodes.leave(node))


class GuardedMessageLog(_Guarded):
    """``log`` behind ``breaker``; refused appends count their messages in ``counts[COUNTER]``."""

    __slots__ = ("_log", "_counts")

    def __init__(self, log: MessageLog, breaker: Breaker, counts: dict[str, int]) -> None:
        super().__init__(breaker)
        self._log, self._counts = log, counts

    async def append(self, entries: Sequence[tuple[str, SharedBody]], now_ms: int) -> list[Stored]:
        """MessageLog.append, refused at once while Redis is down (nothing appended, counted)."""
        try:
            return await self._now(lambda: self._log.append(entries, now_ms))
        except BreakerOpen:
            tally(self._counts, COUNTER, len(entries))
            raise

    async def ack(self, acks: Sequence[tuple[str, int, str]]) -> None:
        """MessageLog.ack (background: may be the trial call)."""
        await self._breaker.call(lambda: self._log.ack(acks))

    async def replay(self, uid: str, after: int | None, epoch: str | None, now_ms: int) -> Replay:
        """MessageLog.replay, refused at once while Redis is down."""
        return await self._now(lambda: self._log.replay(uid, after, epoch, now_ms))

    async def lost(self, uids: Sequence[str] | None = None) -> None:
        """MessageLog.lost (background: may be the trial call)."""
        await self._breaker.call(lambda: self._log.lost(uids))

    async def sync(self) -> Gaps:
        """MessageLog.sync (background: may be the trial call)."""
        return await self._breaker.call(self._log.sync)


class GuardedTopicLog(_Guarded):
    """``topics`` behind ``breaker``."""

    __slots__ = ("_topics",)

    def __init__(self, topics: TopicLog, breaker: Breaker) -> None:
        super().__init__(breaker)
        self._topics = topics

    async def publish(self, topic: str, make_body: BodyMaker) -> Stored:
        """TopicLog.publish, refused at once while Redis is down."""
        return await self._now(lambda: self._topics.publish(topic, make_body))

    async def read(self, cursor: str | None, timeout_s: float) -> tuple[str, list[tuple[str, Stored]]]:
        """TopicLog.read (background: may be the trial call)."""
        return await self._breaker.call(lambda: self._topics.read(cursor, timeout_s))


QUEUE_COUNTER = "redis_fallback_queue"  # messages a publish could not write while Redis was down


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
            tally(self._counts, QUEUE_COUNTER, len(messages))
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
