"""Small steps of the money flow over HTTP, shared by the server tests."""

from __future__ import annotations

import calendar
import socket
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import httpx

from tests.server.conftest import Server

T = TypeVar("T")


def ok(response: httpx.Response, status: int = 200) -> Any:
    """The JSON body of a response that must have ``status``."""
    assert response.status_code == status, (response.status_code, response.text)
    return response.json()


def pipelined(server: Server, requests: list[str]) -> list[tuple[int, bytes]]:
    """Send raw HTTP/1.1 ``requests`` in one write on one connection; their (status, body) answers
    in the order they came (each framed by its Content-Length)."""
    host, port = server.url.rsplit("/", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall("".join(requests).encode())
        data, answers = b"", []
        while len(answers) < len(requests):
            data += sock.recv(65536)
            while b"\r\n\r\n" in data:
                head, rest = data.split(b"\r\n\r\n", 1)
                length = int(
                    next(
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    )
                )
                if len(rest) < length:
                    break
                answers.append((int(head.split(b" ")[1]), rest[:length]))
                data = rest[length:]
    return answers


def topup(server: Server, user_id: str, amount_fen: int, key: str | None = None) -> int:
    """Admin top-up; returns the new balance in fen."""
    headers = {"idempotency-key": key} if key else {}
    with server.client("admin", admin=True) as admin:
        return int(
            ok(admin.post(f"/v1/admin/accounts/{user_id}/topup", json={"amount_fen": amount_fen}, headers=headers))[
                "balance_fen"
            ]
        )


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


def set_mode(server: Server, mode: str) -> None:
    """Switch the crediting mode at run time (admin API; each worker picks it up within a second)."""
    with server.client("admin", admin=True) as admin:
        assert ok(admin.post("/v1/admin/crediting-mode", json={"mode": mode})) == {"mode": mode}


def balance(server: Server, user_id: str) -> int:
    """The user's balance in fen."""
    with server.client(user_id) as client:
        return int(ok(client.get("/v1/balance"))["balance_fen"])


def move_clock(server: Server, now_ms: int) -> None:
    """Set the test server's clock (every worker) to ``now_ms``."""
    with server.client("admin", admin=True) as admin:
        ok(admin.post("/v1/admin/clock", json={"now_ms": now_ms}))


def ms(rfc3339: str) -> int:
    """Milliseconds since the epoch of an RFC 3339 UTC string such as ``2026-11-29T23:41:48.825Z``."""
    moment = datetime.fromisoformat(rfc3339)
    assert rfc3339.endswith("Z") and moment.utcoffset() == timedelta(0), rfc3339
    return calendar.timegm(moment.utctimetuple()) * 1000 + moment.microsecond // 1000


def eventually(check: Callable[[], T], timeout_s: float = 10.0) -> T:
    """Call ``check`` until it neither raises AssertionError nor returns False (background jobs
    write lists and credits asynchronously); re-raise its last failure after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = check()
            assert result is not False, f"{check} is still False"
            return result
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def scraped(server: Server, series: str) -> float | None:
    """The value of the unlabelled series ``series`` (e.g. ``hongbao_opens_total``) on the server's
    /metrics, merged over its workers; None when it has none."""
    prefix = f"{series} "
    for line in httpx.get(f"{server.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return None


def best_luck(receipts: list[dict[str, Any]]) -> str:
    """The rule: the largest share, ties to the earliest open (receipts are in open order)."""
    top = max(r["amount_fen"] for r in receipts)
    return str(next(r["user_id"] for r in receipts if r["amount_fen"] == top))


def ledger(server: Server, user_id: str) -> list[dict[str, Any]]:
    """Every entry of the user's bill, newest first, over all pages."""
    items: list[dict[str, Any]] = []
    with server.client(user_id) as client:
        for page in range(1, 100):
            got = ok(client.get("/v1/me/ledger", params={"page": page}))
            assert got["page"] == page
            if not got["items"]:
                return items
            items += got["items"]
    raise AssertionError("ledger has too many pages")


def user_list(server: Server, user_id: str, direction: str, year: int, page: int = 1) -> dict[str, Any]:
    """One page of the user's sent or received list."""
    with server.client(user_id) as client:
        return ok(client.get(f"/v1/me/{direction}", params={"year": year, "page": page}))  # type: ignore[no-any-return]
