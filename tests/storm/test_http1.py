"""The storm's HTTP/1.1 client against real asyncio servers on loopback: answers, keep-alive, errors."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from hongbao.bench.storm import http1
from hongbao.bench.storm.http1 import Http1Client

OK = b'HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"a": "b"}\n'
BUSY = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 0.5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"


class Scripted(asyncio.Protocol):
    """Answers each request head (bodies are ignored) with ``answer(request bytes)`` after
    ``delay_s``: bytes to write, or None to close the connection without a word, or b"" to stay silent."""

    def __init__(
        self, answer: Callable[[bytes], bytes | None], delay_s: float, seen: list[bytes], connections: list[int]
    ) -> None:
        self.answer, self.delay_s, self.seen, self.connections = answer, delay_s, seen, connections
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.connections.append(1)

    def data_received(self, data: bytes) -> None:
        self.seen.append(data)
        asyncio.get_running_loop().call_later(self.delay_s, self.reply, self.answer(data))

    def reply(self, reply: bytes | None) -> None:
        """Write ``reply`` (None: close)."""
        assert self.transport is not None
        if reply is None:
            self.transport.close()
        elif reply and not self.transport.is_closing():
            self.transport.write(reply)


async def serve(
    answer: Callable[[bytes], bytes | None], delay_s: float = 0.0
) -> tuple[asyncio.Server, str, list[bytes], list[int]]:
    """A scripted server on a free loopback port: (server, url, requests seen, connections made)."""
    seen: list[bytes] = []
    connections: list[int] = []
    server = await asyncio.get_running_loop().create_server(
        lambda: Scripted(answer, delay_s, seen, connections), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", seen, connections


async def test_answers_are_parsed_and_connections_kept_alive() -> None:
    """Status, body and Retry-After come back (Content-Length and chunked), over one kept connection."""
    server, url, seen, connections = await serve(lambda data: BUSY if b"/busy" in data else OK)
    client = Http1Client(url, 4, 5.0)
    try:
        first = await client.request("POST", "/v1/x", [("Authorization", "Bearer t")], b'{"n": 1}')
        second = await client.request("POST", "/busy", [], None)
    finally:
        client.close()
        server.close()
    assert first == (201, b'{"a": "b"}\n', None)
    assert second == (429, b"{}", "0.5")
    assert len(connections) == 1
    assert seen[0].startswith(b"POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nAuthorization: Bearer t\r\nContent-Length: 8\r\n\r\n" in seen[0] and seen[0].endswith(b'{"n": 1}')


async def test_an_idle_connection_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection idle for IDLE_S is closed and a new one made (servers close idle connections)."""
    monkeypatch.setattr(http1, "IDLE_S", 0.05)
    server, url, _, connections = await serve(lambda data: OK)
    client = Http1Client(url, 4, 5.0)
    try:
        await client.request("GET", "/a", [], None)
        await asyncio.sleep(0.1)
        await client.request("GET", "/b", [], None)
    finally:
        client.close()
        server.close()
    assert len(connections) == 2


async def test_a_server_that_hangs_up_or_stays_silent_is_an_error() -> None:
    """A close before the answer raises OSError; silence raises TimeoutError after timeout_s."""
    server, url, _, _ = await serve(lambda data: None if b"/hang-up" in data else b"")
    client = Http1Client(url, 4, 0.2)
    try:
        with pytest.raises(OSError):
            await client.request("GET", "/hang-up", [], None)
        with pytest.raises(TimeoutError):
            await client.request("GET", "/silent", [], None)
    finally:
        client.close()
        server.close()


async def test_garbage_is_an_http_error() -> None:
    """An answer that is not HTTP/1.1 raises HttpError."""
    server, url, _, _ = await serve(lambda data: b"SSH-2.0-OpenSSH\r\n\r\n")
    client = Http1Client(url, 4, 5.0)
    try:
        with pytest.raises(http1.HttpError):
            await client.request("GET", "/", [], None)
    finally:
        client.close()
        server.close()


async def test_the_wait_for_a_connection_counts_only_when_asked() -> None:
    """Three requests on one connection answered 0.4 s each, bounded at 0.6 s: when the wait
    counts only the first is answered in time; when it does not, all three are."""
    server, url, _, _ = await serve(lambda data: OK, delay_s=0.4)
    counting, patient = Http1Client(url, 1, 0.6), Http1Client(url, 1, 0.6, wait_counts=False)
    try:
        for client in (counting, patient):
            answers = await asyncio.gather(
                *(client.request("GET", f"/{i}", [], None) for i in range(3)), return_exceptions=True
            )
            statuses = [a[0] if isinstance(a, tuple) else type(a).__name__ for a in answers]
            assert statuses == ([201, "TimeoutError", "TimeoutError"] if client is counting else [201, 201, 201])
    finally:
        counting.close()
        patient.close()
        server.close()
