"""One real ``hongbao serve`` shared by the push client tests (each test uses its own users), with
short push timeouts and debug logging, so "no token in the log" covers every line the server writes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.server.conftest import Server, finish_server, make_server, start_server

CHROMIUM = "/usr/bin/chromium"

PUSH_CONFIG = """
log_level = "debug"
ws_idle_timeout_s = 5
ws_close_timeout_s = 1
ws_token_grace_s = 0.2
"""


@pytest.fixture(scope="package")
def push_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A single-worker server for every e2e test; stopped (exit 0, money audit) after the last."""
    server = start_server(tmp_path_factory.mktemp("e2e"), extra_config=PUSH_CONFIG)
    yield server
    finish_server(server)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium (Debian's, driven by Playwright; no browser download) for the module."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page (own context: no shared storage between tests)."""
    context = browser.new_context()
    yield context.new_page()
    context.close()


__all__ = ["make_server"]  # the fixture, for tests that need a server of their own


def ws_url(server: Server) -> str:
    """The server's push endpoint, ``ws://host:port/v1/ws``."""
    return server.url.replace("http://", "ws://") + "/v1/ws"


def push(server: Server, target: str, event: str, data: dict[str, Any], to: str = "user_id") -> dict[str, Any]:
    """POST /v1/admin/push one event to ``target``, a user (or, with ``to="topic"``, a topic); the answer's JSON."""
    with server.client("admin", admin=True) as admin:
        response = admin.post("/v1/admin/push", json={to: target, "event": event, "data": data})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def apush(server: Server, target: str, event: str, data: dict[str, Any], to: str = "user_id") -> dict[str, Any]:
    """``push`` from async code (in a thread, so the client under test keeps running)."""
    return await asyncio.to_thread(push, server, target, event, data, to)


async def until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait until ``check()`` is true (polled every 10 ms); AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not true within {timeout_s} s"
        await asyncio.sleep(0.01)


def wait_until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """``until`` for sync code (the browser tests)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not true within {timeout_s} s"
        time.sleep(0.02)
