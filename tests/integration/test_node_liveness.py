"""A push node's heartbeat and sweep (server/node.py) against a real redis-server that freezes:
a store that was away makes no live node look dead, and a node that is really gone is still swept."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from hongbao.bench.services import redis_servers
from hongbao.core.adapters.redis.client import Pipelines, redis_client
from hongbao.core.adapters.redis.push import RedisSessionStore
from hongbao.core.adapters.redis.push_nodes import RedisNodeDirectory
from hongbao.core.push_ports import Route
from hongbao.server import node as node_module
from hongbao.server.node import Node

T0 = 1_700_000_000_000
TTL_S = 1.0


async def test_a_frozen_store_makes_no_live_node_dead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """redis-server stopped (SIGSTOP) for longer than the TTL: node B's liveness key lapses while
    B lives. Both beat every 0.2 s, but B's first heartbeat after the store resumes comes 0.5 s
    late (as a node whose breaker still holds its calls back): A must not sweep B's session
    meanwhile. Then B stops beating for good: A sweeps its session within a few TTLs."""
    monkeypatch.setattr(node_module, "HEARTBEAT_S", 0.2)
    (port,) = redis_servers.free_ports(1)
    process = redis_servers.start_on(tmp_path, port)
    client = redis_client(f"redis://127.0.0.1:{port}", cluster=False, socket_timeout_s=0.3)
    pipes = Pipelines(client)
    nodes, sessions = RedisNodeDirectory(pipes), RedisSessionStore(pipes, 600)
    a = Node("a/1", nodes, TTL_S, lambda ok: None)

    async def b_beats() -> None:
        while True:
            await nodes.heartbeat("b/2", "127.0.0.1:9002", TTL_S)
            await asyncio.sleep(node_module.HEARTBEAT_S)

    tasks: list[asyncio.Task[None]] = []
    try:
        assert await a.join("127.0.0.1:9001")
        await sessions.login("u1", "s1", "b/2", T0)
        tasks += [asyncio.create_task(b_beats()), asyncio.create_task(a.beat_forever())]
        await asyncio.sleep(2 * TTL_S)  # A steady: it sweeps from now on, and B lives
        assert await sessions.lookup("u1") == Route("b/2", "s1")
        tasks.pop(0).cancel()
        os.kill(process.pid, signal.SIGSTOP)
        await asyncio.sleep(1.5 * TTL_S)
        os.kill(process.pid, signal.SIGCONT)
        await asyncio.sleep(0.5)
        tasks.append(asyncio.create_task(b_beats()))  # B is back
        await asyncio.sleep(2 * TTL_S)
        assert await sessions.lookup("u1") == Route("b/2", "s1")
        tasks.pop().cancel()  # B is gone now
        for _ in range(50):
            await asyncio.sleep(0.1)
            if await sessions.online_count() == 0:
                break
        assert await sessions.online_count() == 0
        assert await client.smembers("nodes") == {b"a/1"}
    finally:
        for task in tasks:
            task.cancel()
        os.kill(process.pid, signal.SIGCONT)
        redis_servers.stop(process)
        await client.aclose()
