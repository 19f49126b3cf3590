"""One factory for the Redis clients of the production backend: ``redis.asyncio.Redis`` for a
single server, ``redis.asyncio.cluster.RedisCluster`` for a Redis Cluster (redis-py routes every
command by its key's slot; no slot map of our own). Both parse replies with hiredis (redis-py
picks its hiredis parser whenever the ``hiredis`` package is installed, a dependency of hongbao).

Everything else in hongbao codes against :data:`RedisClient` and uses only what both classes
offer: commands, ``pipeline(transaction=False)``, ``register_script`` / ``script_load``.

Failures: a dropped connection (CLIENT KILL, a restart) is retried on a fresh connection up to
:data:`RETRIES` times with exponential backoff and full jitter (capped at 0.25 s), so a blip costs
a retry, not an error; a Redis that stays down raises ``redis.exceptions.ConnectionError`` (or
``TimeoutError``) after about a second, never after minutes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError, NoScriptError, TimeoutError

#: The client type every Redis adapter takes: a single server or a cluster, one code path.
RedisClient = Redis | RedisCluster
#: A pipeline of either client.
RedisPipeline = Pipeline | ClusterPipeline

#: Retries of a command whose connection failed (each on a fresh connection).
RETRIES = 3
CONNECT_TIMEOUT_S = 1.0


def redis_client(url: str, *, cluster: bool, socket_timeout_s: float = 5.0, max_connections: int = 64) -> RedisClient:
    """A client for ``url`` (``redis://[user:password@]host:port[/db]`` or ``rediss://``): a
    ``RedisCluster`` that discovers the cluster from that one node when ``cluster`` is True,
    else a ``Redis`` with a pool of at most ``max_connections`` connections. No I/O here.

    A cluster client reads the topology on its first command (or ``await client.initialize()``,
    which both classes have): issue that one alone, before concurrent use -- with redis-py 8.1,
    commands racing the first discovery can fail on a half-made connection (seen with 60
    concurrent commands on a fresh client). ``socket_timeout_s`` bounds a reply's wait (seconds);
    blocking reads (XREAD BLOCK) must ask for less. Replies are bytes.
    Raises ValueError for a malformed URL."""
    retry = Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.25), RETRIES)
    errors: list[type[Exception]] = [ConnectionError, TimeoutError]
    if cluster:
        return RedisCluster.from_url(url, retry=retry, retry_on_error=errors, socket_timeout=socket_timeout_s,
                                     socket_connect_timeout=CONNECT_TIMEOUT_S, max_connections=max_connections)
    return Redis.from_url(url, retry=retry, retry_on_error=errors, socket_timeout=socket_timeout_s,
                          socket_connect_timeout=CONNECT_TIMEOUT_S, max_connections=max_connections)

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

    async def __call__(self, client: RedisClient, keys: Sequence[str], args: Sequence[str | int | bytes]) -> Any:
        """Run the script on the server holding ``keys``; returns its reply."""
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await client.script_load(self.text)
            return await client.evalsha(self.sha, len(keys), *keys, *args)

    def queue(self, pipe: RedisPipeline, keys: Sequence[str], args: Sequence[str | int | bytes]) -> None:
        """Add a run of the script to ``pipe`` (see :func:`pipelined` for NOSCRIPT). Through
        ``execute_command``: redis-py's cluster pipeline blocks its ``evalsha`` method because it
        cannot recover from NOSCRIPT on its own; ``pipelined`` does, and the command itself is
        routed by its key like any other."""
        pipe.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)


async def pipelined(client: RedisClient, build: Callable[[RedisPipeline], None], scripts: Sequence[LuaScript] = ()) -> list[Any]:
    """Run the commands ``build`` adds to a non-transactional pipeline in one round trip (one per
    server of a cluster, sent in parallel; redis-py routes each command by its key) and return
    their replies in order. The commands must be idempotent: when a server answers NOSCRIPT, the
    ``scripts`` are loaded and the whole pipeline runs once more. Raises the first error reply."""
    replies = await _execute(client, build)
    if scripts and any(isinstance(reply, NoScriptError) for reply in replies):
        for script in scripts:
            await client.script_load(script.text)
        replies = await _execute(client, build)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


async def _execute(client: RedisClient, build: Callable[[RedisPipeline], None]) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    build(pipe)
    replies: list[Any] = await pipe.execute(raise_on_error=False)
    return replies
