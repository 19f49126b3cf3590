"""Edges a newcomer hit: the bearer scheme's case, idempotency keys (and their reuse), token claims,
HTTP/1.0 keep-alive, HEAD, repeated group members, details right after expiry, and command-line
values that must be refused clearly."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import hongbao_native
import jwt
import orjson
import pytest
import yaml
from hongbao.server.auth import embedded_secret

from tests.server.conftest import Server, run_cli
from tests.server.flows import balance, group, move_clock, ms, ok, paid_packet, pipelined
from tests.server.test_openapi import SPEC_PATH, TOPUP, Checker


def test_bearer_scheme_is_case_insensitive(server: Server) -> None:
    """`Authorization: bearer <token>` is accepted like `Bearer` (RFC 9110 section 11.1)."""
    with server.client("alice") as client:
        token = client.headers["authorization"].split(" ", 1)[1]
        assert ok(client.get("/v1/balance", headers={"authorization": f"bearer {token}"}))["user_id"] == "alice"


def test_exp_must_be_a_number(server: Server) -> None:
    """A token whose exp is a string is refused with 401, though the string is numeric."""
    bad = jwt.encode(
        {"sub": "alice", "exp": str(int(time.time()) + 3600)}, embedded_secret(server.data_dir), algorithm="HS256"
    )
    with server.client("alice") as client:
        answer = client.get("/v1/balance", headers={"authorization": f"Bearer {bad}"})
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("key", [b"", b"a b", b"x" * 129, "é".encode()])
def test_bad_idempotency_keys_are_refused(server: Server, key: bytes) -> None:
    """An empty, spaced, over-long or non-ASCII Idempotency-Key is a 400, and nothing is topped up."""
    with server.client("admin", admin=True) as admin:
        answer = admin.post("/v1/admin/accounts/k/topup", json={"amount_fen": 5}, headers=[("idempotency-key", key)])
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_request"
    with server.client("k") as client:
        assert ok(client.get("/v1/balance"))["balance_fen"] == 0


def test_idempotency_key_reused_with_another_amount_is_422(server: Server) -> None:
    """A top-up key used again with another amount is 422 idempotency_key_reused naming both amounts
    (draft-ietf-httpapi-idempotency-key-header section 2.7) and moves nothing; with the same amount
    it stays a 200 applied: false; the answers match docs/openapi.yaml."""
    check, key = Checker(), {"idempotency-key": "reuse-1"}
    with server.client("admin", admin=True) as admin:
        first = check(admin.post("/v1/admin/accounts/r/topup", json={"amount_fen": 500}, headers=key), TOPUP, 200)
        reused = check(admin.post("/v1/admin/accounts/r/topup", json={"amount_fen": 700}, headers=key), TOPUP, 422)
        again = check(admin.post("/v1/admin/accounts/r/topup", json={"amount_fen": 500}, headers=key), TOPUP, 200)
    assert (first["applied"], again["applied"], again["balance_fen"]) == (True, False, 500)
    assert reused["error"] == {
        "code": "idempotency_key_reused",
        "message": "Idempotency-Key reuse-1 was used for a top-up of 500 fen, not 700 fen",
    }
    with server.client("r") as client:
        assert ok(client.get("/v1/balance"))["balance_fen"] == 500


def test_repeated_members_do_not_count(server: Server) -> None:
    """1000 copies of one member make a group of two, not an over-limit error."""
    with server.client("alice") as client:
        assert ok(client.post("/v1/groups", json={"members": ["bob"] * 1000}), 201)["members"] == ["alice", "bob"]


JSON_ROUTES = [
    (method.upper(), path)
    for path, operations in yaml.safe_load(SPEC_PATH.read_text(encoding="utf-8"))["paths"].items()
    for method, operation in operations.items()
    if isinstance(operation, dict) and "requestBody" in operation
]


def test_details_say_expired_from_the_moment_of_expiry(make_server: Callable[..., Server]) -> None:
    """At expires_at, before any refund job has run, details say ``expired`` as open answers 410
    expired (they said ``active`` until the refund, which here never comes)."""
    server = make_server(extra_config="refund_interval_s = 3600\n")
    gid = group(server, "S", ["A"])
    order_id = paid_packet(server, "S", {"count": 2, "total_fen": 100, "group_id": gid}, fund_fen=100)
    with server.client("A") as a:
        before = ok(a.get(f"/v1/packets/{order_id}"))
        assert before["status"] == "active"
        move_clock(server, ms(before["expires_at"]))
        assert ok(a.get(f"/v1/packets/{order_id}"))["status"] == "expired"
        assert ok(a.post(f"/v1/packets/{order_id}/open"), 410)["error"]["code"] == "expired"


def test_every_json_route_refuses_an_empty_or_null_body(server: Server) -> None:
    """An empty body or a JSON null on every route that takes a JSON body (from docs/openapi.yaml) is a
    400 invalid_request "the body must be a JSON object", as an array is; nothing is created or moved."""
    assert len(JSON_ROUTES) >= 8
    with server.client("alice") as alice, server.client("admin", admin=True) as admin:
        gid = ok(alice.post("/v1/groups", json={"members": ["bob"]}), 201)["group_id"]
        for method, template in JSON_ROUTES:
            client = admin if template.startswith("/v1/admin/") else alice
            path = template.replace("{user_id}", "bob").replace("{group_id}", gid)
            for body in (b"", b"null", b"[]"):
                answer = client.request(method, path, content=body, headers={"content-type": "application/json"})
                assert (answer.status_code, answer.json()["error"]) == (
                    400,
                    {"code": "invalid_request", "message": "the body must be a JSON object"},
                ), (method, path, body)
        assert ok(alice.get(f"/v1/groups/{gid}"))["members"] == ["alice", "bob"]
        assert ok(alice.get("/v1/me/sent"))["items"] == [] and ok(alice.get("/v1/balance"))["balance_fen"] == 0


def test_http10_keep_alive_is_answered_with_keep_alive(server: Server) -> None:
    """HTTP/1.0 with `Connection: keep-alive` gets the header back and the connection stays open."""
    host, port = server.url.rsplit("/", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        for _ in range(2):
            sock.sendall(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(4096)
            assert head.startswith(b"HTTP/1.1 200") and b"connection: keep-alive" in head.lower()


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["serve", "--port", "70000"], {}, "port must be in 0..65535, got 70000"),
        (
            ["serve"],
            {"HONGBAO_WORKERS": "abc"},
            "environment variable HONGBAO_WORKERS='abc': workers must be an integer, got 'abc'",
        ),
        (["audit", "--data-dir", "nowhere"], {}, "no database at nowhere/hongbao.db"),
    ],
)
def test_bad_command_line_values_are_named(tmp_path: Path, argv: list[str], env: dict[str, str], message: str) -> None:
    """A bad port, environment value or data directory exits 2 with a message naming it, no traceback."""
    result = run_cli(tmp_path, argv, env)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("toml", "argv", "env", "message"),
    [
        ("[limits]\nmax_total_fen = -5\n", ["serve"], {}, "limits.max_total_fen must be in 1..100_000_000_000, got -5"),
        ("[limits]\nmax_group_size = 0\n", ["serve"], {}, "limits.max_group_size must be in 2..100_000, got 0"),
        ("expiry_ms = -1000\n", ["serve"], {}, "limits.expiry_ms must be in 1000..2_592_000_000, got -1000"),
        ("", ["serve"], {"HONGBAO_PAY_TTL_MS": "-1"}, "limits.pay_ttl_ms must be in 1000..2_592_000_000, got -1"),
        ("[limits]\ngreeting_max_chars = 300\n", ["serve"], {}, "limits.greeting_max_chars must be in 0..255, got 300"),
        (
            "[limits]\nmax_count = 5\n",
            ["serve", "--workers", "-1"],
            {},
            "workers must be in 0..1024 (0: automatic), got -1",
        ),
        ("header_timeout_s = inf\n", ["serve"], {}, "header_timeout_s must be in 0.001..86400, got inf"),
        (
            "[server]\nkeepalive_timeout_s = nan\n",
            ["serve"],
            {},
            "keepalive_timeout_s must be in 0.001..86400, got nan",
        ),
        ("max_body_bytes = 0\n", ["serve"], {}, "max_body_bytes must be in 1..1_073_741_824, got 0"),
        (
            "[limits]\nmax_count = 100\nmax_cuont = 5\n",
            ["serve"],
            {},
            "config file hongbao.toml: unknown setting limits.max_cuont (did you mean limits.max_count?)",
        ),
        ("", ["token", "--user", "a"], {"HONGBAO_MAX_COUNT": "0"}, "limits.max_count must be in 1..10000, got 0"),
    ],
)
def test_out_of_range_settings_stop_the_start(
    tmp_path: Path, toml: str, argv: list[str], env: dict[str, str], message: str
) -> None:
    """A setting out of its range (TOML, HONGBAO_* or flag) exits 2 with one line naming it, its value
    and the allowed range, before any worker starts."""
    (tmp_path / "hongbao.toml").write_text(toml)
    result = run_cli(tmp_path, argv, env)
    assert (result.returncode, result.stderr) == (2, f"hongbao: {message}\n")
    assert not (tmp_path / "var").exists()  # nothing served, no key or database created


@pytest.mark.parametrize("ttl", ["inf", "1e300", "nan", "-5", "0", "315360001"])
def test_token_ttl_must_be_finite_and_at_most_ten_years(tmp_path: Path, ttl: str) -> None:
    """`hongbao token --ttl` refuses an infinite, huge, NaN, negative or zero lifetime with
    argparse's exit 2, no token."""
    result = run_cli(tmp_path, ["token", "--user", "bob", "--ttl", ttl])
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert f"argument --ttl: must be more than 0 and at most 315360000 seconds (10 years), got {ttl}" in result.stderr


def test_token_ttl_of_ten_years_is_accepted(tmp_path: Path) -> None:
    """The longest lifetime, 10 years, mints a token whose exp is 10 years from now."""
    result = run_cli(tmp_path, ["token", "--user", "bob", "--ttl", "315360000"])
    assert result.returncode == 0, result.stderr
    exp = jwt.decode(result.stdout.strip(), embedded_secret(tmp_path / "var"), algorithms=["HS256"])["exp"]
    assert abs(exp - (time.time() + 315_360_000)) < 60


def test_config_is_accepted_after_the_command(tmp_path: Path) -> None:
    """`hongbao token --config FILE` reads the file like `hongbao --config FILE token` does."""
    config = tmp_path / "h.toml"
    config.write_text(f'data_dir = "{tmp_path / "elsewhere"}"\n')
    result = subprocess.run(
        [sys.executable, "-m", "hongbao.server.cli", "token", "--config", str(config), "--user", "a"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    secret = embedded_secret(tmp_path / "elsewhere")
    assert jwt.decode(result.stdout.strip(), secret, algorithms=["HS256"])["sub"] == "a"


def test_pipelined_requests_are_answered_in_order(server: Server) -> None:
    """Requests pipelined in one write (RFC 9112 section 9.3.2) are answered in their order, whether
    answered at once (healthz, 404) or after I/O (balance): sync answers wait behind async ones."""
    auth = f"Authorization: Bearer {server.token('pipelined')}\r\n"
    requests = [
        "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        f"GET /v1/balance HTTP/1.1\r\nHost: x\r\n{auth}\r\n",
        f"GET /nowhere HTTP/1.1\r\nHost: x\r\n{auth}\r\n",
        f"GET /v1/balance HTTP/1.1\r\nHost: x\r\n{auth}\r\n",
        "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    ]
    answers = pipelined(server, requests)
    assert [status for status, _ in answers] == [200, 200, 404, 200, 200]
    assert answers[0][1] == answers[4][1] and b'"status"' in answers[0][1]
    assert answers[1][1] == answers[3][1] == b'{"user_id":"pipelined","balance_fen":0}'
    assert b'"code":"not_found"' in answers[2][1]


def test_pipelined_requests_ahead_of_a_malformed_one_are_answered_first(server: Server) -> None:
    """A top-up (answered after I/O) and a /healthz pipelined in one write ahead of a malformed
    request are answered, the top-up applied, and then the 400 comes and the connection closes:
    the same as when the malformed request arrives in a later read."""
    auth = f"Authorization: Bearer {server.token('admin', admin=True)}\r\n"
    body = '{"amount_fen": 7}'
    topup = (
        f"POST /v1/admin/accounts/piped/topup HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {len(body)}\r\n\r\n{body}"
    )
    answers = pipelined(server, [topup, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", "garbage\r\n\r\n"])
    assert [status for status, _ in answers] == [200, 200, 400]
    assert orjson.loads(answers[0][1])["balance_fen"] == 7 and b'"status"' in answers[1][1]
    assert orjson.loads(answers[2][1]) == {
        "error": {"code": "invalid_request", "message": "malformed request: bad request line"}
    }
    assert balance(server, "piped") == 7


def _exchange(server: Server, data: bytes, heads: int) -> bytes:
    """Send ``data`` on one connection and read until ``heads`` answer heads and the body bytes after
    the last one have come (or the server closes); the raw bytes."""
    host, port = server.url.rsplit("/", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while received.count(b"\r\n\r\n") < heads or not received.rstrip(b"\r\n").endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    return received


UNKNOWN_PACKET = "/v1/packets/" + hongbao_native.encode_order_id(1, 261130, 1, 99_999_999_999)


@pytest.mark.parametrize("path", ["/healthz", "/v1/balance", UNKNOWN_PACKET])
def test_head_is_get_without_the_body(server: Server, path: str) -> None:
    """HEAD answers the status and Content-Length GET gets, with no body (RFC 9110 section 9.3.2):
    on a public route, an authenticated one and one that errors (404 not_found); HEAD and a GET pipelined
    on one connection are framed apart, the GET's body right after the HEAD's head."""
    auth = f"Authorization: Bearer {server.token('header')}\r\n"
    with server.client("header") as client:
        got, head = client.get(path), client.head(path)
    assert (head.status_code, head.content) == (got.status_code, b"")
    assert head.headers["content-length"] == str(len(got.content)) != "0"
    assert head.headers["content-type"] == got.headers["content-type"] == "application/json"
    request = f"{{}} {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n"
    raw = _exchange(server, (request.format("HEAD") + request.format("GET")).encode(), heads=2)
    first, second = raw.split(b"\r\n\r\n", 1)
    assert first.startswith(f"HTTP/1.1 {got.status_code} ".encode())
    assert f"content-length: {len(got.content)}".encode() in first.lower()
    assert second.startswith(f"HTTP/1.1 {got.status_code} ".encode()) and second.endswith(b"\r\n\r\n" + got.content)


def test_head_closing_and_405_allow(server: Server) -> None:
    """HEAD with Connection: close gets the head only, then the close; a 405 lists HEAD wherever GET is
    allowed, and HEAD on a POST-only path is itself a 405 without a body."""
    closing = _exchange(server, b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", heads=1)
    assert (
        closing.startswith(b"HTTP/1.1 200 ")
        and closing.endswith(b"\r\n\r\n")
        and b"content-length: 15" in closing.lower()
    )
    with server.client("header") as client:
        assert client.put("/v1/balance").headers["allow"] == "GET, HEAD"
        assert client.put("/v1/packets/1").headers["allow"] == "DELETE, GET, HEAD"
        refused = client.head("/v1/packets")
    assert (refused.status_code, refused.headers["allow"], refused.content) == (405, "POST", b"")
