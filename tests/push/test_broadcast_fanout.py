"""The broadcast fan-out (server/push_fanout.py ``send_broadcasts``): the broadcasts of one read
of the topic log reach each subscriber in one write per topic, in order, and a long fan-out
gives the event loop turns. In process over the real embedded push stores, and end to end on a
real server with ``websockets`` clients (docs/architecture.md section 7)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import orjson
import pytest
from hongbao.core.adapters.sqlite.db import SqliteDb
from hongbao.core.adapters.sqlite.state import SqliteGroupStore
from hongbao.core.clock import SystemClock
from hongbao.core.rules import Limits
from hongbao.core.services.groups import Groups
from hongbao.server.composition import push_stores
from hongbao.server.config import Settings
from hongbao.server.metrics import WorkerMetrics
from hongbao.server.push_fanout import BROADCAST_CHUNK, JOIN_MAX_BYTES, joined
from hongbao.server.push_hub import PushHub
from hongbao_native import OP_TEXT, FrameDecoder, encode_frame
from hypothesis import given
from hypothesis import strategies as st

from tests.push.conftest import Nodes, admin, connect, eventually, metric, push
from tests.server.conftest import Server


class Socket:
    """The hub's side of one subscriber (the ``Conn`` of server/push_hub.py): every broadcast
    write, decoded into its messages; ``closed`` makes ``send_frame`` answer False, as a closing
    connection does."""

    def __init__(self, uid: str) -> None:
        self.uid, self.sid = uid, secrets.token_urlsafe(8)
        self.subscriptions: set[str] = set()
        self.writes: list[list[dict[str, Any]]] = []
        self.closed = False

    def output_bytes(self) -> int:
        """Bytes waiting to be written: none, the client reads at once."""
        return 0

    def send_text(self, body: bytes) -> bool:
        """Replies to subscribe messages: not kept."""
        return not self.closed

    def send_frame(self, frame: bytes) -> bool:
        """Keep one write's frames (unmasked text frames, RFC 6455 section 5.2) as JSON messages."""
        if self.closed:
            return False
        frames = FrameDecoder(1 << 20, 1 << 20, require_mask=False).feed(frame)
        assert all(f.opcode == OP_TEXT for f in frames)
        self.writes.append([orjson.loads(f.payload) for f in frames])
        return True

    def close(self, code: int, reason: str = "") -> None:
        """Not expected here."""
        raise AssertionError(f"closed with {code}")

    def topics(self) -> list[list[tuple[str, int]]]:
        """(topic, offset) of each message, per write."""
        return [[(m["topic"], m["offset"]) for m in write] for write in self.writes]


@pytest.fixture
def hub(tmp_path: Path, loop_cleanups: list[Callable[[], Awaitable[None]]]) -> Iterator[PushHub]:
    """A hub (not started: no listener) on the embedded stores of a fresh data directory."""
    settings = Settings(data_dir=tmp_path, internal_secret="test")
    money = SqliteDb(tmp_path / "hongbao.db")
    stores = push_stores(settings, {})
    groups = Groups(SqliteGroupStore(money), Limits(), SystemClock())
    made = PushHub(settings, stores, WorkerMetrics(tmp_path / "metrics"), stores.queue, groups)
    loop_cleanups.extend((stores.aclose, made.stop))  # last first: the hub stops, then its stores close
    yield made
    money.close()


def subscribed(hub: PushHub, uid: str, *topics: str) -> Socket:
    """A subscriber of ``topics``, subscribed through the client message."""
    conn = Socket(uid)
    for topic in topics:
        hub.on_message(conn, {"type": "subscribe", "topic": topic})
    return conn


async def publish_and_send(
    hub: PushHub, published: list[tuple[str, Any]], during: Awaitable[None] | None = None
) -> None:
    """Publish (topic, data) in order, read them in one read of the topic log, send them (with
    ``during`` running as a concurrent task)."""
    await hub.fanout.start()
    cursor, _ = await hub.stores.topics.read(None, 0)
    for topic, data in published:
        await hub.broadcast(topic, "news", data)
    _, items = await hub.stores.topics.read(cursor, 0)
    assert len(items) == len(published)
    task = asyncio.ensure_future(during) if during is not None else None
    await hub.fanout.send_broadcasts(items)
    if task is not None:
        await task


async def test_one_read_reaches_a_subscriber_in_one_write_per_topic(hub: PushHub) -> None:
    """Broadcasts of two topics read together: each subscriber gets one write per topic with that
    topic's messages in order."""
    only_a, both, only_b = subscribed(hub, "a", "A"), subscribed(hub, "ab", "A", "B"), subscribed(hub, "b", "B")
    sends = hub.metrics.events["push_broadcast_sends"]
    await publish_and_send(hub, [("A", 1), ("B", 2), ("A", 3), ("A", 4), ("B", 5)])
    a_write, b_write = [("A", 1), ("A", 2), ("A", 3)], [("B", 1), ("B", 2)]
    assert only_a.topics() == [a_write] and only_b.topics() == [b_write]
    assert both.topics() == [a_write, b_write]
    assert [m["data"] for m in both.writes[0]] == [1, 3, 4] and [m["data"] for m in both.writes[1]] == [2, 5]
    assert hub.metrics.events["push_broadcast_sends"] - sends == 10  # messages, not writes


async def test_a_long_fanout_gives_the_loop_turns(hub: PushHub) -> None:
    """Past BROADCAST_CHUNK subscribers the loop gets a turn; one who unsubscribes or closes then gets nothing."""
    conns = [subscribed(hub, f"u{i}", "T") for i in range(2 * BROADCAST_CHUNK + 10)]
    seen: list[int] = []

    async def meanwhile() -> None:
        seen.append(sum(len(c.writes) for c in conns))
        for conn in conns:
            if not conn.writes:
                hub.on_message(conn, {"type": "unsubscribe", "topic": "T"})
                break
        for conn in reversed(conns):
            if not conn.writes:
                conn.closed = True
                break

    sends = hub.metrics.events["push_broadcast_sends"]
    await publish_and_send(hub, [("T", 1), ("T", 2)], meanwhile())
    assert seen == [BROADCAST_CHUNK]  # it ran after the first chunk, before the rest
    written = [c for c in conns if c.writes]
    assert len(written) == len(conns) - 2
    assert all(c.topics() == [[("T", 1), ("T", 2)]] for c in written)
    assert hub.metrics.events["push_broadcast_sends"] - sends == 2 * len(written)


async def test_large_broadcasts_are_joined_up_to_the_write_size(hub: PushHub) -> None:
    """Broadcasts of 6 KiB read together go out in writes of at most JOIN_MAX_BYTES, in order."""
    conn = subscribed(hub, "big", "L")
    await publish_and_send(hub, [("L", "x" * 6 * 1024) for _ in range(5)])
    assert conn.topics() == [[("L", 1), ("L", 2)], [("L", 3), ("L", 4)], [("L", 5)]]


@given(st.lists(st.integers(0, 2 * JOIN_MAX_BYTES), max_size=40))
def test_joined_keeps_the_bytes_in_order_within_the_write_size(sizes: list[int]) -> None:
    """joined(frames): the same bytes in the same order; a piece is at most JOIN_MAX_BYTES or one
    larger frame; two neighbouring pieces would not fit in one."""
    frames = [encode_frame(OP_TEXT, bytes([65 + i % 26]) * size) for i, size in enumerate(sizes)]
    pieces = joined(frames)
    assert b"".join(pieces) == b"".join(frames)
    bounds = iter(frames)
    for piece in pieces:  # each piece is a run of whole frames
        run = next(bounds)
        while len(run) < len(piece):
            run += next(bounds)
        assert run == piece and (len(piece) <= JOIN_MAX_BYTES or piece in frames)
    assert all(len(a) + len(b) > JOIN_MAX_BYTES for a, b in pairwise(pieces))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A 1-worker server for the end-to-end burst."""
    started = Nodes(tmp_path_factory.mktemp("broadcast"))
    yield started.start()
    started.finish()


def test_a_burst_of_broadcasts_arrives_whole_and_in_order(server: Server) -> None:
    """Broadcasts published concurrently (so reads carry several) reach every subscriber once, in
    offset order, per topic."""

    async def scenario() -> None:
        subscribers = [await connect(server, f"burst{i}") for i in range(6)]
        for i, ws in enumerate(subscribers):
            topic = ("red", "blue")[i % 2]
            await ws.send({"type": "subscribe", "topic": topic})
            assert await ws.receive(1) == [{"type": "subscribed", "topic": topic}]
        sends = metric(server, "push_broadcast_sends")
        async with admin(server) as client:
            answers = await asyncio.gather(
                *(push(client, topic=("red", "blue")[i % 2], event="burst", data=i) for i in range(40))
            )
        for i, ws in enumerate(subscribers):
            topic = ("red", "blue")[i % 2]
            got = await ws.receive(20)
            assert [m["offset"] for m in got] == list(range(1, 21))
            expected = {a["offset"]: n for n, a in enumerate(answers) if n % 2 == i % 2}
            assert all(m["topic"] == topic and m["data"] == expected[m["offset"]] for m in got)
            assert await ws.silent(0.2)
        await eventually(lambda: metric(server, "push_broadcast_sends") - sends == 6 * 20)
        for ws in subscribers:
            await ws.close()

    asyncio.run(scenario())
