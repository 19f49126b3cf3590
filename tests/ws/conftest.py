"""Servers for the WebSocket tests: real ``hongbao serve`` subprocesses with the timeouts shrunk
(idle 180 s -> 2 s, close wait 5 s -> 0.5 s, token grace 30 s -> 0.5 s)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import Server, finish_server, start_server

WS_CONFIG = """
ws_idle_timeout_s = 2.0
ws_close_timeout_s = 0.5
ws_token_grace_s = 0.5
"""


@pytest.fixture(scope="session")
def ws_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One single-worker server shared by the WebSocket tests (each test uses its own user ids)."""
    server = start_server(tmp_path_factory.mktemp("ws"), extra_config=WS_CONFIG)
    yield server
    finish_server(server)


@pytest.fixture
def make_ws_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start servers with extra settings on demand; each is stopped (and checked) at the end."""
    started: list[Server] = []

    def make(extra_config: str = "", workers: int = 1) -> Server:
        server = start_server(tmp_path / f"ws{len(started)}", workers, WS_CONFIG + extra_config)
        started.append(server)
        return server

    yield make
    for server in started:
        finish_server(server)


def push(admin: httpx.Client, user_id: str, data: object, event: str = "note") -> dict[str, object]:
    """POST /v1/admin/push of ``event`` with ``data`` to ``user_id`` (``admin``: an admin client
    from ``Server.client``): the answer's body."""
    answer = admin.post("/v1/admin/push", json={"user_id": user_id, "event": event, "data": data})
    assert answer.status_code == 200, answer.text
    body: dict[str, object] = answer.json()
    return body
