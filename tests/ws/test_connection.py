"""WsConnection against a recording stand-in hub, in process over a socket pair (under asyncio and
uvloop): what the hub sees and when (messages held during attach, detach exactly once after
attach returned, whatever the end), and the sweep's deadlines driven by hand-picked times."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import hongbao_native as hn
from hongbao.server.auth import Identity
from hongbao.server.config import Settings
from hongbao.server.ws_connection import WsConnection, WsRegistry, take_over
from hongbao.server.ws_handshake import Cursor

SETTINGS = Settings(
    ws_idle_timeout_s=10.0, ws_close_timeout_s=1.0, ws_token_grace_s=5.0, ws_max_output_bytes=256 * 1024
)


class RecordingHub:
    """A stand-in hub (tests only) recording every call; ``attach`` waits for ``release`` and
    raises ``attach_error`` if set; an ``{"type": "boom"}`` message makes ``on_message`` raise."""

    def __init__(self, attach_error: Exception | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.release = asyncio.Event()
        self.attach_error = attach_error

    async def attach(self, conn: WsConnection, offset: int | None, epoch: str | None, *, hello: bool = False) -> None:
        self.calls.append(("attach", offset, epoch))
        await self.release.wait()
        if self.attach_error is not None:
            raise self.attach_error
        self.calls.append(("attached",))

    def on_message(self, conn: WsConnection, message: dict[str, Any]) -> None:
        if message.get("type") == "boom":
            raise RuntimeError("hub bug")
        self.calls.append(("message", message))

    def touched(self, conn: WsConnection) -> None:
        self.calls.append(("touched",))

    def detach(self, conn: WsConnection) -> None:
        self.calls.append(("detach",))


class Peer:
    """The client end of the pair: masked frames out, server frames in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = hn.FrameDecoder(1 << 24, 1 << 24, require_mask=False)
        self.frames: list[hn.Frame] = []

    def send(self, opcode: int, payload: bytes = b"") -> None:
        self.writer.write(hn.encode_frame(opcode, payload, mask_key=os.urandom(4)))

    def close_frame(self, code: int) -> None:
        self.writer.write(hn.encode_close(code, mask_key=os.urandom(4)))

    async def recv(self) -> hn.Frame | None:
        while not self.frames:
            data = await asyncio.wait_for(self.reader.read(1 << 20), 5)
            if not data:
                return None
            self.frames.extend(self.decoder.feed(data))
        return self.frames.pop(0)


@asynccontextmanager
async def connected(
    hub: RecordingHub, exp: float | None = None
) -> AsyncIterator[tuple[WsConnection, Peer, WsRegistry]]:
    """A WsConnection (user u1, session s1, cursor (7, "ep")) on one end of a socket pair, the Peer on the other."""
    ours, theirs = socket.socketpair()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
    registry = WsRegistry(SETTINGS)
    identity = Identity("u1", False, exp if exp is not None else time.time() + 3600)
    conn = take_over(transport, identity, "s1", hub, registry, Cursor(7, "ep"), b"")
    reader, writer = await asyncio.open_connection(sock=theirs)
    try:
        yield conn, Peer(reader, writer), registry
    finally:
        writer.close()
        hub.release.set()
        for _ in range(100):
            if ("detach",) in hub.calls:
                break
            await asyncio.sleep(0.01)


async def settle() -> None:
    """Let the loop run the pending callbacks (reads, writes, the attach task)."""
    for _ in range(5):
        await asyncio.sleep(0.01)


async def test_messages_wait_for_attach_and_detach_follows_the_close() -> None:
    """Pings are answered during attach; messages wait for it and reach the hub in order after
    it (with one touch); the client's close is echoed and detach runs once."""
    hub = RecordingHub()
    async with connected(hub) as (conn, peer, registry):
        peer.send(hn.OP_TEXT, b'{"type":"ack","offset":1}')
        peer.send(hn.OP_PING, b"hi")
        peer.send(hn.OP_TEXT, b'{"type":"ack","offset":2}')
        frame = await peer.recv()
        assert frame is not None and (frame.opcode, frame.payload) == (hn.OP_PONG, b"hi")
        assert hub.calls == [("attach", 7, "ep")]
        hub.release.set()
        await settle()
        assert hub.calls == [
            ("attach", 7, "ep"),
            ("attached",),
            ("touched",),
            ("message", {"type": "ack", "offset": 1}),
            ("message", {"type": "ack", "offset": 2}),
        ]
        peer.close_frame(1000)
        frame = await peer.recv()
        assert frame is not None and frame.close_code == 1000
        assert await peer.recv() is None
        await settle()
        assert hub.calls[-1] == ("detach",) and hub.calls.count(("detach",)) == 1
        assert conn not in registry.open


async def test_failed_attach_closes_with_1011_and_detaches_once() -> None:
    """When attach raises, held messages are dropped, the connection is closed with 1011, and
    detach runs once the transport is gone."""
    hub = RecordingHub(attach_error=ConnectionError("store down"))
    async with connected(hub) as (_conn, peer, _registry):
        peer.send(hn.OP_TEXT, b'{"type":"ack","offset":1}')
        await settle()
        hub.release.set()
        frame = await peer.recv()
        assert frame is not None and frame.close_code == 1011
        peer.close_frame(1011)
        assert await peer.recv() is None
        await settle()
        assert hub.calls == [("attach", 7, "ep"), ("detach",)]


async def test_lost_during_attach_detaches_after_attach_returns() -> None:
    """A client that vanishes while attach runs is detached once, only after attach returned."""
    hub = RecordingHub()
    async with connected(hub) as (conn, peer, registry):
        peer.writer.transport.abort()
        await settle()
        assert hub.calls == [("attach", 7, "ep")] and conn in registry.open  # a stopping worker waits for it
        hub.release.set()
        await settle()
        assert hub.calls == [("attach", 7, "ep"), ("attached",), ("detach",)] and conn not in registry.open


async def test_hub_failure_on_a_message_closes_with_1011() -> None:
    """A hub that raises on a message gets the connection closed with 1011, not the worker."""
    hub = RecordingHub()
    hub.release.set()
    async with connected(hub) as (_conn, peer, _registry):
        peer.send(hn.OP_TEXT, b'{"type":"boom"}')
        frame = await peer.recv()
        assert frame is not None and frame.close_code == 1011


async def test_close_is_idempotent_and_sends_refuse_afterwards() -> None:
    """Two closes send one close frame; send_text and send_frame answer False after it."""
    hub = RecordingHub()
    hub.release.set()
    async with connected(hub) as (conn, peer, _registry):
        assert conn.send_text(b'{"n":1}')
        conn.close(4001, "replaced by a newer session")
        conn.close(1000)
        assert not conn.send_text(b'{"n":2}') and not conn.send_frame(hn.encode_frame(hn.OP_TEXT, b"{}"))
        frames = [await peer.recv(), await peer.recv()]
        assert [
            (f.opcode, f.payload) if f.opcode == hn.OP_TEXT else (f.close_code, f.close_reason) for f in frames if f
        ] == [(hn.OP_TEXT, b'{"n":1}'), (4001, "replaced by a newer session")]
        peer.close_frame(4001)
        assert await peer.recv() is None


async def test_output_cap_refuses_and_closes_with_1013() -> None:
    """A peer that does not read: sends are accepted until the queued bytes would pass the cap,
    then refused, and the close that follows is 1013."""
    hub = RecordingHub()
    hub.release.set()
    async with connected(hub) as (conn, peer, _registry):
        body = b'"' + b"x" * 8190 + b'"'
        accepted = 0
        while conn.send_text(body):
            accepted += 1
            await asyncio.sleep(0)  # the transport writes to the socket as it can
        assert not conn.send_text(body)
        assert 0 < accepted * len(body) <= SETTINGS.ws_max_output_bytes + 512 * 1024  # the cap plus the socket buffers
        assert conn.queued_bytes == 0 and not conn.queue
        frames = []
        while (frame := await peer.recv()) is not None and frame.opcode == hn.OP_TEXT:
            frames.append(frame)
        assert frame is not None and frame.close_code == 1013 and len(frames) < accepted


async def test_sweep_closes_idle_then_expired_then_drops_after_the_close_wait() -> None:
    """The sweep closes an idle connection with 1000 and one whose token expired past the grace
    with 4003, and aborts a close left unanswered past the close wait; detach follows once."""
    for exp_offset, code, reason in [(3600, 1000, "idle timeout"), (-10, 4003, "token expired")]:
        hub = RecordingHub()
        hub.release.set()
        async with connected(hub, exp=time.time() + exp_offset) as (conn, peer, registry):
            await settle()
            now = asyncio.get_running_loop().time()
            registry.sweep(now + (11 if code == 1000 else 0), time.time())
            frame = await peer.recv()
            assert frame is not None and (frame.close_code, frame.close_reason) == (code, reason)
            registry.sweep(now + 0.5, time.time())
            assert ("detach",) not in hub.calls  # the close wait (1 s) is not over
            registry.sweep(conn.close_deadline, time.time())
            assert await peer.recv() is None
            await settle()
            assert hub.calls.count(("detach",)) == 1


async def test_a_protocol_error_half_closes_and_drops_the_rest_until_the_close_wait() -> None:
    """A frame the decoder refuses (unmasked: 1002): the close frame, then EOF to the peer, while
    the server still reads (and drops) what the peer sends; the sweep ends TCP at the close wait,
    and detach follows once."""
    hub = RecordingHub()
    hub.release.set()
    async with connected(hub) as (conn, peer, registry):
        await settle()
        peer.writer.write(hn.encode_frame(hn.OP_TEXT, b'{"type":"ping"}'))  # no mask
        frame = await peer.recv()
        assert frame is not None and frame.close_code == 1002
        assert await peer.recv() is None  # the server half-closed after its close frame
        peer.send(hn.OP_TEXT, b'{"type":"late"}')  # still read, and dropped
        await settle()
        assert ("detach",) not in hub.calls and not conn.lost
        assert not any(call[0] == "message" for call in hub.calls)
        registry.sweep(conn.close_deadline, time.time())
        await settle()
        assert conn.lost and hub.calls.count(("detach",)) == 1


async def test_close_all_sends_1001() -> None:
    """Shutdown: close_all starts the close handshake with 1001 on every connection."""
    hub = RecordingHub()
    hub.release.set()
    async with connected(hub) as (_conn, peer, registry):
        registry.close_all(1001, "server shutting down")
        frame = await peer.recv()
        assert frame is not None and (frame.close_code, frame.close_reason) == (1001, "server shutting down")
