"""One WebSocket connection after its 101 (RFC 6455), on the transport the HTTP protocol handed
over, and the registry whose one sweep enforces every connection's deadlines.

Receive: the native ``FrameDecoder`` (masking required, sizes checked before allocating, UTF-8
checked across fragments); a ``ProtocolError`` fails the connection with its close code (1002,
1007, 1009): the close frame, a half-close, then the client's input is dropped until it closes
(section 7.1.7; at most ``ws_close_timeout_s``). Messages:

- a text message that is not a JSON object (valid UTF-8: the decoder closed 1007 on anything
  else) is answered ``{"type": "error", "code": "invalid_request", "message"}`` and the
  connection stays open, as for an object the hub does not know (1007 is for data inconsistent
  with the message's type, i.e. text that is not UTF-8: RFC 6455 section 7.4.1; a JSON mistake is
  an application error); ``{"type": "ping"}`` is answered ``{"type": "pong"}`` here; every other
  object goes to ``hub.on_message``;
- a binary message closes with 1003 (the protocol has no binary messages);
- a ping is answered with a pong carrying its payload (section 5.5.2), an unsolicited pong is
  ignored (5.5.3); inbound frames call ``hub.touched`` (liveness; once per read, and not before
  attach returned nor after a close was sent).

Messages that arrive while ``hub.attach`` runs are held and handed over, in order, once it returns
(at most ``HELD_MAX``; past that reading pauses until then). A failing ``attach`` closes with 1011.

Send: frames go straight to the transport while it accepts them; above its high-water mark
(``pause_writing``, ``WRITE_HIGH`` bytes) data frames wait in this connection's queue, and control
frames (pong, app pong, close) are written ahead of that queue: whole frames only, never inside
one. Bytes in the transport plus bytes queued here may not pass ``ws_max_output_bytes``: past it
nothing more is queued, ``send_text``/``send_frame`` return False and the connection is closed
with 1013 (the hub keeps the message for the next connection). The kernel's send buffer is fixed
at ``SNDBUF`` (autotuning would let a stalled client hold megabytes there, out of the cap's sight
and ahead of any pong), so a client is never more than the cap plus ~200 KiB behind.

Close (section 7): ``close(code, reason)`` sends a close frame (queued data not yet handed to
the transport is dropped: the hub replays what was not acked), ignores data frames from then on,
closes TCP when the client's close arrives, and drops TCP ``ws_close_timeout_s`` after sending if
it never does. A client's close is echoed (its code, or an empty close) and TCP closed; frames
after it are ignored. The sweep closes a connection with no inbound frame for
``ws_idle_timeout_s`` (1000, "idle timeout") and one whose token expired ``ws_token_grace_s``
ago (4003). Shutdown closes every connection with 1001. ``hub.detach`` runs exactly once per
connection, after ``attach`` has returned (even if it raised) and the transport is gone.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from typing import Any, Protocol, cast

import orjson
from hongbao.server import push_messages
from hongbao.server.auth import Identity
from hongbao.server.config import Settings
from hongbao.server.ws_handshake import Cursor
from hongbao_native import (
    OP_BINARY,
    OP_CLOSE,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    Frame,
    FrameDecoder,
    ProtocolError,
    encode_close,
    encode_frame,
)

log = logging.getLogger("hongbao.ws")
WRITE_HIGH = 64 * 1024  # transport high-water mark (bytes): past it data frames wait in our queue
WRITE_LOW = 16 * 1024
SNDBUF = 64 * 1024  # the socket's kernel send buffer (Linux doubles it), fixed rather than autotuned
HELD_MAX = 64  # messages held while the hub attaches the connection
PONG_FRAME = encode_frame(OP_TEXT, b'{"type":"pong"}')
NOT_AN_OBJECT_FRAME = encode_frame(OP_TEXT, push_messages.error("a message must be a JSON object"))
NOT_JSON_FRAME = encode_frame(
    OP_TEXT,
    push_messages.error(
        "a message must be a JSON object: this one does not parse (RFC 8259: valid UTF-8, numbers in a double's range)"
    ),
)
MAX_REASON_BYTES = 123  # a close reason fits a 125-byte control frame with its code (section 5.5.1)


class Hub(Protocol):
    """What a connection needs of the push hub (server/push_hub.py's PushHub; /tmp/common.md)."""

    async def attach(self, conn: WsConnection, offset: int | None, epoch: str | None, *, hello: bool = False) -> None:
        """Log the session in, register it locally, replay from (offset, epoch) (``hello``: the
        stream's epoch first); raises on store failure."""
        ...

    def on_message(self, conn: WsConnection, message: dict[str, Any]) -> None:
        """A parsed client JSON object other than an app ping (ack / subscribe / unsubscribe)."""
        ...

    def touched(self, conn: WsConnection) -> None:
        """Inbound frames arrived (liveness)."""
        ...

    def detach(self, conn: WsConnection) -> None:
        """The connection ended (the one cleanup for close and error)."""
        ...


class WsRegistry:
    """This worker's open WebSocket connections; ``sweep_forever`` enforces their deadlines (one
    task per worker, no timer per connection)."""

    __slots__ = ("open", "settings", "interval_s")

    def __init__(self, settings: Settings) -> None:
        self.open: set[WsConnection] = set()
        self.settings = settings
        self.interval_s = max(0.05, min(1.0, settings.ws_close_timeout_s / 4, settings.ws_idle_timeout_s / 8))

    def sweep(self, now: float, wall: float) -> None:
        """Close idle and token-expired connections; drop those whose close timed out. ``now`` is
        loop time, ``wall`` seconds since the epoch (token expiry), both in seconds."""
        idle_before = now - self.settings.ws_idle_timeout_s
        expired_before = wall - self.settings.ws_token_grace_s
        for conn in [c for c in self.open if c.due(idle_before, expired_before, now)]:
            conn.expire(idle_before, expired_before, now)

    async def sweep_forever(self) -> None:
        """Sweep every ``interval_s`` seconds until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.interval_s)
            self.sweep(loop.time(), time.time())

    def close_all(self, code: int, reason: str) -> None:
        """Start the close handshake on every connection (graceful shutdown: 1001)."""
        for conn in list(self.open):
            conn.close(code, reason)


class WsConnection(asyncio.Protocol):
    """One WebSocket connection of user ``uid``, session ``sid``, subscribed to ``subscriptions``."""

    __slots__ = (
        "uid",
        "sid",
        "subscriptions",
        "identity",
        "hub",
        "registry",
        "transport",
        "loop",
        "decoder",
        "cap",
        "last_seen",
        "close_deadline",
        "close_sent",
        "close_received",
        "lost",
        "paused",
        "queue",
        "queued_bytes",
        "held",
        "attaching",
        "detached",
    )

    def __init__(
        self, transport: asyncio.Transport, identity: Identity, sid: str, hub: Hub, registry: WsRegistry
    ) -> None:
        s = registry.settings
        self.uid, self.sid, self.identity = identity.user_id, sid, identity
        self.subscriptions: set[str] = set()
        self.hub, self.registry, self.transport = hub, registry, transport
        self.loop = asyncio.get_running_loop()
        self.decoder = FrameDecoder(s.ws_max_message_bytes, s.ws_max_message_bytes, require_mask=True)
        self.cap = s.ws_max_output_bytes
        self.last_seen = self.loop.time()
        self.close_deadline = 0.0  # loop time at which an unanswered close drops TCP; 0: not closing
        self.close_sent = self.close_received = self.lost = self.paused = self.detached = False
        self.queue: deque[bytes] = deque()
        self.queued_bytes = 0
        self.held: list[dict[str, Any]] | None = []  # messages that came during attach; None once attached
        self.attaching = True

    def start(self, cursor: Cursor, buffered: bytes) -> None:
        """Take over (the transport already points here): register, attach to the hub with the
        reconnect cursor, and decode ``buffered``, the bytes that followed the request head."""
        self.transport.set_write_buffer_limits(high=WRITE_HIGH, low=WRITE_LOW)
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
        self.registry.open.add(self)
        self.loop.create_task(self._attach(cursor))
        if buffered:
            self.data_received(buffered)

    async def _attach(self, cursor: Cursor) -> None:
        try:
            await self.hub.attach(self, cursor.offset, cursor.epoch, hello=cursor.hello)
        except Exception as exc:
            log.warning("push hub attach failed, closing sid=%s: %r", self.sid, exc)
            self.close(1011, "session store unavailable")
        held, self.held, self.attaching = self.held or [], None, False
        if held and not self.close_sent and not self.lost:
            self.hub.touched(self)
            for message in held:
                self._dispatch(message)
        if len(held) >= HELD_MAX and not self.lost:
            self.transport.resume_reading()
        self._maybe_detach()

    # --- receive ----------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.close_received or self.decoder.failed:
            return
        try:
            frames = self.decoder.feed(data)
        except ProtocolError as exc:
            self._fail(exc.close_code, str(exc))
            return
        if not frames:
            return
        self.last_seen = self.loop.time()
        if not self.attaching and not self.close_sent:
            self.hub.touched(self)
        for frame in frames:
            self._on_frame(frame)
            if self.close_received:
                return  # frames after the client's close are ignored (section 5.5.1)

    def _on_frame(self, frame: Frame) -> None:
        opcode = frame.opcode
        if opcode == OP_TEXT:
            if not self.close_sent:  # after our close, data frames are discarded (section 7.1.2)
                self._on_text(frame.payload)
        elif opcode == OP_PING:
            self._write_control(encode_frame(OP_PONG, frame.payload))
        elif opcode == OP_CLOSE:
            self._on_close(frame)
        elif opcode == OP_BINARY and not self.close_sent:
            self.close(1003, "binary messages are not accepted")
        # OP_PONG: an unsolicited pong is ignored (section 5.5.3)

    def _on_text(self, payload: bytes) -> None:
        try:
            message = orjson.loads(payload)
        except orjson.JSONDecodeError:
            self.send_frame(NOT_JSON_FRAME)
            return
        if not isinstance(message, dict):
            self.send_frame(NOT_AN_OBJECT_FRAME)
        elif message.get("type") == "ping":
            self._write_control(PONG_FRAME)
        elif self.held is not None:
            self.held.append(message)
            if len(self.held) == HELD_MAX:
                self.transport.pause_reading()
        else:
            self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        """Hand one client message to the hub; a hub failure closes this connection (1011), not the worker."""
        if self.close_sent:
            return
        try:
            self.hub.on_message(self, message)
        except Exception:
            log.exception("push hub failed on a client message sid=%s", self.sid)
            self.close(1011, "internal error")

    def _on_close(self, frame: Frame) -> None:
        self.close_received = True
        if not self.close_sent:  # the client started: echo its code (section 5.5.1), then close TCP
            code = frame.close_code
            self._start_close(encode_close(code) if code is not None else encode_frame(OP_CLOSE, b""))
        log.debug("ws closed sid=%s code=%s clean=True", self.sid, frame.close_code)
        self.transport.close()  # the server closes TCP first (section 7.1.1)

    # --- send -------------------------------------------------------------------------------------

    def output_bytes(self) -> int:
        """Bytes waiting to go out (in the transport plus queued here): what the cap counts. The
        hub paces a replay by it, so a long backlog flows to a reading client instead of meeting the cap."""
        return self.queued_bytes + self.transport.get_write_buffer_size()

    def send_text(self, body: bytes) -> bool:
        """Queue one text message (``body``: UTF-8 JSON). True if queued (not yet delivered: the
        client acks); False if the connection is closing or over its output cap (then closed with 1013)."""
        return self.send_frame(encode_frame(OP_TEXT, body))

    def send_frame(self, frame: bytes) -> bool:
        """Queue one or more whole pre-encoded frames as one write (a broadcast encodes once for
        every subscriber and joins the broadcasts sent together); same answer and cap as
        ``send_text``, for all of them at once."""
        if self.close_sent or self.lost:
            return False
        # not paused: the transport holds at most WRITE_HIGH bytes, so small frames need no count
        if self.paused or len(frame) > self.cap - WRITE_HIGH:
            if self.output_bytes() + len(frame) > self.cap:
                log.info("ws output over %d bytes, closing sid=%s", self.cap, self.sid)
                self.close(1013, "output over the cap; reconnect later")
                return False
        if self.paused:
            self.queue.append(frame)
            self.queued_bytes += len(frame)
        else:
            self.transport.write(frame)
        return True

    def _write_control(self, frame: bytes) -> None:
        """Write a small frame ahead of the queued data frames (never inside a frame: the
        transport holds whole frames only); a client that sends pings but never reads meets the cap."""
        if self.close_sent or self.lost:
            return
        if self.transport.get_write_buffer_size() + len(frame) > self.cap:
            self.close(1013, "output over the cap; reconnect later")
            return
        self.transport.write(frame)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        while self.queue and not self.paused and not self.close_sent:
            frame = self.queue.popleft()
            self.queued_bytes -= len(frame)
            self.transport.write(frame)

    # --- close ------------------------------------------------------------------------------------

    def close(self, code: int, reason: str = "") -> None:
        """Start the close handshake with ``code`` (RFC 6455 section 7.4) and ``reason`` (cut to
        123 UTF-8 bytes); idempotent: only the first call sends a close frame."""
        if self.close_sent or self.lost:
            return
        reason = reason.encode()[:MAX_REASON_BYTES].decode(errors="ignore")
        log.debug("ws closing sid=%s code=%d", self.sid, code)
        self._start_close(encode_close(code, reason))

    def _fail(self, code: int, reason: str) -> None:
        """Fail the connection (RFC 6455 section 7.1.7) with ``code``: the close frame, then a
        half-close, and what the client still sends (the rest of a message over the limit, say) is
        read and dropped until it closes or ``ws_close_timeout_s`` pass (the sweep then drops TCP).
        Closing with unread input at once would send a reset, which can destroy the close frame
        before the client reads it."""
        self.close(code, reason)
        if self.transport.is_closing():
            return
        if self.transport.can_write_eof():
            self.transport.write_eof()
        else:
            self.transport.close()

    def _start_close(self, frame: bytes) -> None:
        self.close_sent = True
        self.queue.clear()
        self.queued_bytes = 0
        self.close_deadline = self.loop.time() + self.registry.settings.ws_close_timeout_s
        if not self.transport.is_closing():
            self.transport.write(frame)

    def due(self, idle_before: float, expired_before: float, now: float) -> bool:
        """Whether the sweep has something to do here (see ``expire``)."""
        if self.lost:
            return False
        if self.close_sent:
            return self.close_deadline <= now
        return self.last_seen <= idle_before or self.identity.exp <= expired_before

    def expire(self, idle_before: float, expired_before: float, now: float) -> None:
        """Drop TCP after an unanswered close (P-19); close an idle connection (1000) or one whose
        token expired past the grace (4003)."""
        if self.close_sent:
            log.debug("ws close timed out sid=%s", self.sid)
            self.transport.abort()
        elif self.identity.exp <= expired_before:
            self.close(4003, "token expired")
        else:
            self.close(1000, "idle timeout")

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.queue.clear()
        self._maybe_detach()

    def _maybe_detach(self) -> None:
        """Once the transport is gone and attach has returned: detach, and leave the registry (so
        a stopping worker waits for attaches in flight before it closes the stores)."""
        if self.lost and not self.attaching and not self.detached:
            self.detached = True
            self.registry.open.discard(self)
            self.hub.detach(self)


def take_over(
    transport: asyncio.BaseTransport,
    identity: Identity,
    sid: str,
    hub: Hub,
    registry: WsRegistry,
    cursor: Cursor,
    buffered: bytes,
) -> WsConnection:
    """Make the WsConnection of an upgraded ``transport`` (its 101 already written), point the
    transport at it and start it (``cursor``: where its stream resumes)."""
    conn = WsConnection(cast(asyncio.Transport, transport), identity, sid, hub, registry)
    transport.set_protocol(conn)
    conn.start(cursor, buffered)
    return conn
