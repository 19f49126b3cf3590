"""The Redis NodeDirectory of ``hongbao.core.push_ports``: ``node:{node}`` liveness keys (the
node's internal address, with a short TTL), the ``nodes`` work list, and the sweep that removes
the sessions of nodes whose liveness expired through each node's ``nodesessions:{node}`` index
(keys: ``push``)."""

from __future__ import annotations

import logging

from hongbao.core.adapters.redis.client import Pipelines, RedisPipeline, text
from hongbao.core.adapters.redis.push import (
    NODES_KEY,
    SWEEP_BATCH,
    node_key,
    node_sessions_key,
    remove_sessions,
    route_key,
)

log = logging.getLogger("hongbao.redis_push")


class RedisNodeDirectory:
    """NodeDirectory on Redis: ``node:{node}`` liveness keys, the ``nodes`` work list, and the
    sweep of the sessions of nodes whose liveness expired."""

    __slots__ = ("_own_cursor", "_pipes")

    def __init__(self, pipes: Pipelines) -> None:
        self._pipes = pipes
        self._own_cursor = 0  # where the prune of the sweeping node's own index stands

    async def heartbeat(self, node: str, address: str, ttl_s: float) -> None:
        """``node:{node}`` = ``address`` for ``ttl_s`` seconds, and ``node`` in the work list."""

        def build(pipe: RedisPipeline) -> None:
            pipe.set(node_key(node), address, px=max(1, int(ttl_s * 1000)))
            pipe.sadd(NODES_KEY, node)

        await self._pipes.run(build)

    async def address(self, node: str) -> str | None:
        """The internal address of a live ``node``, or None."""
        key = node_key(node)
        value = await self._pipes.command(key, "GET", key)
        return None if value is None else text(value)

    async def sweep(self, alive_node: str) -> int:
        """Remove every session held by a node (other than ``alive_node``) whose liveness key is
        gone: compare-and-delete of its session key, its route, its online entry (kept when a
        newer session holds the user), its index entry; then the node leaves the work list.
        Then prune one page (``SWEEP_BATCH``) of ``alive_node``'s own index: a session whose
        route expired (its logout failed, e.g. while Redis was away) is removed the same way, so
        no online entry outlives its session. Idempotent, safe on several nodes at once.
        Returns the sessions removed."""
        nodes = [text(member) for member in await self._pipes.one(lambda pipe: pipe.smembers(NODES_KEY))]
        nodes = [node for node in nodes if node != alive_node]

        def build(pipe: RedisPipeline) -> None:
            for node in nodes:
                pipe.exists(node_key(node))

        alive = await self._pipes.run(build) if nodes else []
        removed = 0
        for node, is_alive in zip(nodes, alive, strict=True):
            if not is_alive:
                removed += await self._sweep_node(node)
        return removed + await self._prune(alive_node)

    async def leave(self, node: str) -> None:
        """Delete ``node:{node}`` at once; the node stays in the work list until swept."""
        await self._pipes.one(lambda pipe: pipe.delete(node_key(node)))

    async def _sweep_node(self, node: str) -> int:
        index = node_sessions_key(node)
        removed = 0
        cursor = 0
        while True:

            def scan(pipe: RedisPipeline, cursor: int = cursor) -> None:
                pipe.hscan(index, cursor, count=SWEEP_BATCH)

            cursor, page = await self._pipes.one(scan)
            assert isinstance(page, dict)
            pairs = [(text(sid), text(uid)) for sid, uid in page.items()]
            if pairs:
                removed += sum(1 for verdict in await remove_sessions(self._pipes, node, pairs) if verdict == 1)
            if cursor == 0:
                break

        def left(pipe: RedisPipeline) -> None:
            pipe.exists(index)
            pipe.exists(node_key(node))

        if not any(await self._pipes.run(left)):
            await self._pipes.one(lambda pipe: pipe.srem(NODES_KEY, node))
        log.info("swept %d session(s) of dead node %s", removed, node)
        return removed

    async def _prune(self, node: str) -> int:
        index, cursor = node_sessions_key(node), self._own_cursor
        self._own_cursor, page = await self._pipes.one(lambda pipe: pipe.hscan(index, cursor, count=SWEEP_BATCH))
        assert isinstance(page, dict)
        pairs = [(text(sid), text(uid)) for sid, uid in page.items()]

        def routes(pipe: RedisPipeline) -> None:
            for sid, _ in pairs:
                pipe.exists(route_key(sid))

        stale = [
            pair
            for pair, exists in zip(pairs, await self._pipes.run(routes) if pairs else [], strict=True)
            if not exists
        ]
        return sum(1 for verdict in await remove_sessions(self._pipes, node, stale) if verdict == 1) if stale else 0
