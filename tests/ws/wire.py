"""A raw-socket WebSocket client for the conformance tests: the opening handshake written by hand,
client frames by the native encoder (masked with a fresh key, RFC 6455 section 5.3) or as raw
bytes (to send invalid ones), server frames read with the native decoder (unmasked allowed)."""

from __future__ import annotations

import base64
import os
import socket
import time
from collections import deque
from dataclasses import dataclass

import hongbao_native as hn

from tests.server.conftest import Server

PING_MESSAGE = b'{"type":"ping"}'
PONG_MESSAGE = b'{"type":"pong"}'


@dataclass
class Answer:
    """A handshake's HTTP answer: ``status``, ``headers`` (lower-case names; a repeated field's
    values joined with ", "), ``body``; ``rest`` is what followed the head on the socket (WebSocket
    frames after a 101); ``names``: the header field names as sent, in order, repeats kept."""

    status: int
    headers: dict[str, str]
    body: bytes
    rest: bytes
    names: list[str]


def address(server: Server) -> tuple[str, int]:
    """(host, port) of ``server``."""
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def upgrade_request(
    server: Server,
    *,
    target: str = "/v1/ws",
    token: str | None = None,
    method: str = "GET",
    protocols: str | None = None,
    extra: dict[str, str] | None = None,
    key: str | None = None,
    version: str | None = "13",
) -> bytes:
    """An upgrade request; with ``token`` and no ``protocols``, the token rides as ``bearer, <token>``."""
    headers = {
        "Host": "{}:{:d}".format(*address(server)),
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": key if key is not None else base64.b64encode(os.urandom(16)).decode(),
    }
    if version is not None:
        headers["Sec-WebSocket-Version"] = version
    if protocols is None and token is not None:
        protocols = f"bearer, {token}"
    if protocols is not None:
        headers["Sec-WebSocket-Protocol"] = protocols
    headers.update(extra or {})
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    return head.encode("latin-1")


def read_answer(sock: socket.socket) -> Answer:
    """Read one HTTP answer head (and its Content-Length body) from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before an answer: {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    names = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        key = name.strip().lower()
        names.append(key)
        headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return Answer(int(lines[0].split()[1]), headers, rest[:length], rest[length:], names)


def handshake(server: Server, request: bytes, timeout: float = 10) -> Answer:
    """Send ``request`` on a fresh connection and return the answer (the socket is closed)."""
    with socket.create_connection(address(server), timeout=timeout) as sock:
        sock.sendall(request)
        return read_answer(sock)


class Wire:
    """An open WebSocket connection over a raw socket."""

    def __init__(self, sock: socket.socket, answer: Answer) -> None:
        self.sock, self.answer = sock, answer
        self.decoder = hn.FrameDecoder(1 << 24, 1 << 24, require_mask=False)
        self.frames: deque[hn.Frame] = deque(self.decoder.feed(answer.rest))

    @classmethod
    def open(cls, server: Server, token: str, *, query: str = "", rcvbuf: int | None = None, **kw: object) -> Wire:
        """Connect with ``token`` (as the bearer subprotocol) and complete the handshake (a 101 is asserted)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(10)
        sock.connect(address(server))
        sock.sendall(upgrade_request(server, target="/v1/ws" + (f"?{query}" if query else ""), token=token, **kw))  # type: ignore[arg-type]
        answer = read_answer(sock)
        assert answer.status == 101, (answer.status, answer.body)
        return cls(sock, answer)

    def send(self, opcode: int, payload: bytes = b"", *, fin: bool = True, rsv1: bool = False) -> None:
        """Send one masked frame made by the native encoder."""
        self.sock.sendall(hn.encode_frame(opcode, payload, fin=fin, mask_key=os.urandom(4), rsv1=rsv1))

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are (hand-made, possibly invalid frames)."""
        self.sock.sendall(data)

    def recv(self, timeout: float = 5.0) -> hn.Frame | None:
        """The next server frame, or None if the server closed the TCP connection first."""
        deadline = time.monotonic() + timeout
        while not self.frames:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(1 << 20)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            self.frames.extend(self.decoder.feed(chunk))
        return self.frames.popleft()

    def close_code(self, timeout: float = 5.0) -> int | None:
        """Skip data frames until the server's close frame; its code (None: empty close, or no close at all)."""
        while (frame := self.recv(timeout)) is not None:
            if frame.opcode == hn.OP_CLOSE:
                return frame.close_code
        return None

    def eof(self, timeout: float = 5.0) -> bool:
        """True once the server has closed the TCP connection (EOF or reset) within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.recv(deadline - time.monotonic()) is None:
                return True
        return False

    def ping_pong(self) -> None:
        """An app-level ping answered by an app-level pong (asserted): the connection is alive."""
        self.send(hn.OP_TEXT, PING_MESSAGE)
        frame = self.recv()
        assert frame is not None and (frame.opcode, frame.payload) == (hn.OP_TEXT, PONG_MESSAGE), frame

    def attached(self) -> None:
        """Subscribe to a topic and wait for the answer: client messages wait for the hub's attach,
        so after this the session is registered and its replay has been sent."""
        self.send(hn.OP_TEXT, b'{"type":"subscribe","topic":"attached"}')
        frame = self.recv()
        assert frame is not None and frame.payload == b'{"type":"subscribed","topic":"attached"}', frame

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()
