"""The ceiling of the push benchmark: the least a Python WebSocket server on uvloop can do for the
same clients, so that the benchmark can tell the server's own cost from the kernel's.

It does the opening handshake by hand (RFC 6455 section 4.2.2: ``Sec-WebSocket-Accept`` from the
key), reads each client frame's header and unmasks it (sections 5.2, 5.3) without checking
anything else, answers ``{"type": "subscribe", ...}`` with ``{"type": "subscribed", ...}`` (and
adds the connection to the subscribers) and any other message with the same error hongbao sends.
``GET /broadcast?text=T`` encodes ``T`` into one text frame once and writes it to every
subscriber's transport; ``GET /healthz`` answers 200. One ``transport.write`` per message and
connection, as the websockets server does (and hongbao, but for broadcasts that meet: run.py):
what is left is the event loop and the kernel.

Usage: ``python -m hongbao.bench.push.ceiling_server --port N [--host 127.0.0.1]``; stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from urllib.parse import parse_qs, urlsplit

from hongbao.bench.push.script import run_script, until_stopped

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC11B85"  # RFC 6455 section 1.3
END = b"\r\n\r\n"
SUBSCRIBERS: set[Ceiling] = set()
UNKNOWN = b'{"type":"error","code":"invalid_request","message":"unknown message type"}'


def text_frame(payload: bytes) -> bytes:
    """One unmasked final text frame (server to client; section 5.2)."""
    size = len(payload)
    if size < 126:
        return bytes([0x81, size]) + payload
    if size < 65536:
        return bytes([0x81, 126]) + size.to_bytes(2, "big") + payload
    return bytes([0x81, 127]) + size.to_bytes(8, "big") + payload


def _http(status: str, body: bytes, extra: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


class Ceiling(asyncio.Protocol):
    """One connection: an HTTP request (control, or a WebSocket handshake), then frames."""

    __slots__ = ("transport", "buffer", "upgraded")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.upgraded = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports do not subclass asyncio's

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        buffer = self.buffer + data
        while not self.upgraded:  # HTTP requests (keep-alive) until a handshake
            end = buffer.find(END)
            if end < 0:
                self.buffer = buffer
                return
            self._request(buffer[:end].decode("latin-1"))
            buffer = buffer[end + len(END) :]
        while len(buffer) >= 6 and len(buffer) >= 6 + (buffer[1] & 0x7F):  # short masked frames only
            size = buffer[1] & 0x7F
            key, payload = buffer[2:6], buffer[6 : 6 + size]
            message = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
            buffer = buffer[6 + size :]
            if b'"subscribe"' in message:
                SUBSCRIBERS.add(self)
                self.transport.write(text_frame(b'{"type":"subscribed","topic":"bench"}'))
            else:
                self.transport.write(text_frame(UNKNOWN))
        self.buffer = buffer

    def _request(self, head: str) -> None:
        assert self.transport is not None
        lines = head.split("\r\n")
        url = urlsplit(lines[0].split(" ")[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        if url.path == "/healthz":
            self.transport.write(_http("200 OK", b"ok\n"))
        elif url.path == "/broadcast":
            frame = text_frame(parse_qs(url.query).get("text", [""])[-1].encode())
            for conn in SUBSCRIBERS:
                assert conn.transport is not None
                conn.transport.write(frame)
            self.transport.write(_http("200 OK", b"%d\n" % len(SUBSCRIBERS)))
        else:
            accept = base64.b64encode(hashlib.sha1(headers["sec-websocket-key"].encode() + GUID).digest()).decode()
            self.transport.write(
                f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Accept: {accept}\r\n\r\n".encode()
            )
            self.upgraded = True

    def connection_lost(self, exc: Exception | None) -> None:
        SUBSCRIBERS.discard(self)


async def main(host: str, port: int) -> None:
    """Serve on ``host``:``port`` until SIGTERM or SIGINT."""
    server = await asyncio.get_running_loop().create_server(Ceiling, host, port, backlog=4096)
    await until_stopped()
    server.close()


if __name__ == "__main__":
    run_script(__doc__, main)
