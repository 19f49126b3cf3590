"""Targeted delivery to sessions held by other nodes (docs/architecture.md section 7): the route cache and
the forward with one retry.

A user's route (node, session id) is cached here for ``ROUTE_CACHE_S`` seconds. Messages are
forwarded to their nodes, one request per node. A message answered "not here", or not answered
in time, drops its cached route; the route is looked up once more, and the message forwarded
once more if the route changed (P-14: a user who moved). What is left stays queued in the log.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from hongbao.core.push_ports import NodeDirectory, Route, SessionStore, Stored
from hongbao.server.push_internal import Forwarder

ROUTE_CACHE_S = 30.0


class RemoteDelivery:
    """Forward messages from node ``node`` to the nodes of their users' sessions."""

    __slots__ = ("node", "sessions", "nodes", "forwarder", "_routes")

    def __init__(self, node: str, sessions: SessionStore, nodes: NodeDirectory, forwarder: Forwarder) -> None:
        self.node, self.sessions, self.nodes, self.forwarder = node, sessions, nodes, forwarder
        self._routes: dict[str, tuple[Route, float]] = {}

    async def send(self, items: Sequence[tuple[str, Stored]]) -> list[bool]:
        """Forward each (uid, message) to the user's node; True where it reached the socket there."""
        results = [False] * len(items)
        await self._round(items, list(range(len(items))), results, None)
        return results

    async def _round(
        self,
        items: Sequence[tuple[str, Stored]],
        indexes: list[int],
        results: list[bool],
        failed_routes: dict[str, Route] | None,
    ) -> None:
        """One forwarding round over ``indexes``; the first (``failed_routes`` None) is followed by
        a retry of its failures whose route changed when looked up afresh."""
        routes = await self._lookup([items[i][0] for i in indexes], fresh=failed_routes is not None)
        by_node: dict[str, list[int]] = {}
        for i in indexes:
            uid = items[i][0]
            route = routes.get(uid)
            if route is None or (failed_routes is not None and failed_routes.get(uid) == route):
                continue
            if route.node == self.node:  # the store still names this node, but the session has gone
                self._routes.pop(uid, None)
                continue
            by_node.setdefault(route.node, []).append(i)
        answers = await asyncio.gather(
            *(
                self._forward(node, [(items[i][0], routes[items[i][0]].sid, items[i][1]) for i in idx])
                for node, idx in by_node.items()
            )
        )
        failed: dict[str, Route] = {}
        retry: list[int] = []
        for idx, node_answers in zip(by_node.values(), answers, strict=True):
            for i, answer in zip(idx, node_answers, strict=True):
                results[i] = bool(answer)
                if not answer:
                    uid = items[i][0]
                    self._routes.pop(uid, None)
                    failed[uid] = routes[uid]
                    retry.append(i)
        if retry and failed_routes is None:
            await self._round(items, retry, results, failed)

    async def _forward(self, node: str, forwards: list[tuple[str, str, Stored]]) -> list[bool | None]:
        address = await self.nodes.address(node)
        if address is None:  # the node is dead: its sessions read as offline
            return [None] * len(forwards)
        return await self.forwarder.push(address, forwards)

    async def _lookup(self, uids: list[str], fresh: bool) -> dict[str, Route]:
        now = time.monotonic()
        routes: dict[str, Route] = {}
        missing: list[str] = []
        for uid in uids:
            cached = None if fresh else self._routes.get(uid)
            if cached is not None and cached[1] > now:
                routes[uid] = cached[0]
            else:
                missing.append(uid)
        found = await self.sessions.lookup_many(missing) if missing else {}
        for uid, route in found.items():
            routes[uid] = route
            self._routes[uid] = (route, now + ROUTE_CACHE_S)
        return routes
