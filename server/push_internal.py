"""Forwards between push nodes: each worker's internal HTTP listener, and the client that calls it.

Every worker listens on ``internal_host`` (loopback by default) at an ephemeral port, published
as its address in the NodeDirectory. Every request carries the shared secret in the
``x-hongbao-internal`` header (``internal_secret``, or one derived from the data directory's
jwt.key, so the workers and nodes sharing a data directory agree; never logged):

- ``POST /internal/push`` ``{"messages": [[uid, sid, offset, epoch, body], ...]}`` ->
  ``{"delivered": [true | false, ...]}``: true when the message went to session ``sid``'s socket
  here, false when that session is not here (the sender looks the route up again);
- ``POST /internal/kick`` ``{"uid", "sid"}`` -> ``{"closed": bool}``: session ``sid`` was replaced
  by a newer login elsewhere, close it with 4001.

A bad secret is 401, anything else 404 / 400. The answers need no I/O, so the listener answers
inside ``data_received``, in order (HTTP/1.1 keep-alive, RFC 9112 section 9.3).

The client is aiohttp's (a keep-alive connection pool per node, its HTTP parser in C; aiohttp is
already a runtime dependency, where httpx would add a pure-Python HTTP stack to every forward).
Forwards to one node made in the same turn of the event loop share one request, and each
request waits at most ``push_forward_timeout_s``. A node that stops answering (no connection, no
answer in time, a status other than 200, or a body that is not JSON: a killed worker until the
sweep forgets its sessions, a node with another secret) is logged once, as a warning; its further
failures are counted, and the count is logged when it answers again.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from collections.abc import Sequence
from typing import Any, Protocol, cast

import aiohttp
import orjson
from hongbao.core.push_ports import Stored
from hongbao.server.auth import embedded_secret
from hongbao.server.config import Settings
from hongbao_native import HttpParseError, Request, RequestParser, encode_response

log = logging.getLogger("hongbao.push.internal")
SECRET_HEADER = "x-hongbao-internal"
MAX_BODY_BYTES = 8 << 20
CHUNK_BYTES = 1 << 20  # a batch is split into requests of about this many bytes
#: Addresses whose failures are being counted, at most (the oldest is forgotten first).
MAX_FAILING = 1024
_JSON = [("content-type", "application/json")]

#: One forwarded message: (uid, sid, message).
Forward = tuple[str, str, Stored]


def internal_secret(settings: Settings) -> str:
    """The shared secret of internal forwards: ``internal_secret``, else an HMAC-SHA256 of a fixed
    label keyed by ``data_dir/jwt.key`` (created if missing), so it never equals the token key."""
    if settings.internal_secret:
        return settings.internal_secret
    key = embedded_secret(settings.data_dir).encode()
    return hmac.new(key, b"hongbao internal push", hashlib.sha256).hexdigest()


class Receiver(Protocol):
    """What the listener delivers to (the PushHub)."""

    def receive(self, uid: str, sid: str, message: Stored) -> bool:
        """Send ``message`` to session ``sid`` of ``uid`` if it is here; False if it is not."""
        ...

    def kick(self, uid: str, sid: str) -> bool:
        """Close session ``sid`` of ``uid`` with 4001 if it is here; False if it is not."""
        ...


class InternalProtocol(asyncio.Protocol):
    """One connection to the internal listener."""

    __slots__ = ("receiver", "secret", "parser", "transport")

    def __init__(self, receiver: Receiver, secret: str) -> None:
        self.receiver, self.secret = receiver, secret
        self.parser = RequestParser(8192, 32, MAX_BODY_BYTES)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        try:
            requests = self.parser.feed(data)
        except HttpParseError as exc:
            self.transport.write(encode_response(int(getattr(exc, "status", 400)), [("connection", "close")], b""))
            self.transport.close()
            return
        if requests:
            self.transport.write(b"".join(self._answer(request) for request in requests))
            if not requests[-1].keep_alive:
                self.transport.close()

    def _answer(self, request: Request) -> bytes:
        given = request.header(SECRET_HEADER) or ""
        if not hmac.compare_digest(given.encode(), self.secret.encode()):
            return encode_response(401, _JSON, b'{"error":"unauthorized"}')
        try:
            body: Any = orjson.loads(request.body)
            if request.method == "POST" and request.path == "/internal/push":
                delivered = [
                    self.receiver.receive(uid, sid, Stored(offset, epoch, text.encode()))
                    for uid, sid, offset, epoch, text in body["messages"]
                ]
                return encode_response(200, _JSON, orjson.dumps({"delivered": delivered}))
            if request.method == "POST" and request.path == "/internal/kick":
                closed = self.receiver.kick(str(body["uid"]), str(body["sid"]))
                return encode_response(200, _JSON, orjson.dumps({"closed": closed}))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            return encode_response(400, _JSON, orjson.dumps({"error": f"malformed request: {exc}"}))
        return encode_response(404, _JSON, b'{"error":"not_found"}')


async def listen(receiver: Receiver, settings: Settings) -> tuple[asyncio.AbstractServer, str]:
    """Start this worker's internal listener on ``internal_host`` at an ephemeral port; returns
    the server and its ``host:port``."""
    secret = internal_secret(settings)
    server = await asyncio.get_running_loop().create_server(
        lambda: InternalProtocol(receiver, secret), settings.internal_host, 0
    )
    host, port = server.sockets[0].getsockname()[:2]
    return server, f"{host}:{port}"


class Forwarder:
    """Calls other nodes' internal listeners (``secret``; each request waits at most ``timeout_s``)."""

    __slots__ = ("_secret", "_timeout", "_session", "_pending", "_flushes", "_failing")

    def __init__(self, secret: str, timeout_s: float) -> None:
        self._secret, self._timeout = secret, aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._pending: dict[str, list[tuple[Forward, asyncio.Future[bool | None]]]] = {}
        self._flushes: set[asyncio.Task[None]] = set()
        self._failing: dict[str, int] = {}  # address -> failed calls since the one logged

    async def push(self, address: str, forwards: Sequence[Forward]) -> list[bool | None]:
        """Forward messages to the node at ``address``: per message True (on that socket), False
        (not there), None (no answer in time, or an error). Forwards made to the same node in
        the same turn of the loop go in one request."""
        loop = asyncio.get_running_loop()
        pending = self._pending.get(address)
        if pending is None:
            pending = self._pending[address] = []
            loop.call_soon(self._start_flush, address)
        futures = []
        for forward in forwards:
            future: asyncio.Future[bool | None] = loop.create_future()
            pending.append((forward, future))
            futures.append(future)
        return list(await asyncio.gather(*futures))

    def _start_flush(self, address: str) -> None:
        task = asyncio.get_running_loop().create_task(self._flush(address))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _flush(self, address: str) -> None:
        batch = self._pending.pop(address)
        start = 0
        while start < len(batch):
            end, size = start, 0
            while end < len(batch) and (end == start or size < CHUNK_BYTES):
                size += len(batch[end][0][2].body) + 64
                end += 1
            chunk = batch[start:end]
            messages = [[uid, sid, m.offset, m.epoch, m.body.decode()] for (uid, sid, m), _ in chunk]
            answer = await self._call(address, "/internal/push", {"messages": messages})
            delivered = answer.get("delivered") if answer is not None else None
            results: list[bool | None] = [None] * len(chunk)
            if isinstance(delivered, list) and len(delivered) == len(chunk):
                results = [bool(d) for d in delivered]
            for (_, future), result in zip(chunk, results, strict=True):
                if not future.done():
                    future.set_result(result)
            start = end

    async def kick(self, address: str, uid: str, sid: str) -> bool:
        """Ask the node at ``address`` to close session ``sid`` of ``uid`` (4001); True if it did."""
        answer = await self._call(address, "/internal/kick", {"uid": uid, "sid": sid})
        return bool(answer is not None and answer.get("closed"))

    async def _call(self, address: str, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout, headers={SECRET_HEADER: self._secret})
        try:
            async with self._session.post(
                f"http://{address}{path}", data=orjson.dumps(body), headers={"content-type": "application/json"}
            ) as response:
                if response.status != 200:
                    self._failed(address, path, f"answered {response.status}")
                    return None
                answer = orjson.loads(await response.read())
        except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError) as exc:
            self._failed(address, path, type(exc).__name__)
            return None
        failures = self._failing.pop(address, None)
        if failures is not None:
            log.info("internal forwards to %s answer again, after %d more failed calls", address, failures)
        return answer if isinstance(answer, dict) else None

    def _failed(self, address: str, path: str, reason: str) -> None:
        """Log the first failed call to ``address``; count the ones after it until it answers."""
        if address in self._failing:
            self._failing[address] += 1
            return
        log.warning(
            "internal %s to %s failed: %s (further failures to it are counted until it answers)", path, address, reason
        )
        self._failing[address] = 0
        if len(self._failing) > MAX_FAILING:
            del self._failing[next(iter(self._failing))]

    async def close(self) -> None:
        """Finish the forwards under way, then close the connection pool."""
        await asyncio.gather(*self._flushes, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
