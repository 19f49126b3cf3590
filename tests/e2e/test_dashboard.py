"""The live dashboard (server/static/dashboard.html at GET /dashboard) in a real headless Chromium:
fed by GET /v1/admin/metrics every second with the admin token from the URL fragment, its numbers
move with a small load of sends, pays, grabs, opens and details made over HTTP while members are
online over WebSocket. The test leaves a screenshot; ``DASHBOARD_SCREENSHOT=docs/dashboard.png``
puts it where the docs show it."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol

from tests.e2e.conftest import ws_url
from tests.server.conftest import Server
from tests.server.flows import group, ok, paid_packet, topup

MEMBERS = [f"dash-m{i}" for i in range(3)]
SENDER = "dash-s"
PACKET = {"kind": "lucky", "count": 3, "total_fen": 300}
LOAD_S = 6.0  # long enough for a few reads of the page, and sparklines with a shape


def _value(page: Page, element: str) -> float | None:
    """The raw number behind element ``element``'s text (its data-value; None when it shows none)."""
    raw = page.get_attribute(f"#{element}", "data-value")
    return float(raw) if raw else None


@pytest.fixture
def online(push_server: Server) -> Iterator[list[ClientConnection]]:
    """MEMBERS connected over WebSocket (pinging every second, under the e2e server's 5 s idle
    timeout; their events read and dropped), closed at the end."""
    with ExitStack() as stack:
        sockets = [
            stack.enter_context(
                connect(
                    ws_url(push_server),
                    subprotocols=[Subprotocol("bearer"), Subprotocol(push_server.token(uid))],
                    ping_interval=1,
                )
            )
            for uid in MEMBERS
        ]
        for sock in sockets:
            threading.Thread(target=lambda s=sock: [None for _ in s], daemon=True).start()
        yield sockets


def test_dashboard_numbers_move_under_load(
    push_server: Server, page: Page, online: list[ClientConnection], tmp_path: Path
) -> None:
    """Under a few packets sent, paid and opened by online members, the page shows opens/s and
    requests/s above 0, the open total up by every open, push latency, the online users and
    WebSocket connections, and the crediting mode."""
    topup(push_server, SENDER, 1_000_000)
    gid = group(push_server, SENDER, MEMBERS)
    page.set_viewport_size({"width": 1000, "height": 700})
    page.goto(f"{push_server.url}/dashboard#token={push_server.token('admin', admin=True)}")
    page.wait_for_function("window.dashboard.reads >= 2", timeout=10_000)
    opened_before = _value(page, "op-open-total") or 0.0
    clients = [push_server.client(uid) for uid in MEMBERS]
    rates: dict[str, list[float]] = {"opens-rate": [], "op-pay-rate": [], "pushes-rate": []}
    opens, started = 0, time.monotonic()
    try:
        while time.monotonic() - started < LOAD_S:
            order_id = paid_packet(push_server, SENDER, PACKET | {"group_id": gid})
            for client in clients:
                ok(client.post(f"/v1/packets/{order_id}/grab"))
                ok(client.post(f"/v1/packets/{order_id}/open"))
                ok(client.get(f"/v1/packets/{order_id}"))
                opens += 1
            for name, seen in rates.items():
                seen.append(_value(page, name) or 0.0)
        page.screenshot(path=os.environ.get("DASHBOARD_SCREENSHOT") or str(tmp_path / "dashboard.png"))
    finally:
        for client in clients:
            client.close()
    page.wait_for_function(
        f"+document.getElementById('op-open-total').dataset.value >= {opened_before + opens}", timeout=10_000
    )
    assert _value(page, "op-open-total") == opened_before + opens
    assert {name: max(seen) > 0 for name, seen in rates.items()} == dict.fromkeys(rates, True), rates
    assert (_value(page, "push-p99") or 0) > 0
    assert (_value(page, "online-users") or 0) >= len(MEMBERS)
    assert (_value(page, "ws-connections") or 0) >= len(MEMBERS)
    assert page.get_attribute("#crediting-mode", "data-value") == "realtime_large"
    assert page.locator("#breakers").text_content() == "none (embedded, no Redis)"
    assert "live: updated" in (page.locator("#state").text_content() or "")


def test_dashboard_says_what_is_wrong_with_the_token(push_server: Server, page: Page) -> None:
    """Without a token the page asks for one; a user's token gets the 403 line; the data route
    itself refuses both (401, 403) while the page is served to anyone."""
    page.goto(f"{push_server.url}/dashboard")
    assert "no token" in (page.locator("#state").text_content() or "")
    page.goto(f"{push_server.url}/dashboard#token={push_server.token('dash-user')}")
    page.reload()  # a change of the fragment alone does not load the page again
    page.wait_for_function("document.getElementById('state').textContent.includes('403')", timeout=10_000)
    assert httpx.get(f"{push_server.url}/v1/admin/metrics").status_code == 401
    with push_server.client("dash-user") as user:
        assert ok(user.get("/v1/admin/metrics"), 403)["error"]["code"] == "forbidden"
