"""The light WebSocket client of the push benchmark: one ``asyncio.Protocol`` per connection that
does the opening handshake (RFC 6455 section 4.1) by hand, sends one message (a subscribe, or a
``hello`` both servers answer with an error) and, once it is answered (so the server has set the
connection up: hongbao answers only after its session is logged in), only counts the text frames
the server sends (section 5.2 framing; server frames are unmasked, 5.1).

It decodes no JSON and keeps no message, so that 10 000 of them fit in a few client processes and
cost little CPU: the server is what the benchmark measures. The frame it sends is masked,
as section 5.3 requires of a client.
"""

from __future__ import annotations

import asyncio
import base64
import os
from dataclasses import dataclass

import orjson

_END = b"\r\n\r\n"
_TEXT, _CLOSE = 0x1, 0x8


def masked_text(payload: bytes) -> bytes:
    """One masked, final text frame carrying ``payload`` (at most 125 bytes; RFC 6455 section 5.2)."""
    if len(payload) > 125:
        raise ValueError("the light client only sends short frames")
    key = os.urandom(4)
    body = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | _TEXT, 0x80 | len(payload)]) + key + body


def greeting(topic: str | None) -> bytes:
    """The masked first message: ``{"type": "subscribe", "topic": topic}``, or with no topic
    ``{"type": "hello"}`` (a type neither server knows: answered with an error, nothing kept)."""
    return masked_text(orjson.dumps({"type": "subscribe", "topic": topic} if topic is not None else {"type": "hello"}))


@dataclass(frozen=True)
class Target:
    """Where connections go: ``host``, ``port``, and the request ``path`` before the token
    (``/v1/ws?token=`` for hongbao: each connection appends its own token)."""

    host: str
    port: int
    path: str

    def request(self, token: str) -> bytes:
        """The handshake request of one connection (section 4.1), its key random."""
        key = base64.b64encode(os.urandom(16)).decode()
        return (
            f"GET {self.path}{token} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()


class Counter(asyncio.Protocol):
    """One connection: handshake, the ``first`` message, then count text frames and their
    payload bytes. ``ready`` resolves once the first message is answered (None), or with an error
    text if the server refused or closed the connection first."""

    __slots__ = (
        "transport",
        "request",
        "first",
        "ready",
        "buffer",
        "upgraded",
        "texts",
        "payload_bytes",
        "closes",
        "lost",
    )

    def __init__(self, request: bytes, first: bytes, ready: asyncio.Future[str | None]) -> None:
        self.transport: asyncio.Transport | None = None
        self.request, self.first, self.ready = request, first, ready
        self.buffer = b""
        self.upgraded = False
        self.texts = self.payload_bytes = self.closes = 0
        self.lost: asyncio.Future[None] = ready.get_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports do not subclass asyncio's
        assert self.transport is not None
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        if not self.upgraded:
            end = buffer.find(_END)
            if end < 0:
                self.buffer = buffer
                return
            if not buffer.startswith(b"HTTP/1.1 101"):
                self._fail(buffer[:end].split(b"\r\n", 1)[0].decode(errors="replace"))
                return
            self.upgraded, buffer = True, buffer[end + len(_END) :]
            assert self.transport is not None
            self.transport.write(self.first)
        self.buffer = self._frames(buffer)

    def _frames(self, buffer: bytes) -> bytes:
        """Count the whole frames at the start of ``buffer``; the rest (a partial frame) is returned."""
        at, size = 0, len(buffer)
        while size - at >= 2:
            length, head = buffer[at + 1] & 0x7F, 2
            if length == 126:
                if size - at < 4:
                    break
                length, head = int.from_bytes(buffer[at + 2 : at + 4], "big"), 4
            elif length == 127:
                if size - at < 10:
                    break
                length, head = int.from_bytes(buffer[at + 2 : at + 10], "big"), 10
            if size - at < head + length:
                break
            opcode = buffer[at] & 0x0F
            if opcode == _TEXT:
                if self.ready.done():
                    self.texts += 1
                    self.payload_bytes += length
                else:  # the answer to the first message
                    self._resolve(None)
            elif opcode == _CLOSE:
                self.closes += 1
                payload = buffer[at + head : at + head + length]
                code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
                self._fail(f"closed by the server: {code} {payload[2:].decode(errors='replace')}")
            at += head + length
        return buffer[at:] if at else buffer

    def _resolve(self, error: str | None) -> None:
        if not self.ready.done():
            self.ready.set_result(error)

    def _fail(self, error: str) -> None:
        self._resolve(error)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._resolve(f"connection lost: {exc!r}")
        if not self.lost.done():
            self.lost.set_result(None)

    def reset(self) -> None:
        """Start counting from zero."""
        self.texts = self.payload_bytes = 0

    def close(self) -> None:
        """Drop the TCP connection (no close handshake: the benchmark only needs the socket gone)."""
        if self.transport is not None:
            self.transport.close()
