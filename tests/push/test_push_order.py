"""Ordered delivery inside one hub, in process over the real embedded push stores (a second
connection to the push file plays the other worker): a message that overtakes an earlier one
of the same stream never makes the earlier one look delivered, and acks reach the log on close."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from hongbao.core.adapters.sqlite.db import SqliteDb
from hongbao.core.adapters.sqlite.push import SqliteMessageLog
from hongbao.core.adapters.sqlite.push_db import open_push_db
from hongbao.core.adapters.sqlite.state import SqliteGroupStore
from hongbao.core.push_ports import Stored
from hongbao.server.composition import push_stores
from hongbao.server.config import Settings
from hongbao.server.metrics import WorkerMetrics
from hongbao.server.push_hub import PushHub
from hongbao.server.push_messages import EventBody, now_ms

from tests.push.conftest import eventually


class Socket:
    """The hub's side of one WebSocket connection (the ``Conn`` of server/push_hub.py), keeping
    every message the hub sent it, decoded."""

    def __init__(self, uid: str) -> None:
        self.uid, self.sid = uid, secrets.token_urlsafe(8)
        self.subscriptions: set[str] = set()
        self.sent: list[dict[str, Any]] = []
        self.closed: int | None = None

    def output_bytes(self) -> int:
        """Bytes waiting to be written: none, the client reads at once."""
        return 0

    def send_text(self, body: bytes) -> bool:
        """Keep one text message; False once closed, as the real connection answers."""
        self.sent.append(orjson.loads(body))
        return self.closed is None

    def send_frame(self, frame: bytes) -> bool:
        """Broadcast frames: not expected here."""
        raise AssertionError("no broadcast in these tests")

    def close(self, code: int, reason: str = "") -> None:
        """Remember the close code."""
        self.closed = code

    def events(self) -> list[tuple[int, str]]:
        """(offset, event) of each event message sent, in order."""
        return [(m["offset"], m["event"]) for m in self.sent if m["type"] == "event"]


@dataclass
class Worker:
    """This worker's hub, and the user logs as another worker of the host writes them."""

    hub: PushHub
    other: SqliteMessageLog

    async def append_elsewhere(self, uid: str, event: str) -> Stored:
        """``event`` appended to ``uid``'s log by the other worker, whose forward is still on its way."""
        [message] = await self.other.append([(uid, EventBody(event, {}))], now_ms())
        return message

    async def held(self, uid: str) -> list[int]:
        """The offsets the log still holds for ``uid`` (those not acked)."""
        return [m.offset for m in (await self.other.replay(uid, None, None, now_ms())).messages]


@pytest.fixture
def worker(tmp_path: Path, loop_cleanups: list[Callable[[], Awaitable[None]]]) -> Iterator[Worker]:
    """A hub on the embedded stores of a fresh data directory (stopped after the test, on its
    loop), and the user logs as a second worker opens them."""
    settings = Settings(data_dir=tmp_path, internal_secret="test")
    money, other = SqliteDb(tmp_path / "hongbao.db"), open_push_db(tmp_path)
    stores = push_stores(settings, {})
    hub = PushHub(settings, stores, WorkerMetrics(tmp_path / "metrics"), stores.queue, SqliteGroupStore(money))
    loop_cleanups.extend((stores.aclose, hub.stop))  # last first: the hub stops, then its stores close
    yield Worker(hub, SqliteMessageLog(other, settings.push_log_max_messages, settings.push_log_max_age_s))
    for db in (money, other):
        db.close()


async def test_overtaken_message_reaches_a_fresh_session(worker: Worker) -> None:
    """On a session that has sent nothing yet, a later offset delivered first waits for the earlier
    one, each sent once."""
    hub, conn = worker.hub, Socket("fresh")
    await hub.attach(conn, None, None)
    assert conn.sent == []
    early = await worker.append_elsewhere("fresh", "packet_received")
    await hub.push_to_user("fresh", "opened", {})
    assert conn.events() == []  # offset 2 waits: offset 1 is read from the log first
    hub.on_message(conn, {"type": "ack", "offset": 2})  # an ack past what was sent counts for nothing
    await hub.flush()
    assert await worker.held("fresh") == [1, 2]
    await eventually(lambda: len(conn.events()) == 2)
    assert hub.receive("fresh", conn.sid, early)  # the forward of offset 1 comes in last: a duplicate
    assert conn.events() == [(1, "packet_received"), (2, "opened")]
    await hub.push_to_user("fresh", "credited", {})
    assert conn.events()[2:] == [(3, "credited")]
    hub.on_message(conn, {"type": "ack", "offset": 3})
    await hub.flush()
    assert await worker.held("fresh") == []


async def test_overtaken_message_reaches_a_resumed_session(worker: Worker) -> None:
    """A session resumed at offset 2 gets 3 and 4 in order, once, when 4 is delivered before 3 comes in."""
    hub, conn = worker.hub, Socket("resumed")
    first = [await worker.append_elsewhere("resumed", f"old{i}") for i in (1, 2)]
    await hub.attach(conn, 2, first[0].epoch)
    assert conn.sent == []
    early = await worker.append_elsewhere("resumed", "packet_received")
    await hub.push_to_user("resumed", "opened", {})
    await eventually(lambda: len(conn.events()) == 2)
    assert hub.receive("resumed", conn.sid, early)
    assert conn.events() == [(3, "packet_received"), (4, "opened")]
    assert all(m["epoch"] == first[0].epoch for m in conn.sent)


async def test_message_in_flight_at_attach_is_replayed_once(worker: Worker) -> None:
    """A message appended before the session's replay comes from the replay; its late forward is not sent again."""
    hub, conn = worker.hub, Socket("inflight")
    early = await worker.append_elsewhere("inflight", "packet_received")
    await hub.attach(conn, None, None)
    await hub.push_to_user("inflight", "opened", {})
    assert hub.receive("inflight", conn.sid, early)
    assert conn.events() == [(1, "packet_received"), (2, "opened")]


async def test_pending_ack_is_written_when_the_connection_closes(worker: Worker) -> None:
    """An ack not yet written at the tick reaches the log on detach: a reconnect without a cursor gets nothing again."""
    hub, conn = worker.hub, Socket("closing")
    await hub.attach(conn, None, None)
    for event in ("a", "b"):
        await hub.push_to_user("closing", event, {})
    hub.on_message(conn, {"type": "ack", "offset": 2})
    hub.detach(conn)
    deadline = time.monotonic() + 2.0
    while await worker.held("closing") and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert await worker.held("closing") == []
    again = Socket("closing")
    await hub.attach(again, None, None)
    assert again.sent == []
