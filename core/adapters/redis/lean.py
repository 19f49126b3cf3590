"""The lean path of the hot Redis commands: one connection per server on a plain asyncio
Protocol, RESP2 requests packed and replies parsed by hiredis (``pack_command``, ``Reader``)
(https://redis.io/docs/latest/develop/reference/protocol-spec/). redis-py spends ~70 µs of CPU on a
command (pipeline objects, packing, connection checkout); this path spends a few.

- Auto-pipelining: the commands sent during one event-loop tick leave in ONE ``transport.write``
  per server; Redis answers a connection's commands in the order it read them, so replies are
  matched to their futures first in, first out.
- Errors: an error reply becomes redis-py's exception for it (``redis.exceptions.ResponseError``,
  ``NoScriptError``, ``MovedError``, ``AskError``...: redis-py's own parser table), a lost or
  refused connection ``redis.exceptions.ConnectionError``, a server silent for ``timeout_s`` with
  commands waiting ``redis.exceptions.TimeoutError`` (the connection is dropped). The next command
  after a failure connects again; nothing is retried here (callers fall back to redis-py, which
  retries, refreshes a cluster's topology and loads scripts).
- Redis Cluster: one connection per primary, a command routed by its key's hash slot (CRC16 of
  the key's hash tag, mod 16384: Redis cluster specification, "Key distribution model") through the
  slot map redis-py's ``RedisCluster`` keeps (``nodes_manager.slots_cache``, refreshed by redis-py on
  MOVED); a slot redis-py does not know yet has no lean route.

Not for TLS or credential providers (:func:`lean_for` returns None: redis-py only).
"""

from __future__ import annotations

import asyncio
import binascii
from collections import deque
from collections.abc import Sequence
from typing import Any, cast

import hiredis
from redis._parsers.base import BaseParser
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.exceptions import ConnectionError, TimeoutError

Arg = bytes | str | int
SLOTS = 16384
CONNECT_TIMEOUT_S = 1.0


def encode(args: Sequence[Arg]) -> bytes:
    """One RESP2 request: an array of bulk strings (str as UTF-8, int in decimal), packed by
    ``hiredis.pack_command`` (C, the packer redis-py itself uses when hiredis is installed).
    Raises TypeError for an argument of another type."""
    return cast(bytes, hiredis.pack_command(tuple(args)))  # type: ignore[arg-type]  # its stub: a 1-tuple


def bulk(arg: str) -> bytes:
    """One RESP2 bulk string ``$<length>\r\n<data>\r\n`` of ``arg`` as UTF-8: a piece of a request
    assembled from pieces encoded once (a hot command whose fixed arguments are kept encoded:
    0.83 us for the grab's HMGET against 1.28 for :func:`encode` of the whole command)."""
    data = arg.encode()
    return b"$%d\r\n%b\r\n" % (len(data), data)


def key_slot(key: bytes) -> int:
    """The hash slot of ``key`` in [0, 16384): CRC16 (XMODEM) of the part between the first ``{``
    and the next ``}`` when that part is not empty, else of the whole key (cluster spec)."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return binascii.crc_hqx(key, 0) % SLOTS


class LeanConnection(asyncio.Protocol):
    """One connection to the server at ``address`` ((host, port) or a Unix socket path), opened
    on the first command; ``handshake``: encoded commands (AUTH, SELECT) sent first on every connect;
    ``timeout_s``: the longest silence while replies are due (seconds)."""

    def __init__(self, address: tuple[str, int] | str, handshake: Sequence[bytes], timeout_s: float) -> None:
        self.address, self._handshake, self._timeout_s = address, handshake, timeout_s
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._out: list[bytes] = []
        self._pending: deque[asyncio.Future[Any] | None] = deque()  # None: a handshake reply
        self._reader = _reader()
        self._flushing = False
        self._timer: asyncio.TimerHandle | None = None
        self._heard = 0.0  # loop time of the last reply, or of the first command after a quiet spell
        self._timed_out = False

    def send(self, request: bytes) -> asyncio.Future[Any]:
        """Queue one encoded request; its reply (or error) arrives in the returned future."""
        future = self._loop.create_future()
        if not self._pending:
            self._heard = self._loop.time()
        self._pending.append(future)
        self._out.append(request)
        if self._transport is None:
            if self._connecting is None:
                self._connecting = self._loop.create_task(self._connect())
        elif not self._flushing:
            self._flushing = True
            self._loop.call_soon(self._flush)
        return future

    def close(self) -> None:
        """Drop the connection; waiting commands fail with ConnectionError."""
        if self._connecting is not None:
            self._connecting.cancel()
            self._fail(ConnectionError(f"connection to {self.address} closed"))
        if self._transport is not None:
            self._transport.close()

    async def _connect(self) -> None:
        try:
            if isinstance(self.address, str):
                made = self._loop.create_unix_connection(lambda: self, self.address)
            else:
                made = self._loop.create_connection(lambda: self, *self.address)
            await asyncio.wait_for(made, CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            self._fail(ConnectionError(f"connecting to {self.address}: {exc!r}"))
        finally:
            self._connecting = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport, self._timed_out = cast(asyncio.Transport, transport), False  # uvloop's are no subclasses
        if self._handshake:
            self._pending.extendleft([None] * len(self._handshake))
            self._out[:0] = self._handshake
        self._flush()

    def _flush(self) -> None:
        self._flushing = False
        if self._transport is None or self._transport.is_closing() or not self._out:
            return  # connection_lost fails the commands of a closing transport
        self._transport.write(b"".join(self._out))
        self._out.clear()
        if self._timer is None:
            self._timer = self._loop.call_later(self._timeout_s, self._watch)

    def _watch(self) -> None:
        self._timer = None
        if not self._pending or self._transport is None:
            return
        quiet = self._loop.time() - self._heard
        if quiet >= self._timeout_s:
            self._timed_out = True
            self._transport.abort()
        else:
            self._timer = self._loop.call_later(self._timeout_s - quiet, self._watch)

    def data_received(self, data: bytes) -> None:
        self._heard = self._loop.time()
        self._reader.feed(data)
        pending = self._pending
        try:
            while (reply := self._reader.gets()) is not False:
                future = pending.popleft()
                if future is None:
                    if isinstance(reply, Exception):  # AUTH or SELECT refused
                        raise reply
                elif future.done():  # the caller gave up (cancelled)
                    continue
                elif isinstance(reply, Exception):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)
        except Exception as exc:  # a protocol error, a reply nobody asked for, a refused handshake
            assert self._transport is not None
            self._transport.abort()
            self._fail(ConnectionError(f"{self.address}: {exc!r}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        error = (
            TimeoutError(f"{self.address}: no reply for {self._timeout_s} s")
            if self._timed_out
            else ConnectionError(f"connection to {self.address} lost: {exc!r}")
        )
        self._fail(error)

    def _fail(self, error: Exception) -> None:
        pending, self._pending, self._out = self._pending, deque(), []
        self._reader = _reader()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for future in pending:
            if future is not None and not future.done():
                future.set_exception(error)


def _reader() -> hiredis.Reader:
    return hiredis.Reader(replyError=BaseParser.parse_error)


class LeanRedis:
    """The lean connections of one redis-py client (a ``Redis`` or a ``RedisCluster``): the same
    server(s), credentials and database; made by :func:`lean_for`. Bound to the event loop of its
    first command."""

    __slots__ = ("_nodes", "_address", "_handshake", "_timeout_s", "_single", "_by_node")

    def __init__(self, client: Redis | RedisCluster, kwargs: dict[str, Any]) -> None:
        self._timeout_s = float(kwargs.get("socket_timeout") or 5.0)
        self._nodes = (
            client.nodes_manager if isinstance(client, RedisCluster) else None
        )  # its slot map, refreshed on MOVED
        self._address: tuple[str, int] | str | None = None  # a single server's
        if self._nodes is None:
            self._address = kwargs["path"] if "path" in kwargs else (kwargs["host"], int(kwargs["port"]))
        password, username, db = kwargs.get("password"), kwargs.get("username"), int(kwargs.get("db") or 0)
        auth = (
            []
            if password is None
            else [encode(("AUTH", password) if username is None else ("AUTH", username, password))]
        )
        self._handshake = auth + ([encode(("SELECT", db))] if db else [])
        self._single: LeanConnection | None = None
        self._by_node: dict[str, LeanConnection] = {}

    def send(self, key: str, args: Sequence[Arg]) -> asyncio.Future[Any] | None:
        """Send the command ``args`` whose (first) key is ``key``; its reply arrives in the returned
        future. None when there is no lean route (a cluster slot redis-py has not mapped yet)."""
        return self.send_request(key, encode(args))

    def send_request(self, key: str, request: bytes) -> asyncio.Future[Any] | None:
        """:meth:`send` for a request already encoded (RESP2, e.g. by :func:`encode`)."""
        connection = self._single
        if self._nodes is not None:
            nodes = self._nodes.slots_cache.get(key_slot(key.encode()))
            if not nodes:
                return None
            connection = self._by_node.get(nodes[0].name)
            if connection is None:
                connection = self._by_node[nodes[0].name] = LeanConnection(
                    (nodes[0].host, int(nodes[0].port)), self._handshake, self._timeout_s
                )
        elif connection is None:
            assert self._address is not None
            connection = self._single = LeanConnection(self._address, self._handshake, self._timeout_s)
        return connection.send(request)

    def close(self) -> None:
        """Close every connection (commands still waiting fail with ConnectionError)."""
        for connection in [self._single, *self._by_node.values()]:
            if connection is not None:
                connection.close()


def lean_for(client: Redis | RedisCluster) -> LeanRedis | None:
    """The lean path of ``client``; None when it needs what the lean path lacks (TLS, a
    credential provider)."""
    if isinstance(client, RedisCluster):
        kwargs = client.nodes_manager.connection_kwargs
    else:
        kwargs = client.connection_pool.connection_kwargs
        if client.connection_pool.connection_class not in (Connection, UnixDomainSocketConnection):
            return None
    if kwargs.get("connection_class", Connection) is not Connection or kwargs.get("credential_provider") is not None:
        return None
    return LeanRedis(client, kwargs)
