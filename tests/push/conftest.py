"""Push tests against real servers: ``hongbao serve`` subprocesses (one or several nodes on one
data directory), clients on the ``websockets`` library, pushes through the admin route."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson
import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from tests.server.conftest import Server, finish_server, kill_server, start_server
from tests.server.flows import scraped

PUSH_CONFIG = """
ws_idle_timeout_s = 30.0
push_node_ttl_s = 2.0
"""


class Nodes:
    """Servers started for a test (or a module), all on one data directory; at the end every
    server still running is stopped and must exit cleanly and pass the money audit."""

    def __init__(self, tmp_path: Path) -> None:
        self.data_dir = tmp_path / "shared"
        self.started: list[Server] = []
        self.killed: set[int] = set()

    def start(self, workers: int = 1, extra_config: str = "") -> Server:
        """One more server (a node per worker) on the shared data directory."""
        server = start_server(self.data_dir, workers, PUSH_CONFIG + extra_config, name=f"n{len(self.started)}")
        self.started.append(server)
        return server

    def kill(self, server: Server) -> None:
        """SIGKILL the server's workers and master at once: a crash, nothing cleaned up."""
        kill_server(server)
        self.killed.add(server.process.pid)

    def finish(self) -> None:
        """Stop what still runs; each must exit 0 without a traceback and pass the money audit."""
        for server in self.started:
            if server.process.pid not in self.killed:
                finish_server(server)


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    """Start servers on one data directory on demand (see Nodes)."""
    started = Nodes(tmp_path)
    yield started
    started.finish()


@pytest.fixture(scope="package")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server with 2 workers shared by the push tests (each uses its own user ids)."""
    started = Nodes(tmp_path_factory.mktemp("two_workers"))
    yield started.start(workers=2)
    started.finish()


READY = {"type": "unsubscribed", "topic": "ready"}


class Client:
    """A push client of the ``websockets`` library whose session is attached (see ``connect``),
    with the messages that came before that (a replay) kept for ``receive``."""

    def __init__(self, ws: ClientConnection, early: list[dict[str, Any]]) -> None:
        self.ws, self.early = ws, early

    async def receive(self, count: int, timeout_s: float = 5.0) -> list[dict[str, Any]]:
        """The next ``count`` messages (JSON objects), each within ``timeout_s``."""
        got = self.early[:count]
        del self.early[:count]
        while len(got) < count:
            got.append(orjson.loads(await asyncio.wait_for(self.ws.recv(), timeout_s)))
        return got

    async def silent(self, wait_s: float = 0.5) -> bool:
        """True if nothing (more) arrives within ``wait_s`` seconds."""
        if self.early:
            return False
        try:
            await asyncio.wait_for(self.ws.recv(), wait_s)
        except TimeoutError:
            return True
        return False

    async def send(self, message: dict[str, Any]) -> None:
        """Send one JSON message."""
        await self.ws.send(orjson.dumps(message).decode())

    async def close(self) -> None:
        """Close cleanly (1000)."""
        await self.ws.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.ws.close()


async def connect(
    server: Server, uid: str, offset: int | None = None, epoch: str | None = None, **kwargs: Any
) -> Client:
    """A WebSocket client of ``uid`` (token as the ``bearer`` subprotocol), resuming at
    (``offset``, ``epoch``) when given. The 101 comes before the hub has logged the session in, so
    this sends a marker (an unsubscribe of "ready") that the hub answers only once attached."""
    query = {k: str(v) for k, v in (("offset", offset), ("epoch", epoch)) if v is not None}
    url = server.url.replace("http://", "ws://") + "/v1/ws" + (f"?{urlencode(query)}" if query else "")
    ws = await websockets.connect(
        url, subprotocols=[websockets.Subprotocol("bearer"), websockets.Subprotocol(server.token(uid))], **kwargs
    )
    await ws.send('{"type":"unsubscribe","topic":"ready"}')
    early: list[dict[str, Any]] = []
    while (message := orjson.loads(await asyncio.wait_for(ws.recv(), 10))) != READY:
        early.append(message)
    return Client(ws, early)


def admin(server: Server) -> httpx.AsyncClient:
    """An admin HTTP client of ``server``."""
    return server.async_client("admin", admin=True)


async def push(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    """POST /v1/admin/push ``body``; the answer (which must be 200)."""
    response = await client.post("/v1/admin/push", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def metric(server: Server, name: str) -> float:
    """The value of counter ``hongbao_{name}_total`` merged over the server's workers."""
    value = scraped(server, f"hongbao_{name}_total")
    if value is None:
        raise AssertionError(f"no counter {name} in /metrics")
    return value


async def eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait until ``check()`` holds (polling), or fail."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)
