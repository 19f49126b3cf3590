"""One factory for the Redis clients of the production backend: ``redis.asyncio.Redis`` for a
single server, ``redis.asyncio.cluster.RedisCluster`` for a Redis Cluster (redis-py routes every
command by its key's slot; no slot map of our own). Both parse replies with hiredis (redis-py
picks its hiredis parser whenever the ``hiredis`` package is installed, a dependency of hongbao).

Everything else in hongbao codes against :data:`RedisClient` and uses only what both classes
offer (commands, pipelines, ``script_load``), through :class:`Pipelines`, which coalesces the
commands of concurrent callers into one pipeline per event-loop tick, and sends the hot ones
(scripts, :meth:`Pipelines.command`) on the lean path of core/adapters/redis/lean.py instead of
redis-py's, falling back to redis-py when that path cannot answer.

Failures: a dropped connection (CLIENT KILL, a restart) is retried on a fresh connection up to
:data:`RETRIES` times with exponential backoff and full jitter (capped at 0.25 s), so a blip costs
a retry, not an error; a reply that does not come within the socket timeout (a frozen server:
the worker's ``redis_timeout_ms``, 250 ms by default) raises ``redis.exceptions.TimeoutError`` at
once, without a retry (a server that did not answer one command will not answer the next), so
the breaker of the caller opens within a fraction of a second.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

from hongbao.core.adapters.redis.lean import Arg, key_slot, lean_for
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import AskError, ConnectionError, MovedError, NoScriptError

#: The client type every Redis adapter takes: a single server or a cluster, one code path.
RedisClient = Redis | RedisCluster
#: A pipeline of either client.
RedisPipeline = Pipeline | ClusterPipeline

#: Retries of a command whose connection failed (each on a fresh connection).
RETRIES = 3
CONNECT_TIMEOUT_S = 1.0
#: The default bound of one reply (seconds): the request path's; blocking reads need a client of their own.
SOCKET_TIMEOUT_S = 0.25
#: Lean-path failures the redis-py path recovers from (it refreshes a cluster's topology on MOVED,
#: follows ASK, loads scripts, retries on fresh connections): the command is sent again through it.
LEAN_FALLBACK = (MovedError, AskError, NoScriptError, ConnectionError)


def redis_client(
    url: str, *, cluster: bool, socket_timeout_s: float = SOCKET_TIMEOUT_S, max_connections: int = 64
) -> RedisClient:
    """A client for ``url`` (``redis://[user:password@]host:port[/db]`` or ``rediss://``): a
    ``RedisCluster`` that discovers the cluster from that one node when ``cluster`` is True,
    else a ``Redis`` with a pool of at most ``max_connections`` connections. No I/O here.

    A cluster client reads the topology on its first command (or ``await client.initialize()``,
    which both classes have): issue that one alone, before concurrent use -- with redis-py 8.1,
    commands racing the first discovery can fail on a half-made connection (seen with 60
    concurrent commands on a fresh client). ``socket_timeout_s`` bounds a reply's wait (seconds; a
    connect's is CONNECT_TIMEOUT_S); blocking reads (XREAD BLOCK) must ask for less, or use a
    client with a longer bound. Only a lost connection is retried (RETRIES times). Replies are bytes.
    Raises ValueError for a malformed URL."""
    retry = Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.25), RETRIES, supported_errors=(ConnectionError,))
    options: dict[str, Any] = {
        "retry": retry,
        "retry_on_error": [ConnectionError],
        "socket_timeout": socket_timeout_s,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "max_connections": max_connections,
    }
    return RedisCluster.from_url(url, **options) if cluster else Redis.from_url(url, **options)


def text(reply: bytes | str) -> str:
    """A bulk-string reply as text (replies are bytes: clients are made without decoding)."""
    return reply.decode() if isinstance(reply, bytes) else reply


class LuaScript:
    """A Lua script run with EVALSHA by its SHA-1 ``sha``; loaded (SCRIPT LOAD, on every primary
    of a cluster) whenever a server answers NOSCRIPT, e.g. after a restart or SCRIPT FLUSH.

    Cluster rule: a script touches only the keys it is given, all in one slot (one hash tag)."""

    __slots__ = ("sha", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.sha = hashlib.sha1(text.encode()).hexdigest()

    def command(self, keys: Sequence[str], args: Sequence[str | int | bytes]) -> tuple[Arg, ...]:
        """The EVALSHA command (its words, as ``Pipelines.command`` and ``commands`` take them) of
        one run on ``keys`` with ``args``: ``EVALSHA sha numkeys key... arg...`` (Redis EVALSHA)."""
        return ("EVALSHA", self.sha, len(keys), *keys, *args)

    def queue(self, pipe: RedisPipeline, keys: Sequence[str], args: Sequence[str | int | bytes]) -> None:
        """Add a run of the script to ``pipe`` (see :class:`Pipelines` for NOSCRIPT). Through
        ``execute_command``: redis-py's cluster pipeline blocks its ``evalsha`` method because it
        cannot recover from NOSCRIPT on its own; ``Pipelines`` does, and the command itself is
        routed by its key like any other."""
        pipe.execute_command(*self.command(keys, args))


#: Adds a caller's commands to a pipeline (what it returns is ignored).
Build = Callable[[RedisPipeline], object]


class Pipelines:
    """The way the Redis adapters send commands to ``client``: every pipeline asked for during
    one event-loop tick goes out as ONE non-transactional pipeline (auto-pipelining: one round
    trip per server of a cluster, sent in parallel; one connection instead of one per caller, so
    a burst of 1000 logins neither needs 1000 connections nor pays redis-py's per-command cost
    1000 times). Each caller gets back the replies of its own commands, in order.

    Commands must be idempotent: a caller whose replies hold a NOSCRIPT has the scripts of its
    call loaded and its commands sent once more (the other callers' replies stand).

    Scripts and :meth:`command` take the lean path first (the commands of one tick in one write
    per server, a few µs of CPU each instead of redis-py's ~70); a reply in ``LEAN_FALLBACK`` (a
    dropped connection, MOVED, ASK, NOSCRIPT) sends the command again through the pipeline above.
    TLS clients use redis-py only."""

    __slots__ = ("client", "_batch", "_sending", "_lean")

    def __init__(self, client: RedisClient) -> None:
        self.client = client
        self._lean = lean_for(client)
        self._batch: list[_Call] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def run(self, build: Build, scripts: Sequence[LuaScript] = ()) -> list[Any]:
        """The replies of the commands ``build`` adds (``scripts``: the Lua scripts it runs).
        Raises the first error reply among them, or the error that failed the whole pipeline
        (e.g. ``redis.exceptions.ConnectionError`` once redis-py's retries are spent)."""
        loop = asyncio.get_running_loop()
        if not self._batch:
            loop.call_soon(self._flush)
        call = _Call(build, scripts, loop.create_future())
        self._batch.append(call)
        return await call.future

    async def one(self, build: Build) -> Any:
        """The reply of the one command ``build`` adds."""
        return (await self.run(build))[0]

    async def script(self, script: LuaScript, keys: Sequence[str], args: Sequence[str | int | bytes]) -> Any:
        """The reply of one run of ``script`` on ``keys`` with ``args`` (raises its error reply)."""
        return await self._lean_first(keys[0] if keys else None, script.command(keys, args), (script,))

    async def command(self, key: str, *args: Arg) -> Any:
        """The raw reply (bytes, int, list, None: no redis-py response callback) of the command
        ``args`` whose first key is ``key``, e.g. ``command(k, "HMGET", k, "a", "b")``. Raises its
        error reply as redis-py's exception for it."""
        return await self._lean_first(key, args, ())

    async def scripts(
        self, script: LuaScript, calls: Sequence[tuple[Sequence[str], Sequence[str | int | bytes]]]
    ) -> list[Any]:
        """The replies of one run of ``script`` per (keys, args) of ``calls``, in order: what as many
        ``script`` calls gathered at once give, without a Task each (raises the first error reply)."""
        return await self.commands(
            [(keys[0] if keys else None, script.command(keys, args)) for keys, args in calls],
            (script,),
        )

    async def commands(
        self, calls: Sequence[tuple[str | None, Sequence[Arg]]], scripts: Sequence[LuaScript] = ()
    ) -> list[Any]:
        """The raw replies of the commands of ``calls`` (first key, args), in order, as ``command``
        gives each (``scripts``: those they run): sent on the lean path together and awaited as
        plain futures; those it cannot take, or that meet a ``LEAN_FALLBACK`` reply, go once more
        through one pipeline. Raises the first error reply."""
        futures = [None if self._lean is None or key is None else self._lean.send(key, args) for key, args in calls]
        sent = [future for future in futures if future is not None]
        answers = iter(await asyncio.gather(*sent, return_exceptions=True) if sent else ())
        replies: list[Any] = [None if future is None else next(answers) for future in futures]
        again = [
            i
            for i, (f, r) in enumerate(zip(futures, replies, strict=True))
            if f is None or isinstance(r, LEAN_FALLBACK)
        ]
        if again:

            def build(pipe: RedisPipeline) -> None:
                for i in again:
                    pipe.execute_command(*calls[i][1])

            for i, reply in zip(again, await self.run(build, scripts), strict=True):
                replies[i] = reply
        error = next((reply for reply in replies if isinstance(reply, BaseException)), None)
        if error is not None:
            raise error
        return replies

    def slot_groups(self, keys: Sequence[str], most: int) -> list[list[int]]:
        """The positions of ``keys`` in groups of at most ``most`` (``most`` >= 1), each group's
        keys such that one script may be given them all: on a single server any keys, in their
        order; on a cluster keys of one hash slot (``key_slot``: their hash tags), in order within
        a slot, the slots in the order of their first key. Raises ValueError when ``most`` < 1."""
        slots: dict[int, list[int]] = {}
        cluster = isinstance(self.client, RedisCluster)
        for i, key in enumerate(keys):
            slots.setdefault(key_slot(key.encode()) if cluster else 0, []).append(i)
        return [group[at : at + most] for group in slots.values() for at in range(0, len(group), most)]

    def lean_request(self, key: str, request: bytes) -> asyncio.Future[Any] | None:
        """Send one encoded command (RESP2, hongbao.core.adapters.redis.lean; first key ``key``) on
        the lean path only: the future of its raw reply, or None when there is no lean route (TLS,
        a cluster slot not mapped yet). The future's error is not retried: on any, callers take
        :meth:`command`."""
        return None if self._lean is None else self._lean.send_request(key, request)

    def close(self) -> None:
        """Close the lean connections (the redis-py client is its owner's to close)."""
        if self._lean is not None:
            self._lean.close()

    async def _lean_first(self, key: str | None, args: Sequence[Arg], scripts: Sequence[LuaScript]) -> Any:
        future = None if self._lean is None or key is None else self._lean.send(key, args)
        if future is not None:
            try:
                return await future
            except LEAN_FALLBACK:
                pass
        return (await self.run(lambda pipe: pipe.execute_command(*args), scripts))[0]

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[_Call]) -> None:
        try:
            replies = await self._execute(batch)
            stale = [i for i, own in enumerate(replies) if any(isinstance(reply, NoScriptError) for reply in own)]
            if stale:
                for script in {script.sha: script for i in stale for script in batch[i].scripts}.values():
                    await self.client.script_load(script.text)
                for i, own in zip(stale, await self._execute([batch[i] for i in stale]), strict=True):
                    replies[i] = own
        except Exception as exc:
            for call in batch:
                if not call.future.done():
                    call.future.set_exception(exc)
            return
        for call, own in zip(batch, replies, strict=True):
            if call.future.done():  # the caller gave up (cancelled)
                continue
            error = next((reply for reply in own if isinstance(reply, Exception)), None)
            if error is None:
                call.future.set_result(own)
            else:
                call.future.set_exception(error)

    async def _execute(self, batch: list[_Call]) -> list[list[Any]]:
        pipe = self.client.pipeline(transaction=False)
        bounds = [0]
        for call in batch:
            call.build(pipe)
            bounds.append(len(pipe))
        replies: list[Any] = await pipe.execute(raise_on_error=False) if bounds[-1] else []
        return [replies[start:end] for start, end in pairwise(bounds)]


class _Call:
    __slots__ = ("build", "scripts", "future")

    def __init__(self, build: Build, scripts: Sequence[LuaScript], future: asyncio.Future[list[Any]]) -> None:
        self.build, self.scripts, self.future = build, scripts, future
