"""Group pushes through the reliable queue, and broadcasts through the topic log (docs/architecture.md section 7).

Group: ``queue_group`` (``push_to_group`` after checking the group exists, for the admin push)
puts one message on the ``push_group`` stream of the Queue port; every
worker consumes the stream (a claim leases messages, so each is handled by one worker, and one
that dies mid-way is taken over after the lease). A claimed batch is expanded to the groups'
members, appended to every member's log in one round trip, acked, then sent in the background
(the next batch is claimed meanwhile): to the sockets here and, batched per node, to the other
nodes.

Broadcast: ``broadcast`` appends to the topic log; each worker reads the log once (its own cursor)
and sends each broadcast to its local subscribers as one frame encoded once for all of them; the
broadcasts of one read go to a subscriber in one write (``send_broadcasts``).

A long fan-out gives way to the publishes of its own worker. Each step of a publish (the
request read, the store's answer handed back by its write thread or socket, the handler resumed,
the answer written) waits for a turn of the event loop, and a fan-out that only yields
(``sleep(0)``) between chunks of subscribers runs a whole chunk in every turn: a publish was
answered 3-4 chunks after it arrived (20-50 ms with 5000 subscribers on a loaded 2-core
machine), so a publisher waiting for each answer got few broadcasts into a pass, and few joined
per write. So at each turn the fan-out waits, with the loop free, for the publishes begun since
its last turn (each once, at most ``GIVE_WAY_S``): a publish is answered within about a chunk.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from hongbao.core import errors
from hongbao.core.breaker import BreakerOpen
from hongbao.core.messages import GROUP_STREAM, GroupPush
from hongbao.core.ports import Queue
from hongbao.core.push_ports import SharedBody, Stored, TopicLog
from hongbao.core.services.groups import Groups
from hongbao.server.push_messages import EventBody, now_ms
from hongbao_native import OP_TEXT, encode_frame

if TYPE_CHECKING:
    from hongbao.server.push_hub import PushHub

log = logging.getLogger("hongbao.push.fanout")
GROUP_BATCH = 50  # group messages claimed at once
GROUP_LEASE_MS = 5_000  # a batch takes milliseconds; a dead worker's batch comes back this soon (at least once)
GROUP_POLL_S = 0.05  # how often a worker looks for group messages published by other workers
BROADCAST_WAIT_S = 1.0
BROADCAST_CHUNK = 200  # subscribers written to between two turns of the event loop (~2 ms here)
GIVE_WAY_S = 0.05  # longest a fan-out pauses for one turn's publishes of this worker (a slow store)
JOIN_MAX_BYTES = 16 * 1024  # broadcasts joined into one write: at most this many bytes (a larger one alone)


def joined(frames: list[bytes]) -> list[bytes]:
    """``frames`` (whole encoded frames) joined in order into writes of at most ``JOIN_MAX_BYTES``
    (a larger frame is a write alone), so that a burst of broadcasts meets the output cap as the
    frames would one by one."""
    pieces: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for frame in frames:
        if current and size + len(frame) > JOIN_MAX_BYTES:
            pieces.append(b"".join(current))
            current, size = [], 0
        current.append(frame)
        size += len(frame)
    if current:
        pieces.append(b"".join(current))
    return pieces


class Fanout:
    """Group pushes (``queue``, members from ``groups``) and broadcasts (``topics``) for ``hub``."""

    __slots__ = ("hub", "queue", "groups", "topics", "_wake", "_cursor", "_publishing")

    def __init__(self, hub: PushHub, queue: Queue, groups: Groups, topics: TopicLog) -> None:
        self.hub, self.queue, self.groups, self.topics = hub, queue, groups, topics
        self._wake: asyncio.Event | None = None
        self._cursor: str | None = None
        self._publishing: set[asyncio.Future[None]] = set()  # publishes not yet waited for (``_give_way``)

    async def start(self) -> None:
        """Take the topic log's cursor now: broadcasts published from here on reach this node
        (with the log unreachable, from the log's end once it is back)."""
        self._wake = asyncio.Event()
        try:
            self._cursor, _ = await self.topics.read(None, 0)
        except Exception as exc:
            if not isinstance(exc, BreakerOpen):
                log.warning("the broadcast log is unreachable at start (%s): reading it once it is back", exc)

    async def push_to_group(self, group_id: str, event: str, data: Any) -> None:
        """Queue ``event`` for every member of ``group_id``. Raises NotFound for an unknown group."""
        if not await self.groups.exists(group_id):
            raise errors.NotFound(f"no group {group_id}")
        await self.queue_group(group_id, event, data)

    async def queue_group(self, group_id: str, event: str, data: Any) -> None:
        """Queue ``event`` for every member of ``group_id``, a group known to exist (a service
        event about one of its packets): no read of the groups, so a busy database neither delays
        nor loses it (the drain reads the members, and retries through the queue's lease)."""
        await self.queue.publish([(GROUP_STREAM, GroupPush(group_id, event, data, now_ms()).encode())])
        if self._wake is not None:
            self._wake.set()

    async def drain_groups(self, *, waiting: bool = False) -> int:
        """Handle one claimed batch of group messages: expand, log, ack, then send in the
        background (``PushHub.send_later``), so the next claim does not wait for the forwards to
        other nodes. Returns how many messages there were. Unless ``waiting`` (this worker just
        published one), the queue's depth is read first: a cheap read spares an idle poll the
        claim, which is a write."""
        if not waiting and await self.queue.depth(GROUP_STREAM) == 0:
            return 0
        claimed = await self.queue.claim(GROUP_STREAM, GROUP_BATCH, GROUP_LEASE_MS, now_ms())
        entries: list[tuple[str, SharedBody]] = []
        pushed_at: list[float | None] = []  # each entry's push, seconds since the epoch (None: unknown)
        for _, body in claimed:
            message = GroupPush.decode(body)
            make_body = EventBody(message.event, message.data)
            members = await self.groups.members(message.group_id)
            entries.extend((uid, make_body) for uid in members)
            pushed_at.extend([message.pushed_at_ms / 1000 if message.pushed_at_ms else None] * len(members))
        stored: list[Stored] = await self.hub.stores.log.append(entries, now_ms()) if entries else []
        # in every member's log now: the queue's job is done
        await self.queue.ack(GROUP_STREAM, *(message_id for message_id, _ in claimed))
        items = [(uid, message) for (uid, _), message in zip(entries, stored, strict=True)]
        self.hub.send_later(items, pushed_at)
        return len(claimed)

    async def groups_forever(self) -> None:
        """Consume the group stream until cancelled: at once when this worker published, else
        every ``GROUP_POLL_S``."""
        assert self._wake is not None, "start() first"
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), GROUP_POLL_S)
            except TimeoutError:
                pass
            waiting = self._wake.is_set()
            self._wake.clear()
            try:
                while await self.drain_groups(waiting=waiting):
                    waiting = False
            except Exception as exc:  # the claimed messages come back after their lease
                if not isinstance(exc, BreakerOpen):  # Redis down: its breaker logged that once
                    log.warning("group push failed; retried after the lease: %s", exc)

    async def broadcast(self, topic: str, event: str, data: Any) -> Stored:
        """Publish ``event`` to ``topic``'s subscribers on every node; the topic's Stored message.
        A fan-out running here pauses for it at its next turn (``_give_way``)."""
        stored: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._publishing.add(stored)
        try:
            return await self.topics.publish(topic, EventBody(event, data, topic))
        finally:
            self._publishing.discard(stored)
            stored.set_result(None)

    async def _give_way(self) -> None:
        """Wait, at most ``GIVE_WAY_S``, for the publishes in flight that no earlier call waited
        for (each is waited for once: a stream of publishes cannot stall the fan-out)."""
        if self._publishing:
            waiting, self._publishing = self._publishing, set()
            await asyncio.wait(waiting, timeout=GIVE_WAY_S)

    async def broadcasts_forever(self) -> None:
        """Read the topic log (once this worker's publishes in flight are stored, so that they
        join the read) and send each batch of broadcasts to the subscribers here (``send_broadcasts``)."""
        while True:
            await self._give_way()
            try:
                self._cursor, items = await self.topics.read(self._cursor, BROADCAST_WAIT_S)
            except Exception as exc:
                if not isinstance(exc, BreakerOpen):
                    log.warning("reading broadcasts failed: %s", exc)
                await asyncio.sleep(BROADCAST_WAIT_S)
                continue
            if items:
                await self.send_broadcasts(items)

    async def send_broadcasts(self, items: list[tuple[str, Stored]]) -> None:
        """Send ``items`` (topic, message; one read of the topic log) to the subscribers here.

        Each message is encoded once; a topic's messages are joined, in order (offsets are per topic:
        the order between topics is not kept, docs/architecture.md section 7), into one write per
        subscriber (one send(2), one TCP segment and one wake-up of the client instead of one per
        message: on loopback the kernel's share of a write is most of the cost), or several of at
        most ``JOIN_MAX_BYTES`` (``joined``). After every
        ``BROADCAST_CHUNK`` subscribers the event loop gets a turn, so a long fan-out does not stall
        requests, and then waits for the publishes begun in that turn (``_give_way``), so they are
        answered at once and go out joined in the next batch. A subscriber
        that unsubscribed or closed during a turn gets nothing more; the cap (1013) applies to each
        write as to one frame (``WsConnection.send_frame``)."""
        frames: dict[str, list[bytes]] = {}
        for topic, message in items:
            frames.setdefault(topic, []).append(encode_frame(OP_TEXT, message.body))
        for topic, encoded in frames.items():
            conns = list(self.hub.topics.get(topic, ()))
            pieces, sent = joined(encoded), 0
            for start in range(0, len(conns), BROADCAST_CHUNK):
                if start:
                    await asyncio.sleep(0)
                    await self._give_way()
                for conn in conns[start : start + BROADCAST_CHUNK]:
                    if topic in conn.subscriptions:
                        for piece in pieces:
                            if not conn.send_frame(piece):
                                break
                        else:
                            sent += 1
            self.hub.metrics.events["push_broadcast_sends"] += sent * len(encoded)
