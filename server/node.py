"""This worker as a push node (docs/architecture.md section 7): its id, liveness heartbeat and the sweeper.

A node is one worker process (with SO_REUSEPORT a client lands on any worker). Every second it
refreshes its liveness (``push_node_ttl_s``, 5 s by default) with the address of its internal
listener, then sweeps: every live node removes the sessions of nodes whose liveness lapsed, so a
crashed node's users read as offline within the TTL, not after the 10-minute session TTL.

A node judges the others only from a steady view of the store: after a heartbeat that failed or
took more than half the TTL (the store was away or frozen, and so were the other nodes'
heartbeats: their keys may have lapsed while they were alive), and after joining, it waits one
TTL of prompt heartbeats before it sweeps, so every live node has beaten again by then and only
a node that is really gone is swept.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable

from hongbao.core.breaker import BreakerOpen
from hongbao.core.push_ports import NodeDirectory

log = logging.getLogger("hongbao.push.node")
HEARTBEAT_S = 1.0


def host_name(node_name: str) -> str:
    """This host's name as a node: ``node_name``, or the host name when it is empty."""
    return node_name or socket.gethostname()


def node_id(node_name: str) -> str:
    """This process's node id: ``{node_name}/{pid}``, the host name when ``node_name`` is empty."""
    return f"{host_name(node_name)}/{os.getpid()}"


class Node:
    """Liveness of node ``id`` in ``nodes`` for ``ttl_s`` seconds a beat; ``report(ok)`` hears
    whether each heartbeat reached the store (the hub counts consecutive failures)."""

    __slots__ = ("id", "address", "_nodes", "_ttl_s", "_report", "_steady_since")

    def __init__(self, node: str, nodes: NodeDirectory, ttl_s: float, report: Callable[[bool], None]) -> None:
        self.id, self.address = node, ""
        self._nodes, self._ttl_s, self._report = nodes, ttl_s, report
        self._steady_since: float | None = None  # loop time since which every heartbeat was prompt

    async def join(self, address: str) -> bool:
        """First heartbeat, at ``address`` (host:port of the internal listener), before any
        connection is accepted; whether it reached the store. When it did not, the node is not
        live yet: it joins with the first heartbeat of ``beat_forever`` that gets through (logged once)."""
        self.address = address
        try:
            await self._nodes.heartbeat(self.id, address, self._ttl_s)
        except Exception as exc:
            log.warning("push node %s could not join (%s): joining once the push store is back", self.id, exc)
            self._report(False)
            return False
        log.info("push node %s joined at %s", self.id, address)
        return True

    async def beat_forever(self) -> None:
        """Heartbeat every ``HEARTBEAT_S`` until cancelled, and sweep once the view of the store
        has been steady for a TTL (module docstring)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            started = loop.time()
            try:
                await self._nodes.heartbeat(self.id, self.address, self._ttl_s)
            except Exception as exc:  # BreakerOpen: Redis down, its breaker logged that once
                if not isinstance(exc, BreakerOpen):
                    log.warning("push node %s: heartbeat failed: %s", self.id, exc)
                self._steady_since = None
                self._report(False)
                continue
            self._report(True)
            now = loop.time()
            if self._steady_since is None or now - started > self._ttl_s / 2:
                self._steady_since = now
            if now - self._steady_since < self._ttl_s:
                continue  # the others' heartbeats may have been held up too: give them a TTL
            try:
                removed = await self._nodes.sweep(self.id)
            except Exception as exc:
                if not isinstance(exc, BreakerOpen):
                    log.warning("push node %s: sweep failed: %s", self.id, exc)
                continue
            if removed:
                log.info("push node %s swept %d session(s) of dead nodes", self.id, removed)

    async def leave(self) -> None:
        """Stop being alive now (graceful shutdown); the other nodes sweep what is left."""
        try:
            await self._nodes.leave(self.id)
        except Exception as exc:
            log.warning("push node %s: could not leave: %s", self.id, exc)
