"""The shared level of the read caches on Redis (hongbao.core.view_cache.SharedViews): one hash
per entry, ``details:{<order_id>}`` or ``lists:{<user_id>}`` (hash tagged: every command touches
that one key, so a Redis Cluster never answers CROSSSLOT), holding

- ``g`` the entry's generation token (absent: ""), replaced by every bump;
- ``b:<field>`` a view's body and ``v:<field>`` the token it was stored under: the view is served
  only while ``v`` equals ``g``.

A read is one HMGET, a store one script (HSET + PEXPIRE), a bump one script (HSET + PEXPIRE),
all on the lean path of :class:`~hongbao.core.adapters.redis.client.Pipelines` (the commands of
one loop tick share a write) and the worker's Redis :class:`~hongbao.core.breaker.Breaker` (shared with the other
Redis adapters), so a dead Redis costs a read microseconds. A bump lost to an outage is sent again
with this worker's next read (counted as ``redis_views_lost_bumps`` in ``counts``); meanwhile the
shared TTL bounds what a Redis that kept its data could serve.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Sequence
from typing import Any

from hongbao.core.adapters.redis.client import LuaScript, Pipelines, text
from hongbao.core.breaker import Breaker, BreakerOpen, tally
from hongbao.core.view_cache import SHARED_TTL_MS

log = logging.getLogger("hongbao.redis_views")


class RedisViews:
    """SharedViews on Redis (see the module docstring); ``counts``: the worker's metrics events."""

    __slots__ = ("_pipes", "_breaker", "_counts", "_stale")

    def __init__(self, pipes: Pipelines, breaker: Breaker, counts: dict[str, int]) -> None:
        self._pipes, self._breaker, self._counts = pipes, breaker, counts
        self._stale: dict[str, str] = {}  # entries whose bump was lost -> the token to set

    async def get(self, entry: str, field: str) -> tuple[str, bytes | None]:
        """(the entry's token, the body under ``field`` stored with it, else None); bumps lost
        earlier go out first, in the same tick. Raises BreakerOpen while Redis is down."""
        stale, self._stale = self._stale, {}

        def read() -> Awaitable[list[Any]]:
            return asyncio.gather(
                *self._bumps(stale), self._pipes.command(entry, "HMGET", entry, "g", f"b:{field}", f"v:{field}")
            )

        try:
            replies = await self._breaker.call(read)
        except BreakerOpen:
            self._stale = stale | self._stale
            raise
        token, body, stored = replies[-1]
        token = "" if token is None else text(token)
        return token, body if stored is not None and text(stored) == token else None

    async def put(self, entry: str, field: str, token: str, body: bytes, ttl_ms: int) -> None:
        """Store ``body`` under ``field`` with ``token``; the entry lives ``ttl_ms``. Raises BreakerOpen."""
        await self._breaker.call(lambda: self._pipes.script(_PUT, [entry], [field, body, token, ttl_ms]))

    async def bump(self, entries: Sequence[str]) -> None:
        """A fresh token for each entry (the commands of one tick); never raises: a lost bump is
        kept to be sent again and counted."""
        tokens = {entry: os.urandom(6).hex() for entry in entries}
        try:
            await self._breaker.call(lambda: asyncio.gather(*self._bumps(tokens)))
        except Exception as exc:  # BreakerOpen, or a bug: the write stands, the cache is repaired
            if not isinstance(exc, BreakerOpen):
                log.exception("view cache bump of %d entries failed", len(tokens))
            self._stale |= tokens
            tally(self._counts, "redis_views_lost_bumps", len(tokens))

    def _bumps(self, tokens: dict[str, str]) -> list[Awaitable[Any]]:
        """One bump script per entry (each on the lean path)."""
        return [self._pipes.script(_BUMP, [entry], [token, SHARED_TTL_MS]) for entry, token in tokens.items()]


#: KEYS the entry. ARGV the new token, the TTL (ms).
_BUMP = LuaScript("redis.call('HSET', KEYS[1], 'g', ARGV[1])\nreturn redis.call('PEXPIRE', KEYS[1], ARGV[2])")
#: KEYS the entry. ARGV the field, the body, its token, the TTL (ms).
_PUT = LuaScript(
    "redis.call('HSET', KEYS[1], 'b:' .. ARGV[1], ARGV[2], 'v:' .. ARGV[1], ARGV[3])\n"
    "return redis.call('PEXPIRE', KEYS[1], ARGV[4])"
)
