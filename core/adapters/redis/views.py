"""The shared level of the read caches on Redis (hongbao.core.view_cache.SharedViews): one hash
per entry, ``details:{<order_id>}`` or ``lists:{<user_id>}`` (hash tagged: every command touches
that one key, so a Redis Cluster never answers CROSSSLOT), holding

- ``g`` the entry's generation token (absent: ""), replaced by every bump;
- ``b:<field>`` a view's body and ``v:<field>`` the token it was stored under: the view is served
  only while ``v`` equals ``g``.

A read is one HMGET, a store one HSET + PEXPIRE, a bump one HSET + PEXPIRE, all through
:class:`~hongbao.core.adapters.redis.client.Pipelines` (the commands of one loop tick share a
pipeline) and the worker's Redis :class:`~hongbao.core.breaker.Breaker` (shared with the other
Redis adapters), so a dead Redis costs a read microseconds. A bump lost to an outage is sent again
with this worker's next read (counted as ``redis_views_lost_bumps`` in ``counts``); meanwhile the
shared TTL bounds what a Redis that kept its data could serve.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from hongbao.core.adapters.redis.client import Pipelines, RedisPipeline, text
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
        earlier go out first. Raises BreakerOpen while Redis is down."""
        stale, self._stale = self._stale, {}

        def build(pipe: RedisPipeline) -> None:
            _bump(pipe, stale)
            pipe.hmget(entry, "g", f"b:{field}", f"v:{field}")

        try:
            replies = await self._breaker.call(lambda: self._pipes.run(build))
        except BreakerOpen:
            self._stale = stale | self._stale
            raise
        token, body, stored = replies[-1]
        token = "" if token is None else text(token)
        return token, body if stored is not None and text(stored) == token else None

    async def put(self, entry: str, field: str, token: str, body: bytes, ttl_ms: int) -> None:
        """Store ``body`` under ``field`` with ``token``; the entry lives ``ttl_ms``. Raises BreakerOpen."""

        def build(pipe: RedisPipeline) -> None:
            pipe.hset(entry, mapping={f"b:{field}": body, f"v:{field}": token})
            pipe.pexpire(entry, ttl_ms)

        await self._breaker.call(lambda: self._pipes.run(build))

    async def bump(self, entries: Sequence[str]) -> None:
        """A fresh token for each entry (one pipeline); never raises: a lost bump is kept to be
        sent again and counted."""
        tokens = {entry: os.urandom(6).hex() for entry in entries}
        try:
            await self._breaker.call(lambda: self._pipes.run(lambda pipe: _bump(pipe, tokens)))
        except Exception as exc:  # BreakerOpen, or a bug: the write stands, the cache is repaired
            if not isinstance(exc, BreakerOpen):
                log.exception("view cache bump of %d entries failed", len(tokens))
            self._stale |= tokens
            tally(self._counts, "redis_views_lost_bumps", len(tokens))


def _bump(pipe: RedisPipeline, tokens: dict[str, str]) -> None:
    for entry, token in tokens.items():
        pipe.hset(entry, "g", token)
        pipe.pexpire(entry, SHARED_TTL_MS)
