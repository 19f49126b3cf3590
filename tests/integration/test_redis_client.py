"""The Redis client factory and the tick-coalescing Pipelines every adapter sends through, against a
real standalone Redis and a real 3-master cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hongbao.bench.services.redis_servers import RedisTarget
from hongbao.core.adapters.redis.client import Build, Pipelines
from redis._parsers.hiredis import _AsyncHiredisParser
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError


async def test_client_parses_with_hiredis(redis_target: RedisTarget) -> None:
    """The factory's clients parse replies with hiredis, standalone and cluster alike."""
    async with redis_target.connect() as client:
        assert await client.ping()
        connections: list[Any] = (
            [conn for node in client.get_nodes() for conn in node._connections]
            if isinstance(client, RedisCluster)
            else client.connection_pool._available_connections
        )
        assert connections
        assert {type(conn._parser) for conn in connections} == {_AsyncHiredisParser}


async def test_concurrent_callers_share_one_pipeline(redis_target: RedisTarget) -> None:
    """1000 concurrent callers each get their own replies while the server sees one or two new connections per node."""
    async with redis_target.connect() as client:
        pipes = Pipelines(client)
        assert await pipes.one(lambda pipe: pipe.set("{k}warm", 1))
        before = redis_target.connected_clients()

        def build(i: int) -> Build:
            return lambda pipe: (pipe.incr("{k}n"), pipe.set(f"{{k}}{i}", i))

        replies = await asyncio.gather(*(pipes.run(build(i)) for i in range(1000)))
        assert sorted(int(counter) for counter, _ in replies) == list(range(1, 1001))
        assert redis_target.connected_clients() - before <= 2 * len(redis_target.ports)


async def test_a_callers_error_stays_its_own(redis_target: RedisTarget) -> None:
    """A caller whose command fails gets that error; callers batched with it get their replies."""
    async with redis_target.connect() as client:
        pipes = Pipelines(client)
        await pipes.one(lambda pipe: pipe.set("{k}s", "text"))
        results: tuple[Any, ...] = await asyncio.gather(
            pipes.one(lambda pipe: pipe.get("{k}s")), pipes.one(lambda pipe: pipe.incr("{k}s")), return_exceptions=True
        )
        assert results[0] == b"text"
        assert isinstance(results[1], ResponseError)
        with pytest.raises(ResponseError):
            await pipes.one(lambda pipe: pipe.lpush("{k}s", 1))
