"""The ports of the push channel (docs/architecture.md section 7), as small ``typing.Protocol`` classes.

A *node* is one worker process that holds WebSocket connections (with SO_REUSEPORT a client lands
on any worker, so routes name workers); its id is ``{node_name}/{pid}`` and its internal address
(``host:port`` of its loopback listener) is where other nodes forward pushes to it.

Adapters: SQLite (the embedded default; shared by the workers of one host) and Redis (standalone
or Cluster, keys of docs/architecture.md section 7). Every method is idempotent where a retry can happen.
Times (``now_ms``, ages, TTLs) are wall-clock (ms since the epoch, or seconds), never the
service's test clock: liveness and log ages are about real time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import orjson
from hongbao.core.breaker import Breaker
from hongbao.core.ports import Queue


@dataclass(frozen=True, slots=True)
class Route:
    """Where a user's current session lives: ``node`` holds session ``sid``."""

    node: str
    sid: str


@dataclass(frozen=True, slots=True)
class Stored:
    """One message of a user's stream (or of a topic): its ``offset`` (1, 2, ... per user or
    topic), the stream's ``epoch`` (changes when the history was lost), and the encoded text
    frame payload ``body`` (the JSON of docs/architecture.md section 7, offset and epoch included)."""

    offset: int
    epoch: str
    body: bytes


@dataclass(frozen=True, slots=True)
class Replay:
    """What a reconnect with (offset, epoch) gets: ``messages`` after ``offset`` in order, and
    ``complete`` False when the epoch changed or part of the gap is no longer held (the client
    must reload state over HTTP; the messages are what is still held). ``last`` is the stream's
    last offset when it was read (0 for a stream with no message yet): the hub's baseline for
    the messages that follow, so a message that overtakes an earlier one is never taken for a
    duplicate."""

    epoch: str
    messages: list[Stored]
    complete: bool
    last: int


@dataclass(frozen=True, slots=True)
class Gaps:
    """What ``MessageLog.sync`` found since its last call: ``every`` stream may have started a new
    epoch (a node's ``lost()``, or the store's process changed), or those of ``uids`` did (a
    node's ``lost(uids)``). The caller has the sessions concerned look at their streams."""

    every: bool
    uids: tuple[str, ...] = ()


class SessionStore(Protocol):
    """Sessions, routes and the online sets: ``session:{uid}``, ``route:{sid}``, ``online:{n}``."""

    async def login(self, uid: str, sid: str, node: str, now_ms: int) -> Route | None:
        """Record ``uid``'s new session ``sid`` on ``node`` in one round trip (replacing any older
        session, whose Route is returned so its node can close it with 4001), before the first
        frame goes to the client."""
        ...

    async def touch(self, sessions: Sequence[tuple[str, str]], now_ms: int) -> list[tuple[str, str]]:
        """Refresh lastActiveTime and the TTLs of these (uid, sid) pairs in one round trip. Returns
        the pairs whose session is gone (lost by the store, or logged out meanwhile), unwritten."""
        ...

    async def restore(self, sessions: Sequence[tuple[str, str, int]], node: str, now_ms: int) -> None:
        """Write back these (uid, sid, login ms) sessions of ``node`` (live connections whose
        session the store lost) where the user has no session now, or one that logged in before
        (an older session a restore from a dump brought back); one logged in since is left alone."""
        ...

    async def logout(self, uid: str, sid: str, node: str) -> bool:
        """Remove session ``sid`` of ``uid``: ``session:{uid}`` only if it still names ``sid``
        (compare-and-delete), then its route and online entry; True if the session key was removed."""
        ...

    async def lookup(self, uid: str) -> Route | None:
        """The route of ``uid``'s current session, or None when offline (or its node is dead)."""
        ...

    async def lookup_many(self, uids: Sequence[str]) -> dict[str, Route]:
        """``lookup`` of each of ``uids`` in one round trip: the routes of those online."""
        ...

    async def online_count(self) -> int:
        """Users in the online sets."""
        ...


class NodeDirectory(Protocol):
    """Liveness of nodes and their internal addresses."""

    async def heartbeat(self, node: str, address: str, ttl_s: float) -> None:
        """Mark ``node`` alive for ``ttl_s`` seconds, reachable at ``address`` (host:port)."""
        ...

    async def address(self, node: str) -> str | None:
        """The internal address of a live ``node``, or None if its liveness expired."""
        ...

    async def sweep(self, alive_node: str) -> int:
        """Run by every live node: remove the sessions, routes and online entries held by nodes
        whose liveness expired; returns how many sessions were removed."""
        ...

    async def leave(self, node: str) -> None:
        """A node stopping: remove its liveness at once (its sessions are cleaned by the sweep)."""
        ...


def place(head: bytes, offset: int, epoch: str) -> bytes:
    """A message body from its ``head`` (the JSON object of docs/architecture.md section 7 up to, not
    including, its offset and epoch: ``{"type":"event",...``) and its place in a stream: the head
    followed by ``,"offset":N,"epoch":"E"}``."""
    return b'%s,"offset":%d,"epoch":%s}' % (head, offset, orjson.dumps(epoch))


class BodyMaker(Protocol):
    """Builds a message's encoded body once its place is known: ``(offset, epoch) -> bytes``."""

    def __call__(self, offset: int, epoch: str) -> bytes: ...


class SharedBody(BodyMaker, Protocol):
    """A BodyMaker whose body is ``place(head, offset, epoch)``: a log may keep ``head`` once for
    every stream the message goes to (a group push) and rebuild each body with ``place``."""

    head: bytes


class MessageLog(Protocol):
    """Per-user message streams (the offline queue), bounded in length and age (the adapter's
    limits: messages beyond the newest N, or older than the age limit, are dropped).

    Each stream has an epoch, a random string made when the stream is created, and offsets 1, 2,
    ... in it; a stream whose history was lost starts again under a new epoch."""

    async def append(self, entries: Sequence[tuple[str, SharedBody]], now_ms: int) -> list[Stored]:
        """Append one message ``make_body(offset, epoch)`` to each (uid, make_body)'s stream, in one
        round trip; the Stored messages come back in the order of ``entries`` (a uid may repeat:
        its messages take consecutive offsets in that order)."""
        ...

    async def ack(self, acks: Sequence[tuple[str, int, str]]) -> None:
        """For each (uid, offset, epoch): the client holds everything up to ``offset`` of epoch
        ``epoch``, so those messages may be dropped; one round trip. An offset past the stream's
        last one counts as its last; an ack of another epoch than the stream's (renewed since)
        is ignored: its offsets name messages of another stream."""
        ...

    async def replay(self, uid: str, after: int | None, epoch: str | None, now_ms: int) -> Replay:
        """Messages of ``uid``'s stream after offset ``after`` (None: every message held), in
        offset order. ``complete`` is False when ``epoch`` is given and is not the stream's, when
        ``after`` is past the stream's last offset, or when a message after ``after`` (None: after
        the last acked offset) is no longer held. A stream that does not exist yet is created
        (new epoch) so the answer always names the epoch."""
        ...

    async def lost(self, uids: Sequence[str] | None = None) -> None:
        """Messages this node meant for the streams of ``uids`` were not written (their append
        failed): those streams start a new epoch now, so each client is told (``reset``) instead
        of missing them silently, and every node's next ``sync`` names them. ``None``: streams
        this node cannot name (it started while the store was unreachable, or replaces a worker
        that died with appends in flight): every stream, on every node, starts a new epoch at its
        next append or replay."""
        ...

    async def sync(self) -> Gaps:
        """Pick up the ``lost`` of every node (a node calls it about once a second): which streams
        started new epochs since the last call (``Gaps.every`` also when the store's process
        restarted); the first call names none."""
        ...


class TopicLog(Protocol):
    """Broadcasts: one log that every node reads once, each with its own cursor."""

    async def publish(self, topic: str, make_body: BodyMaker) -> Stored:
        """Append the message ``make_body(offset, epoch)`` to ``topic`` (per-topic offsets and epoch)."""
        ...

    async def read(self, cursor: str | None, timeout_s: float) -> tuple[str, list[tuple[str, Stored]]]:
        """(new cursor, [(topic, message)]) published after ``cursor`` (None: from now on),
        waiting at most ``timeout_s`` when there is nothing yet."""
        ...


#: How long a readiness check waits for the push store to answer (seconds).
READY_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class PushStores:
    """The four push ports one hub runs on and the group-push ``queue``; ``breaker``: the circuit
    breaker they go through (None when the push state is local: the embedded file); ``ping``: the
    store's liveness probe (Redis PING; None when local); ``closers``: what closing them closes
    (their own connections; a client shared with the money backend is the backend's to close)."""

    sessions: SessionStore
    nodes: NodeDirectory
    log: MessageLog
    topics: TopicLog
    queue: Queue
    breaker: Breaker | None = None
    ping: Callable[[], Awaitable[object]] | None = None
    closers: tuple[Callable[[], Awaitable[None]], ...] = ()

    async def aclose(self) -> None:
        """Close what is theirs alone."""
        for close in self.closers:
            await close()

    def down(self) -> bool:
        """True while the push store is considered down (its breaker is open): new logins are
        refused before the upgrade. Never True when local."""
        return self.breaker is not None and self.breaker.is_open

    async def check(self) -> None:
        """Raise when the push store cannot be reached: ``ping`` must answer within
        READY_TIMEOUT_S, through the breaker (BreakerOpen at once while it is open, a trial call
        once per cooldown); a local store is open."""
        if self.ping is not None and self.breaker is not None:
            await asyncio.wait_for(self.breaker.call(self.ping), READY_TIMEOUT_S)
