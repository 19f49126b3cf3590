"""The storm's HTTP/1.1 client: keep-alive connections to one server on asyncio protocols, the
responses parsed by httptools (llhttp, in C).

The load generator's own CPU must stay small next to the server's, or a peak measures the
generator: a load process profiled with py-spy spent most of its CPU in aiohttp's request
machinery (session, connector, timeouts, cookie jar, header objects) rather than in the bytes on the
wire; this client does one write and one parse per request (against ``bench/http/ceiling.py``, 64
POSTs in flight: 57 us of client CPU per request, aiohttp's 218 us). It does what the storm needs
and no more: one server, at most ``limit`` connections, one request at a time on each (no
pipelining), ``Content-Length`` or chunked answers (httptools reads both), no redirects, no
cookies, no TLS. A request waits for a free connection in FIFO order (an ``asyncio.Semaphore``),
as a browser's pool makes its requests wait.

A connection idle for ``IDLE_S`` or more is closed rather than reused: servers close idle
keep-alive connections (uvicorn after 5 s), and a request written just as the server closes
would fail without an answer. A connection whose request failed or timed out is closed (its state
is unknown). Errors: ``TimeoutError`` when the answer (and, if ``wait_counts``, the wait for a
connection) took longer than ``timeout_s``; ``OSError`` (refused, reset, closed by the server
before the answer was complete); ``HttpError`` for an answer that is not HTTP/1.1.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
import zlib
from collections.abc import Sequence

import httptools

IDLE_S = 2.0
Reply = tuple[int, bytes, str | None]  # status, body, the Retry-After header (None: absent)


class HttpError(Exception):
    """The server's answer could not be parsed as HTTP/1.1."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection: writes a request, parses its answer, resolves the waiter."""

    __slots__ = ("_body", "_parser", "_retry_after", "_waiter", "closed", "idle_since", "transport")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Reply] | None = None
        self._body: list[bytes] = []
        self._retry_after: str | None = None
        self.closed = False
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports do not subclass asyncio's

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionResetError("the server closed the connection before the answer was complete"))

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(HttpError(f"not an HTTP/1.1 answer: {exc}"))
            self.close()

    def on_header(self, name: bytes, value: bytes) -> None:
        """httptools' callback: keep Retry-After."""
        if len(name) == 11 and name.lower() == b"retry-after":
            self._retry_after = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        """httptools' callback: a piece of the body."""
        self._body.append(body)

    def on_message_complete(self) -> None:
        """httptools' callback: the answer is complete."""
        reply = (self._parser.get_status_code(), b"".join(self._body), self._retry_after)
        self._body, self._retry_after = [], None
        if not self._parser.should_keep_alive():
            self.close()
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(reply)

    def _fail(self, exc: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def exchange(self, request: bytes) -> asyncio.Future[Reply]:
        """Write ``request``; the future resolves with its answer."""
        assert self.transport is not None and self._waiter is None
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self._waiter

    def close(self) -> None:
        """Close the connection (a pending answer fails with ConnectionResetError)."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Entries:
    """Several entries of one target (a fleet's nodes), a client each: a user's requests go to
    the entry its id hashes to (CRC-32), as users behind a plain balancer land on any node."""

    def __init__(self, clients: Sequence[Http1Client]) -> None:
        self._clients = list(clients)

    def for_user(self, user: str) -> Http1Client:
        """The client of ``user``'s entry."""
        clients = self._clients
        return clients[zlib.crc32(user.encode()) % len(clients)] if len(clients) > 1 else clients[0]

    def close(self) -> None:
        """Close every client's idle connections."""
        for client in self._clients:
            client.close()


class Http1Client:
    """Requests to the server at ``url`` (``http://host:port``) over at most ``limit`` keep-alive
    connections; ``timeout_s`` bounds the connect and the answer, and also the wait for a free
    connection when ``wait_counts`` (see the module's docstring)."""

    def __init__(self, url: str, limit: int, timeout_s: float, wait_counts: bool = True) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"not an http://host:port URL: {url!r}")
        self._host, self._port = parts.hostname, parts.port or 80
        self._host_line = f"Host: {parts.netloc}\r\n"
        self._slots = asyncio.Semaphore(limit)
        self._idle: list[_Connection] = []
        self._timeout_s, self._wait_counts = timeout_s, wait_counts

    async def request(self, method: str, target: str, headers: Sequence[tuple[str, str]], body: bytes | None) -> Reply:
        """Send ``method target`` with ``headers`` and ``body`` (Content-Length is added); returns
        (status, body, Retry-After). Raises TimeoutError, OSError or HttpError (see the module)."""
        lines = [f"{method} {target} HTTP/1.1\r\n", self._host_line]
        lines += [f"{name}: {value}\r\n" for name, value in headers]
        lines.append(f"Content-Length: {len(body) if body else 0}\r\n\r\n")
        data = "".join(lines).encode("latin-1") + (body or b"")
        if self._wait_counts:
            async with asyncio.timeout(self._timeout_s), self._slots:
                return await self._exchange(data)
        async with self._slots:
            async with asyncio.timeout(self._timeout_s):
                return await self._exchange(data)

    async def _exchange(self, data: bytes) -> Reply:
        conn = None
        while self._idle:
            candidate = self._idle.pop()
            if not candidate.closed and time.monotonic() - candidate.idle_since < IDLE_S:
                conn = candidate
                break
            candidate.close()
        if conn is None:
            _, conn = await asyncio.get_running_loop().create_connection(_Connection, self._host, self._port)
        done = False
        try:
            reply = await conn.exchange(data)
            done = True
        finally:
            if done and not conn.closed:
                conn.idle_since = time.monotonic()
                self._idle.append(conn)
            else:
                conn.close()
        return reply

    def close(self) -> None:
        """Close the idle connections (call when no request is in flight)."""
        for conn in self._idle:
            conn.close()
        self._idle.clear()
