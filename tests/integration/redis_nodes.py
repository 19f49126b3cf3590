"""Push nodes on one Redis for the end-to-end tests: ``hongbao serve`` subprocesses with the
Redis push store (each with its own data directory; one JWT secret and internal secret shared,
as a deployment configures them), a crash (SIGKILL of master and workers), WebSocket clients on
the ``websockets`` library, and reads of what Redis holds."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson
import websockets
from hongbao.bench.services.redis_servers import RedisTarget
from hongbao.server.auth import mint
from websockets.asyncio.client import ClientConnection

from tests.server.conftest import Server, children, finish_server, kill_server, start_server

JWT_SECRET = "redis-e2e-jwt-secret-0123456789abcdef"
INTERNAL_SECRET = "redis-e2e-internal-secret"
NODE_TTL_S = 2.0


def token(uid: str, *, admin: bool = False) -> str:
    """A bearer token every node accepts."""
    return mint(JWT_SECRET, uid, admin=admin, ttl_s=3600)


class RedisNodes:
    """Servers started for one test on ``target``; at the end every one still running is stopped
    and must exit 0 without a traceback and pass the money audit."""

    def __init__(self, tmp_path: Path, target: RedisTarget) -> None:
        self.tmp_path, self.target = tmp_path, target
        self.started: list[Server] = []
        self.killed: set[int] = set()

    def start(self, *names: str, extra_config: str = "") -> list[Server]:
        """Nodes ``names`` (push node ids ``name/<pid>``) on the shared Redis, started in parallel
        (a start takes seconds on a busy machine)."""

        def one(name: str) -> Server:
            config = (
                f'redis_url = "{self.target.url}"\nredis_cluster = {str(self.target.cluster).lower()}\n'
                f'jwt_secret = "{JWT_SECRET}"\ninternal_secret = "{INTERNAL_SECRET}"\nnode_name = "{name}"\n'
                f"push_node_ttl_s = {NODE_TTL_S}\n{extra_config}"
            )
            return start_server(self.tmp_path / name, 1, config)

        with ThreadPoolExecutor(len(names)) as pool:
            starts = [pool.submit(one, name) for name in names]
        self.started.extend(start.result() for start in starts if start.exception() is None)  # stopped at the end
        return [start.result() for start in starts]  # the first failure raises

    def kill(self, server: Server) -> None:
        """SIGKILL the server's workers and master at once (``kill_server``): a crash."""
        kill_server(server)
        self.killed.add(server.process.pid)

    def finish(self) -> None:
        """Stop every server not killed (all of them, even when one fails); each must exit cleanly
        and pass the money audit."""
        failures: list[AssertionError] = []
        for server in self.started:
            if server.process.pid not in self.killed:
                try:
                    finish_server(server)
                except AssertionError as exc:  # the others still stop: no node outlives its test
                    failures.append(exc)
        if failures:
            raise failures[0]

    def keys(self, pattern: str) -> list[str]:
        """Keys matching ``pattern`` on every primary."""
        found: list[str] = []
        for port in self.target.ports:
            with self.target.sync_client(port) as client:
                found.extend(key.decode() for key in client.scan_iter(pattern, count=1000))
        return sorted(found)

    def session_node(self, uid: str) -> str | None:
        """The node named by ``session:{uid}`` (its push node id), or None."""
        with self.target.sync_keys() as client:
            node = client.hget(f"session:{{{uid}}}", "nodeId")
        return None if node is None else node.decode()

    def online(self) -> int:
        """Members of the 16 online sets."""
        total = 0
        for port in self.target.ports:
            with self.target.sync_client(port) as client:
                total += sum(int(client.scard(key)) for key in client.scan_iter("online:*"))
        return total


@contextlib.contextmanager
def frozen(server: Server) -> Iterator[None]:
    """The server's master and workers stopped (SIGSTOP, the master first) for the block, then
    continued: a node that hangs with its connections open."""
    pids = [server.process.pid, *children(server.process.pid)]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def admin(server: Server) -> httpx.AsyncClient:
    """An admin HTTP client of ``server``."""
    return httpx.AsyncClient(
        base_url=server.url, headers={"authorization": f"Bearer {token('admin', admin=True)}"}, timeout=30, verify=False
    )


async def push(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    """POST /v1/admin/push ``body``; the answer (which must be 200)."""
    response = await client.post("/v1/admin/push", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def connect(
    server: Server, uid: str, offset: int | None = None, epoch: str | None = None, *, hello: bool = False, **kwargs: Any
) -> ClientConnection:
    """A WebSocket client of ``uid`` (token as the ``bearer`` subprotocol), resuming at
    (``offset``, ``epoch``) when given, asking for the hello frame when ``hello`` (its arrival
    proves the node registered the session); no keepalive pings unless asked."""
    asked = (("offset", offset), ("epoch", epoch), ("hello", 1 if hello else None))
    query = {k: str(v) for k, v in asked if v is not None}
    url = server.url.replace("http://", "ws://") + "/v1/ws" + (f"?{urlencode(query)}" if query else "")
    kwargs.setdefault("ping_interval", None)
    return await websockets.connect(
        url, subprotocols=[websockets.Subprotocol("bearer"), websockets.Subprotocol(token(uid))], **kwargs
    )


async def logged_in(server: Server, uid: str) -> ClientConnection:
    """A client of ``uid`` on ``server`` once the node holds its session: the hello frame it asked
    for has arrived (the node sends it only after registering the socket, which is later than its
    session hash appears in Redis)."""
    ws = await connect(server, uid, hello=True)
    assert [m["type"] for m in await receive(ws, 1)] == ["hello"]
    return ws


async def receive(ws: ClientConnection, count: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The next ``count`` messages (JSON objects), each within ``timeout_s``."""
    return [orjson.loads(await asyncio.wait_for(ws.recv(), timeout_s)) for _ in range(count)]


async def eventually(check: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Wait until ``check()`` holds, polling every 0.1 s; the seconds it took. Fails naming ``what``."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout_s, f"{what}: not within {timeout_s} s"
        await asyncio.sleep(0.1)
    return time.monotonic() - started
