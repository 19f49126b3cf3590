"""The fleet's node registry on a real Redis, single and cluster (docs/architecture.md section 9),
and a worker's view of it (server/fleet.py): who is live, who owns a packet, what a Redis outage
and an unanswered relay do to ownership."""

from __future__ import annotations

import pytest
from hongbao.bench.services.redis_servers import RedisTarget
from hongbao.core.adapters.redis.client import Pipelines
from hongbao.core.adapters.redis.fleet import RedisNodeRegistry
from hongbao.core.adapters.redis.state import REDIS_DOWN
from hongbao.core.breaker import Breaker, BreakerOpen
from hongbao.server.fleet import Fleet
from hongbao_native import node_of
from redis.exceptions import ConnectionError

A, B, C = "http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"


async def test_nodes_are_live_until_their_beats_lapse_and_leave_at_once(redis_target: RedisTarget) -> None:
    """Beats keep a node in its region's set for its TTL; a lapsed one is dropped by the next
    beat; ``leave`` removes one at once; regions do not see each other."""
    redis_target.flush()
    async with redis_target.connect() as client:
        north = RedisNodeRegistry(Pipelines(client), Breaker("redis", REDIS_DOWN, {}), 1)
        south = RedisNodeRegistry(Pipelines(client), Breaker("redis", REDIS_DOWN, {}), 2)
        assert await north.beat(B, 3000, 1_000) == [B]
        assert await north.beat(A, 3000, 2_000) == [A, B]
        assert await south.beat(C, 3000, 2_000) == [C]
        assert await north.beat(A, 3000, 4_500) == [A]  # B lapsed at 4 000
        await north.beat(B, 3000, 4_500)
        await north.leave(A)
        assert await north.beat(B, 3000, 4_600) == [B]


async def test_a_worker_keeps_its_fleet_through_a_redis_outage_and_skips_a_silent_owner(
    redis_standalone: RedisTarget,
) -> None:
    """Ownership is jump hash over the live URLs, sorted; while Redis is down the last set seen
    holds (nothing moves); an owner that did not answer is skipped and its packets go to the
    others until the TTL ends, and a node knowing no other node owns everything."""
    redis_standalone.flush()
    now = [0.0]
    async with redis_standalone.connect() as client:
        breaker = Breaker("redis", REDIS_DOWN, {}, now=lambda: now[0])
        registry = RedisNodeRegistry(Pipelines(client), breaker, 1)
        here = Fleet(A, registry, ttl_s=3.0)
        await here.beat()
        assert here.live == (A,) and here.owner("2251130100000000001") is None  # alone: all local
        await RedisNodeRegistry(Pipelines(client), Breaker("redis", REDIS_DOWN, {}), 1).beat(B, 3000, 10**13)
        await here.beat()
        assert here.live == (A, B)
        orders = [f"22511301{n:011}" for n in range(200)]
        owners = {o: (A, B)[node_of(o, 2)] for o in orders}
        assert {here.owner(o) for o in orders if owners[o] == B} == {B}
        assert {here.owner(o) for o in orders if owners[o] == A} == {None}

        async def down() -> None:
            raise ConnectionError("down")

        for _ in range(2):
            with pytest.raises(BreakerOpen):
                await breaker.call(down)
        await here.beat()  # refused at once: the set stays
        assert here.live == (A, B)
        here.skip(B)
        assert here.live == (A,) and {here.owner(o) for o in orders} == {None}
