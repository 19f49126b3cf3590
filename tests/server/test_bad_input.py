"""The bad input table through HTTP against one real server: every row gets its documented 4xx with
``{"error": {"code", "message"}}``, nothing answers 5xx, the worker never dies, and no money moves.

One server serves the whole module (rows share it on purpose: the last test checks that the whole
table left balances, packets and the worker exactly as they were)."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import hongbao_native
import httpx
import jwt
import orjson
import pytest
from hongbao.server.auth import embedded_secret, mint

from tests.server.conftest import Server, finish_server, start_server
from tests.server.flows import balance, group, move_clock, ms, ok, paid_packet, topup

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
MAX_BODY = 64 * 1024
MONEY_USERS = ("alice", "bob", "carol", "mallory")


@dataclass
class World:
    """The module's server and what the table acts on: group ``gid``, alice's paid packet
    ``packet`` (3 shares, unopened), bob's unpaid pre-order ``preorder``, a token-less client
    ``http``, and the balances and packet state before the table."""

    server: Server
    gid: str
    packet: str
    preorder: str
    http: httpx.Client
    worker_pid: int = 0
    before: dict[str, int] = field(default_factory=dict)
    packet_before: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One server (header and body timeouts 1 s) with two funded users, a group, a packet and a pre-order."""
    config = f"header_timeout_s = {HEADER_TIMEOUT_S}\nbody_timeout_s = {BODY_TIMEOUT_S}\n"
    server = start_server(tmp_path_factory.mktemp("bad-input"), 1, config)
    try:
        gid = group(server, "alice", ["bob", "carol"])
        topup(server, "alice", 5_000)
        topup(server, "bob", 1_000)
        packet = paid_packet(server, "alice", {"kind": "lucky", "count": 3, "total_fen": 300, "group_id": gid})
        with server.client("bob") as bob:
            preorder = ok(
                bob.post("/v1/packets", json={"kind": "lucky", "count": 2, "total_fen": 200, "group_id": gid}), 201
            )["order_id"]
        w = World(server, gid, packet, preorder, httpx.Client(base_url=server.url, timeout=10, verify=False))
        w.worker_pid = _worker_pids(server)[0]
        w.before = {user: balance(server, user) for user in MONEY_USERS}
        w.packet_before = _packet_state(server, packet)
        yield w
        w.http.close()
    finally:
        finish_server(server)


def _worker_pids(server: Server) -> list[int]:
    """The pid of every worker the server started so far, from its log."""
    return [int(pid) for pid in re.findall(r"pid=(\d+) worker listening", server.log())]


def _packet_state(server: Server, order_id: str) -> dict[str, Any]:
    with server.client("carol") as carol:
        info = ok(carol.get(f"/v1/packets/{order_id}"))
    return {k: info[k] for k in ("status", "remaining_count", "opened_fen", "receipts", "refunded_fen")}


# --- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One bad request: ``method`` ``path`` (``{packet}``, ``{preorder}``, ``{gid}``, ``{unknown}``,
    ``{bad_check}`` are filled in) as ``user`` ("" = no token; ``token`` = how to make it), with a
    JSON ``body`` or ``raw_body`` bytes, expecting ``status`` and error ``code``."""

    id: str
    method: str
    path: str
    status: int
    code: str
    user: str = "alice"
    body: Any = None
    raw_body: bytes | None = None
    token: str = "good"
    headers: tuple[tuple[str, str], ...] = ()
    allow: str = ""  # the Allow header a 405 must carry


DROP = "<drop>"


def send(**changes: Any) -> dict[str, Any]:
    """A valid lucky send body (group filled in later) with ``changes`` applied (DROP removes a key)."""
    body: dict[str, Any] = {"kind": "lucky", "count": 3, "total_fen": 300, "group_id": "{gid}"}
    for key, value in changes.items():
        if value == DROP:
            body.pop(key, None)
        else:
            body[key] = value
    return body


def amount_row(name: str, status: int = 400, code: str = "invalid_amount", **changes: Any) -> Row:
    return Row(f"send-{name}", "POST", "/v1/packets", status, code, body=send(**changes))


#: avatar URLs that are not an absolute http(s) URL an image may load (core/services/profiles.py)
BAD_AVATAR_URLS = {
    "script": "javascript:alert(1)",
    "data": "data:image/svg+xml,<svg/>",
    "relative": "/a.png",
    "no-host": "https:///a.png",
    "bad-host": "http://[::1/a",
    "space-host": "http:// /",
    "space-in-host": "https://exa mple.com/",
    "dots-host": "https://.../",
    "port-too-big": "https://example.com:99999/a",
    "port-text": "https://example.com:abc/a",
    "crlf": "https://example.com\r\n/x",
    "nul": "https://example.com/\x00",
    "rtl-override": "https://\u202eexample.com/",
    "leading-space": " https://example.com/a.png",
    "credentials": "https://user:pw@example.com/",
    "too-long": "https://example.com/" + "a" * 493,
}
#: nicknames that would not show as themselves beside other text (core/services/profiles.py)
BAD_NICKNAMES = {
    "too-long": "n" * 65,
    "spaces-only": "   ",
    "nul": "Ann\x00",
    "newline": "Ann\nBob",
    "rtl-override": "Ann\u202egnp.exe",
    "rtl-isolate": "\u2067Ann",
    "line-separator": "Ann\u2028",
}

ROWS = [
    # amounts in fen: only positive JSON integers
    amount_row("fen-float", total_fen=300.0),
    amount_row("fen-float-fraction", total_fen=299.5),
    amount_row("fen-string", total_fen="300"),
    amount_row("fen-negative", total_fen=-300),
    amount_row("fen-zero", total_fen=0),
    amount_row("fen-bool", total_fen=True),
    amount_row("fen-null", total_fen=None),
    amount_row("fen-missing", total_fen=DROP),
    amount_row("fen-huge", total_fen=10**30),
    amount_row("fen-list", total_fen=[300]),
    # yuan strings: at most two decimals, positive, no sign or exponent
    amount_row("yuan-three-decimals", total_fen=DROP, total_yuan="3.001"),
    amount_row("yuan-negative", total_fen=DROP, total_yuan="-3.00"),
    amount_row("yuan-zero", total_fen=DROP, total_yuan="0.00"),
    amount_row("yuan-number", total_fen=DROP, total_yuan=3.0),
    amount_row("yuan-exponent", total_fen=DROP, total_yuan="3e2"),
    amount_row("yuan-spaces", total_fen=DROP, total_yuan=" 3.00"),
    amount_row("yuan-leading-zero", total_fen=DROP, total_yuan="03.00"),
    amount_row("yuan-comma", total_fen=DROP, total_yuan="3,00"),
    # limits
    amount_row("total-over-limit-fen", total_fen=20_001),
    amount_row("total-over-limit-yuan", total_fen=DROP, total_yuan="200.01"),
    amount_row("equal-over-limit", kind="equal", count=100, total_fen=DROP, per_share_fen=201),
    amount_row("equal-remainder-M02", kind="equal", count=18, total_fen=100),
    amount_row("equal-without-per-share", kind="equal", count=3, total_fen=DROP),
    amount_row("count-zero", code="invalid_count", count=0),
    amount_row("count-101", code="invalid_count", count=101),
    amount_row("count-negative", code="invalid_count", count=-1),
    amount_row("count-string", code="invalid_count", count="3"),
    amount_row("count-float", code="invalid_count", count=3.0),
    amount_row("count-missing", code="invalid_count", count=DROP),
    amount_row("total-below-count-M04", code="invalid_count", count=15, total_fen=10),
    amount_row("exclusive-count-2", code="invalid_count", kind="exclusive", count=2, group_id=DROP, receiver_id="bob"),
    amount_row("greeting-too-long", code="invalid_request", greeting="福" * 65),
    amount_row("greeting-not-text", code="invalid_request", greeting=65),
    amount_row("kind-unknown", code="invalid_request", kind="mystery"),
    amount_row("fen-and-yuan", code="invalid_request", total_yuan="3.00"),
    amount_row("group-missing", code="invalid_request", group_id=DROP),
    amount_row("group-and-receiver", code="invalid_request", receiver_id="bob"),
    amount_row(
        "exclusive-to-self", code="invalid_request", kind="exclusive", count=1, group_id=DROP, receiver_id="alice"
    ),
    amount_row(
        "exclusive-bad-receiver", code="invalid_request", kind="exclusive", count=1, group_id=DROP, receiver_id="b b"
    ),
    Row("send-to-a-foreign-group", "POST", "/v1/packets", 403, "not_member", user="mallory", body=send()),
    # order ids: unknown (valid check digit) and garbage (bad check digit, wrong shape)
    Row("open-unknown", "POST", "/v1/packets/{unknown}/open", 404, "not_found"),
    Row("grab-unknown", "POST", "/v1/packets/{unknown}/grab", 404, "not_found"),
    Row("details-unknown", "GET", "/v1/packets/{unknown}", 404, "not_found"),
    Row("pay-unknown", "POST", "/v1/packets/{unknown}/pay", 404, "not_found"),
    Row("cancel-unknown", "DELETE", "/v1/packets/{unknown}", 404, "not_found"),
    Row("open-bad-check-digit", "POST", "/v1/packets/{bad_check}/open", 400, "bad_order_id"),
    Row("grab-bad-check-digit", "POST", "/v1/packets/{bad_check}/grab", 400, "bad_order_id"),
    Row("details-bad-check-digit", "GET", "/v1/packets/{bad_check}", 400, "bad_order_id"),
    Row("pay-bad-check-digit", "POST", "/v1/packets/{bad_check}/pay", 400, "bad_order_id", user="bob"),
    Row("cancel-bad-check-digit", "DELETE", "/v1/packets/{bad_check}", 400, "bad_order_id", user="bob"),
    Row("open-swapped-digits", "POST", "/v1/packets/{swapped}/open", 400, "bad_order_id"),
    Row("open-letters", "POST", "/v1/packets/abcdefghij0123456789/open", 400, "bad_order_id"),
    Row("open-too-short", "POST", "/v1/packets/1234/open", 400, "bad_order_id"),
    Row("open-too-long", "POST", "/v1/packets/{packet}0/open", 400, "bad_order_id"),
    # tokens: missing, expired, wrongly signed, unsigned, malformed claims
    Row("token-missing", "GET", "/v1/balance", 401, "unauthorized", user=""),
    Row("token-expired", "GET", "/v1/balance", 401, "unauthorized", token="expired"),
    Row("token-wrong-key", "POST", "/v1/packets/{packet}/open", 401, "unauthorized", token="wrong_key"),
    Row("token-alg-none", "POST", "/v1/packets/{packet}/open", 401, "unauthorized", token="alg_none"),
    Row("token-no-exp", "GET", "/v1/balance", 401, "unauthorized", token="no_exp"),
    Row("token-bad-sub", "GET", "/v1/balance", 401, "unauthorized", token="bad_sub"),
    Row("token-garbage", "GET", "/v1/balance", 401, "unauthorized", token="garbage"),
    Row("token-basic-scheme", "GET", "/v1/balance", 401, "unauthorized", token="basic"),
    Row("token-in-query", "GET", "/v1/balance?token={token}", 401, "unauthorized", user=""),
    # membership and identity: the user id comes from the token only
    Row("non-member-open", "POST", "/v1/packets/{packet}/open", 403, "not_member", user="mallory"),
    Row("non-member-grab", "POST", "/v1/packets/{packet}/grab", 403, "not_member", user="mallory"),
    Row("non-member-details", "GET", "/v1/packets/{packet}", 403, "not_member", user="mallory"),
    Row(
        "open-as-someone-else",
        "POST",
        "/v1/packets/{packet}/open",
        403,
        "not_member",
        user="mallory",
        body={"user_id": "bob", "sub": "bob"},
        headers=(("x-user-id", "bob"),),
    ),
    Row("pay-someone-elses-preorder", "POST", "/v1/packets/{preorder}/pay", 403, "forbidden", user="alice"),
    Row("cancel-someone-elses-preorder", "DELETE", "/v1/packets/{preorder}", 403, "forbidden", user="alice"),
    Row("cancel-a-paid-packet", "DELETE", "/v1/packets/{packet}", 409, "conflict", user="alice"),
    Row("open-unpaid", "POST", "/v1/packets/{preorder}/open", 409, "not_paid", user="carol"),
    Row("group-details-non-member", "GET", "/v1/groups/{gid}", 403, "not_member", user="mallory"),
    Row(
        "group-add-non-member",
        "POST",
        "/v1/groups/{gid}/members",
        403,
        "not_member",
        user="mallory",
        body={"members": ["mallory"]},
    ),
    Row("group-remove-other-not-creator", "DELETE", "/v1/groups/{gid}/members/carol", 403, "forbidden", user="bob"),
    Row("group-members-not-a-list", "POST", "/v1/groups", 400, "invalid_request", body={"members": "bob"}),
    Row("group-member-bad-id", "POST", "/v1/groups", 400, "invalid_request", body={"members": ["bob", "b b"]}),
    Row("group-too-big", "POST", "/v1/groups", 400, "invalid_request", body={"members": [f"u{i}" for i in range(500)]}),
    # malformed bodies
    Row("json-malformed", "POST", "/v1/packets", 400, "invalid_request", raw_body=b'{"kind": "lucky",'),
    Row("json-not-an-object", "POST", "/v1/packets", 400, "invalid_request", raw_body=b"[1, 2, 3]"),
    Row("json-null", "POST", "/v1/packets", 400, "invalid_request", raw_body=b"null"),
    Row("json-not-utf8", "POST", "/v1/packets", 400, "invalid_request", raw_body=b'{"kind": "\xff\xfe"}'),
    Row("json-nan", "POST", "/v1/packets", 400, "invalid_request", raw_body=b'{"total_fen": NaN}'),
    Row("json-deep-array", "POST", "/v1/packets", 400, "invalid_request", raw_body=b"[" * 20_000 + b"]" * 20_000),
    Row(
        "json-deep-object",
        "POST",
        "/v1/packets",
        400,
        "invalid_request",
        raw_body=b'{"kind": ' + b'{"a": ' * 5_000 + b"1" + b"}" * 5_000 + b"}",
    ),
    Row(
        "json-topup-malformed",
        "POST",
        "/v1/admin/accounts/bob/topup",
        400,
        "invalid_request",
        user="admin",
        raw_body=b"{amount_fen: 5}",
    ),
    Row(  # whichever value a reader takes, the request means two things: refused (RFC 7493 section 2.3)
        "json-topup-duplicate-name",
        "POST",
        "/v1/admin/accounts/bob/topup",
        400,
        "invalid_request",
        user="admin",
        raw_body=b'{"amount_fen": 1, "amount_fen": 100000}',
    ),
    Row(
        "json-group-duplicate-name",
        "POST",
        "/v1/groups",
        400,
        "invalid_request",
        raw_body=b'{"members": ["bob"], "x": {"a": 1, "a": 2}}',
    ),
    # admin routes: admins only, and their inputs are checked too
    Row("topup-not-admin", "POST", "/v1/admin/accounts/alice/topup", 403, "forbidden", body={"amount_fen": 100}),
    Row("crediting-mode-not-admin", "POST", "/v1/admin/crediting-mode", 403, "forbidden", body={"mode": "queued"}),
    Row("lists-pressure-not-admin", "POST", "/v1/admin/lists-pressure", 403, "forbidden", body={"on": True}),
    Row(
        "lists-pressure-not-bool",
        "POST",
        "/v1/admin/lists-pressure",
        400,
        "invalid_request",
        user="admin",
        body={"on": 1},
    ),
    Row("lists-pressure-missing", "POST", "/v1/admin/lists-pressure", 400, "invalid_request", user="admin", body={}),
    Row("clock-not-admin", "POST", "/v1/admin/clock", 403, "forbidden", body={"now_ms": 0}),
    Row(
        "topup-zero",
        "POST",
        "/v1/admin/accounts/bob/topup",
        400,
        "invalid_amount",
        user="admin",
        body={"amount_fen": 0},
    ),
    Row(
        "topup-negative",
        "POST",
        "/v1/admin/accounts/bob/topup",
        400,
        "invalid_amount",
        user="admin",
        body={"amount_fen": -500},
    ),
    Row(
        "topup-float",
        "POST",
        "/v1/admin/accounts/bob/topup",
        400,
        "invalid_amount",
        user="admin",
        body={"amount_fen": 1.5},
    ),
    Row(
        "topup-string",
        "POST",
        "/v1/admin/accounts/bob/topup",
        400,
        "invalid_amount",
        user="admin",
        body={"amount_fen": "100"},
    ),
    Row(
        "topup-bad-user",
        "POST",
        "/v1/admin/accounts/b!b/topup",
        400,
        "invalid_request",
        user="admin",
        body={"amount_fen": 100},
    ),
    Row(
        "topup-long-key",
        "POST",
        "/v1/admin/accounts/bob/topup",
        400,
        "invalid_request",
        user="admin",
        body={"amount_fen": 100},
        headers=(("idempotency-key", "k" * 129),),
    ),
    Row(
        "crediting-mode-unknown",
        "POST",
        "/v1/admin/crediting-mode",
        400,
        "invalid_request",
        user="admin",
        body={"mode": "never"},
    ),
    # query strings
    Row("list-page-zero", "GET", "/v1/me/received?page=0", 400, "invalid_request"),
    Row("list-page-negative", "GET", "/v1/me/sent?page=-1", 400, "invalid_request"),
    Row("list-year-text", "GET", "/v1/me/received?year=last", 400, "invalid_request"),
    Row("ledger-page-huge", "GET", "/v1/me/ledger?page=99999999999999999999", 400, "invalid_request"),
    *(
        Row(f"profile-nickname-{name}", "PUT", "/v1/me/profile", 400, "invalid_request", body={"nickname": nickname})
        for name, nickname in BAD_NICKNAMES.items()
    ),
    Row("profile-avatar-not-text", "PUT", "/v1/me/profile", 400, "invalid_request", body={"avatar_url": ["x"]}),
    *(
        Row(f"profile-avatar-{name}", "PUT", "/v1/me/profile", 400, "invalid_request", body={"avatar_url": url})
        for name, url in BAD_AVATAR_URLS.items()
    ),
    Row("profile-read-no-token", "GET", "/v1/me/profile", 401, "unauthorized", user=""),
    Row("groups-page-zero", "GET", "/v1/groups?page=0", 400, "invalid_request"),
    Row("groups-page-text", "GET", "/v1/groups?page=two", 400, "invalid_request"),
    # routes and methods
    Row("unknown-route", "GET", "/v1/nothing-here", 404, "not_found"),
    Row("unknown-root", "GET", "/", 404, "not_found", user=""),
    Row("unknown-deep-route", "POST", "/v1/packets/{packet}/open/again", 404, "not_found"),
    Row("wrong-method-balance", "PUT", "/v1/balance", 405, "method_not_allowed", allow="GET, HEAD"),
    Row("wrong-method-packets", "GET", "/v1/packets", 405, "method_not_allowed", allow="POST"),
    Row("wrong-method-open", "GET", "/v1/packets/{packet}/open", 405, "method_not_allowed", allow="POST"),
    Row("wrong-method-packet", "PUT", "/v1/packets/{packet}", 405, "method_not_allowed", allow="DELETE, GET, HEAD"),
    Row("wrong-method-healthz", "DELETE", "/healthz", 405, "method_not_allowed", user="", allow="GET, HEAD"),
    Row("wrong-method-groups", "PUT", "/v1/groups", 405, "method_not_allowed", allow="GET, HEAD, POST"),
    Row("wrong-method-spec", "POST", "/v1/openapi.yaml", 405, "method_not_allowed", user="", allow="GET, HEAD"),
]


def _fill(text: str, w: World) -> str:
    unknown = hongbao_native.encode_order_id(1, int(w.packet[1:7]), 1, 99_999_999_999)
    bad_check = w.packet[:-1] + str((int(w.packet[-1]) + 1) % 10)
    i = next(i for i in range(len(w.packet) - 2, 0, -1) if w.packet[i] != w.packet[i + 1])
    swapped = w.packet[:i] + w.packet[i + 1] + w.packet[i] + w.packet[i + 2 :]
    return (
        text.replace("{packet}", w.packet)
        .replace("{preorder}", w.preorder)
        .replace("{gid}", w.gid)
        .replace("{unknown}", unknown)
        .replace("{bad_check}", bad_check)
        .replace("{swapped}", swapped)
        .replace("{token}", w.server.token("alice"))
    )


def _token(row: Row, w: World) -> str | None:
    """The token ``row`` asks for (None: no authorization header at all)."""
    if not row.user:
        return None
    secret = embedded_secret(w.server.data_dir)
    later = int(time.time()) + 3600
    claims: dict[str, Any] = {"sub": row.user, "exp": later}
    if row.token == "good":
        return w.server.token(row.user, admin=row.user == "admin")
    if row.token == "expired":
        return w.server.token(row.user, ttl_s=-3600)
    if row.token == "wrong_key":
        return str(mint("not-the-server-key-" * 3, row.user))
    if row.token == "alg_none":
        return str(jwt.encode(claims, None, algorithm="none"))
    if row.token == "no_exp":
        return str(jwt.encode({"sub": row.user}, secret, algorithm="HS256"))
    if row.token == "bad_sub":
        return str(jwt.encode({**claims, "sub": "al ice"}, secret, algorithm="HS256"))
    return {"garbage": "not.a.token", "basic": ""}[row.token]


def _body(value: Any, w: World) -> Any:
    if isinstance(value, str):
        return _fill(value, w)
    if isinstance(value, dict):
        return {k: _body(v, w) for k, v in value.items()}
    return value


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The answer has ``status`` and exactly ``{"error": {"code": code, "message": <text>}}``."""
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert response.headers["content-type"] == "application/json"
    return body  # type: ignore[no-any-return]


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_bad_request(world: World, row: Row) -> None:
    """Each bad request gets its documented 4xx and error body, never a 5xx."""
    headers = dict(row.headers)
    token = _token(row, world)
    if token is not None:
        headers["authorization"] = f"Basic {token or 'YWxpY2U6cHc='}" if row.token == "basic" else f"Bearer {token}"
    content = (
        row.raw_body
        if row.raw_body is not None
        else (json.dumps(_body(row.body, world)).encode() if row.body is not None else None)
    )
    if content is not None:
        headers["content-type"] = "application/json"
    response = world.http.request(row.method, _fill(row.path, world), content=content, headers=headers)
    assert_error(response, row.status, row.code)
    if row.status == 405:  # RFC 9110 15.5.6: a 405 answer names the methods the resource takes
        assert response.headers.get("allow") == row.allow


# --- limits of the HTTP layer (raw sockets: the client must not fix the request for us) ----------


def _address(server: Server) -> tuple[str, int]:
    url = urlsplit(server.url)
    assert url.hostname is not None and url.port is not None
    return url.hostname, url.port


def raw_exchange(
    server: Server, request: bytes, timeout_s: float = 5.0
) -> tuple[int, dict[str, str], dict[str, Any], float]:
    """Send ``request`` on a new connection, read until the server closes it; returns (status,
    headers, JSON body, seconds until closed)."""
    started = time.monotonic()
    with socket.create_connection(_address(server), timeout=timeout_s) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
    return int(status_line.split()[1]), headers, orjson.loads(body), time.monotonic() - started


def _head(world: World, method: str, path: str, extra: str = "") -> bytes:
    token = world.server.token("alice")
    return f"{method} {path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {token}\r\n{extra}".encode()


LIMIT_ROWS: list[tuple[str, Callable[[World], bytes], int, str]] = [
    (
        "body-over-64KiB-by-length",
        lambda w: _head(w, "POST", "/v1/packets", f"Content-Length: {MAX_BODY + 1}\r\n\r\n"),
        413,
        "payload_too_large",
    ),
    (
        "body-over-64KiB-sent",
        lambda w: _head(w, "POST", "/v1/packets", f"Content-Length: {MAX_BODY + 1}\r\n\r\n") + b"x" * (MAX_BODY + 1),
        413,
        "payload_too_large",
    ),
    (
        "body-over-64KiB-chunked",
        lambda w: (
            _head(w, "POST", "/v1/packets", "Transfer-Encoding: chunked\r\n\r\n")
            + b"%x\r\n" % (MAX_BODY + 1)
            + b"x" * (MAX_BODY + 1)
            + b"\r\n0\r\n\r\n"
        ),
        413,
        "payload_too_large",
    ),
    (
        "header-over-8KiB",
        lambda w: _head(w, "GET", "/v1/balance", f"X-Filler: {'a' * 9000}\r\n\r\n"),
        431,
        "headers_too_large",
    ),
    (
        "too-many-headers",
        lambda w: _head(w, "GET", "/v1/balance", "".join(f"X-H{i}: v\r\n" for i in range(70)) + "\r\n"),
        431,
        "headers_too_large",
    ),
]


@pytest.mark.parametrize("name,build,status,code", LIMIT_ROWS, ids=[r[0] for r in LIMIT_ROWS])
def test_http_limit(world: World, name: str, build: Callable[[World], bytes], status: int, code: str) -> None:
    """Oversized bodies answer 413, oversized or too many headers 431, and the connection closes."""
    got_status, headers, body, _ = raw_exchange(world.server, build(world))
    assert (got_status, body["error"]["code"]) == (status, code), (name, body)
    assert set(body["error"]) == {"code", "message"}
    assert headers.get("connection") == "close"


def test_an_oversized_body_still_being_sent_gets_its_413(world: World) -> None:
    """A client still sending 4 MiB after the 413 was decided reads the 413: the server half-closes
    and drops the rest (RFC 9112 section 9.6) instead of closing with unread input (a reset that
    can destroy the answer), then closes once the client does."""
    body = b"x" * (4 << 20)
    head = _head(world, "POST", "/v1/packets", f"Content-Length: {len(body)}\r\n\r\n")
    with socket.create_connection(_address(world.server), timeout=10) as sock:
        sender = threading.Thread(target=sock.sendall, args=(head + body,))
        sender.start()
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        sender.join(10)
        assert not sender.is_alive()
    assert data.startswith(b"HTTP/1.1 413 ") and b'"code":"payload_too_large"' in data, data[:200]


def test_oversized_body_through_httpx(world: World) -> None:
    """A real client sending a body over the limit gets 413 payload_too_large."""
    with world.server.client("alice") as alice:
        response = alice.post(
            "/v1/packets",
            content=b'{"greeting": "' + b"x" * MAX_BODY + b'"}',
            headers={"content-type": "application/json"},
        )
    assert_error(response, 413, "payload_too_large")


def test_slowloris_headers_answer_408_and_close(world: World) -> None:
    """A request head trickled a line every 0.2 s gets 408 and a closed connection after header_timeout_s."""
    started = time.monotonic()
    with socket.create_connection(_address(world.server), timeout=5) as sock:
        sock.sendall(b"GET /v1/balance HTTP/1.1\r\nHost: test\r\n")
        data = b""
        try:
            for i in range(50):
                time.sleep(0.2)
                sock.sendall(f"X-Slow-{i}: v\r\n".encode())
        except OSError:  # closed under us: what we want
            pass
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
    elapsed = time.monotonic() - started
    assert data.startswith(b"HTTP/1.1 408 "), data
    body = orjson.loads(data.partition(b"\r\n\r\n")[2])
    assert body["error"]["code"] == "request_timeout"
    assert HEADER_TIMEOUT_S * 0.9 <= elapsed <= HEADER_TIMEOUT_S + 1.5, elapsed


def test_slow_body_answers_408_and_closes(world: World) -> None:
    """A body that stops arriving halfway gets 408 and a closed connection after body_timeout_s."""
    started = time.monotonic()
    with socket.create_connection(_address(world.server), timeout=5) as sock:
        sock.sendall(_head(world, "POST", "/v1/packets", "Content-Length: 100\r\n\r\n") + b'{"kind": ')
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    elapsed = time.monotonic() - started
    assert data.startswith(b"HTTP/1.1 408 "), data
    assert orjson.loads(data.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_timeout"
    assert BODY_TIMEOUT_S * 0.9 <= elapsed <= BODY_TIMEOUT_S + 1.5, elapsed


def test_messages_say_what_is_wrong(world: World) -> None:
    """A body that is not UTF-8 and two Authorization fields get messages naming that, not a decoder's."""
    token = world.server.token("alice")
    for body in ('{"amount_fen": 1}'.encode("utf-16"), b'{"greeting": "\xff"}'):
        response = world.http.post("/v1/packets", content=body, headers={"authorization": f"Bearer {token}"})
        assert (
            assert_error(response, 400, "invalid_request")["error"]["message"]
            == "the body must be JSON text in UTF-8 (RFC 8259 section 8.1)"
        )
    twice = _head(world, "GET", "/v1/balance", f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n")
    status, _, body, _ = raw_exchange(world.server, twice)
    assert (status, body["error"]) == (
        401,
        {"code": "unauthorized", "message": "send one Authorization: Bearer <token> field with one token"},
    )


def test_group_messages_name_the_real_limit_and_echo_no_long_id(world: World) -> None:
    """Too many members names the group's real size (500 with its creator, whether made or added
    to); a member to remove that is no user id is 400; an id longer than any group's is not echoed."""
    with world.server.client("alice") as alice:
        made = alice.post("/v1/groups", json={"members": [f"u{i}" for i in range(500)]})
        added = alice.post(f"/v1/groups/{world.gid}/members", json={"members": [f"u{i}" for i in range(600)]})
        for response, given in ((made, 499), (added, 500)):
            assert assert_error(response, 400, "invalid_request")["error"]["message"] == (
                f"at most {given} distinct members can be given here (a group has at most 500, its creator included)"
            )
        odd = alice.delete(f"/v1/groups/{world.gid}/members/bad%20id")
        assert assert_error(odd, 400, "invalid_request")["error"]["message"] == (
            "the member to remove must be a user id (1..64 of [A-Za-z0-9_-])"
        )
        long = assert_error(alice.get("/v1/groups/" + "g" * 5_000), 404, "not_found")
        assert len(long["error"]["message"]) < 100, long


# --- after the table -----------------------------------------------------------------------------


def test_user_id_comes_from_the_token_only(world: World) -> None:
    """A member opening with someone else's id in the body and headers opens for themself only."""
    server = world.server
    gid = group(server, "dan", ["erin", "fay"])
    order = paid_packet(server, "dan", {"kind": "equal", "count": 2, "per_share_fen": 40, "group_id": gid}, fund_fen=80)
    with server.client("erin") as erin:
        opened = ok(
            erin.post(
                f"/v1/packets/{order}/open",
                json={"user_id": "fay", "sub": "fay"},
                headers={"x-user-id": "fay", "x-forwarded-user": "fay"},
            )
        )
        assert opened["amount_fen"] == 40
        details = ok(erin.get(f"/v1/packets/{order}"))
        assert [r["user_id"] for r in details["receipts"]] == ["erin"]
        mine = ok(erin.get("/v1/balance", params={"user_id": "fay"}))
    assert mine["user_id"] == "erin"
    with server.client("fay") as fay:
        assert ok(fay.post(f"/v1/packets/{order}/grab")) == {"status": "ok"}
    deadline = time.monotonic() + 5
    while balance(server, "erin") != 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (balance(server, "erin"), balance(server, "fay")) == (40, 0)


def test_insufficient_balance_moves_nothing(world: World) -> None:
    """Paying a packet larger than the balance is 409 insufficient_balance and debits nothing."""
    server = world.server
    with server.client("carol") as carol:
        order = ok(carol.post("/v1/packets", json=send(group_id=world.gid)), 201)["order_id"]
        assert_error(carol.post(f"/v1/packets/{order}/pay"), 409, "insufficient_balance")
        assert_error(carol.get(f"/v1/packets/{order}"), 409, "not_paid")
        ok(carol.delete(f"/v1/packets/{order}"))
        assert_error(carol.post(f"/v1/packets/{order}/pay"), 404, "not_found")
    assert balance(server, "carol") == world.before["carol"]


def test_pay_after_pay_by_is_404_and_debits_nothing(make_server: Callable[..., Server]) -> None:
    """A pre-order paid after its pay_by (15 min) is gone: 404 not_found, and nothing is debited."""
    server = make_server()
    gid = group(server, "late", ["friend"])
    topup(server, "late", 1_000)
    with server.client("late") as late:
        sent = ok(late.post("/v1/packets", json=send(group_id=gid)), 201)
        move_clock(server, ms(sent["pay_by"]) + 1)
        assert_error(late.post(f"/v1/packets/{sent['order_id']}/pay"), 404, "not_found")
        assert_error(late.get(f"/v1/packets/{sent['order_id']}"), 404, "not_found")
    assert balance(server, "late") == 1_000


def test_the_table_moved_no_money_and_killed_no_worker(world: World) -> None:
    """After the whole table: balances and the packet unchanged, no 5xx, the same single worker still serving."""
    server = world.server
    assert {user: balance(server, user) for user in MONEY_USERS} == world.before
    assert _packet_state(server, world.packet) == world.packet_before
    with server.client("bob") as bob:
        assert ok(bob.get(f"/v1/packets/{world.preorder}"), 409)["error"]["code"] == "not_paid"
    assert ok(httpx.get(f"{server.url}/healthz")) == {"status": "ok"}
    metrics = httpx.get(f"{server.url}/metrics").text
    fives = [
        line for line in metrics.splitlines() if line.startswith("hongbao_http_requests_total") and 'status="5' in line
    ]
    assert fives == []
    fours = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("hongbao_http_requests_total") and 'status="4' in line
    )
    assert fours >= len(ROWS)
    log = server.log()
    assert _worker_pids(server) == [world.worker_pid], log  # never restarted
    assert "exited" not in log and "Traceback" not in log, log
    os.kill(world.worker_pid, 0)  # the same worker process is alive
    snapshots = sorted(p.name for p in Path(server.data_dir / "metrics").glob("*.json"))
    assert snapshots == [f"{world.worker_pid}.json"]  # and it is the only one that ever served
    assert server.process.poll() is None
