"""Small steps of the money flow over HTTP, shared by the server tests."""

from __future__ import annotations

from typing import Any

import httpx

from tests.server.conftest import Server


def ok(response: httpx.Response, status: int = 200) -> Any:
    """The JSON body of a response that must have ``status``."""
    assert response.status_code == status, (response.status_code, response.text)
    return response.json()


def topup(server: Server, user_id: str, amount_fen: int, key: str | None = None) -> int:
    """Admin top-up; returns the new balance in fen."""
    headers = {"idempotency-key": key} if key else {}
    with server.client("admin", admin=True) as admin:
        return int(ok(admin.post(f"/v1/admin/accounts/{user_id}/topup", json={"amount_fen": amount_fen}, headers=headers))["balance_fen"])


def group(server: Server, creator: str, members: list[str]) -> str:
    """Create a group of ``creator`` and ``members``; returns its id."""
    with server.client(creator) as client:
        return str(ok(client.post("/v1/groups", json={"members": members}), 201)["group_id"])


def paid_packet(server: Server, sender: str, body: dict[str, Any], fund_fen: int | None = None) -> str:
    """Fund the sender (if asked), send and pay; returns the order id."""
    if fund_fen:
        topup(server, sender, fund_fen)
    with server.client(sender) as client:
        order_id = str(ok(client.post("/v1/packets", json=body), 201)["order_id"])
        assert ok(client.post(f"/v1/packets/{order_id}/pay"))["status"] == "active"
    return order_id


def balance(server: Server, user_id: str) -> int:
    """The user's balance in fen."""
    with server.client(user_id) as client:
        return int(ok(client.get("/v1/balance"))["balance_fen"])


def move_clock(server: Server, now_ms: int) -> None:
    """Set the test server's clock (every worker) to ``now_ms``."""
    with server.client("admin", admin=True) as admin:
        ok(admin.post("/v1/admin/clock", json={"now_ms": now_ms}))
