"""The NodeRegistry of ``hongbao.core.ports`` on Redis (docs/architecture.md section 9): one
sorted set per region, ``fleet:{region}:nodes``, whose members are node URLs scored by the
moment their liveness lapses (ms, UTC). One key: the same on a single Redis and a cluster."""

from __future__ import annotations

from hongbao.core.adapters.redis.client import Pipelines, RedisPipeline, text
from hongbao.core.breaker import Breaker


def nodes_key(region: int) -> str:
    """The sorted set of region ``region``'s live nodes."""
    return f"fleet:{region}:nodes"


class RedisNodeRegistry:
    """NodeRegistry on ``fleet:{region}:nodes``, through the worker's ``breaker`` (while Redis is
    down a beat raises BreakerOpen at once: the caller keeps the live set it last saw)."""

    __slots__ = ("_pipes", "_breaker", "_key")

    def __init__(self, pipes: Pipelines, breaker: Breaker, region: int) -> None:
        self._pipes, self._breaker, self._key = pipes, breaker, nodes_key(region)

    async def beat(self, node_url: str, ttl_ms: int, now_ms: int) -> list[str]:
        """One pipeline: drop members lapsed at ``now_ms``, score ``node_url`` ``now_ms + ttl_ms``,
        read the members alive at ``now_ms``; their URLs sorted."""
        key = self._key

        def build(pipe: RedisPipeline) -> None:
            pipe.zremrangebyscore(key, "-inf", f"({now_ms}")
            pipe.zadd(key, {node_url: now_ms + ttl_ms})
            pipe.zrangebyscore(key, now_ms, "+inf")

        replies = await self._breaker.call(lambda: self._pipes.run(build))
        return sorted(text(member) for member in replies[2])

    async def leave(self, node_url: str) -> None:
        """ZREM ``node_url``."""
        await self._breaker.call(lambda: self._pipes.one(lambda pipe: pipe.zrem(self._key, node_url)))
