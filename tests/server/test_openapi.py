"""docs/openapi.yaml stays true: it is a valid OpenAPI 3.1 document, its operations are exactly the
server's route table with the auth each route needs, its error codes are the ones the code raises,
and every answer of a real server along the main flow and its error paths has a documented status,
content type and headers, and a body that matches the schema documented for that status."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import hongbao_native
import httpx
import yaml
from hongbao.core import errors
from hongbao.core.clock import SystemClock
from hongbao.server import http_protocol
from hongbao.server.app import App
from hongbao.server.auth import TokenVerifier
from hongbao.server.composition import open_backend
from hongbao.server.config import Settings
from hongbao.server.handlers import MAX_PAGE, MAX_TOPUP_FEN
from hongbao.server.metrics import WorkerMetrics
from hongbao.server.router import Route
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_spec
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from tests.server.conftest import Server
from tests.server.flows import eventually

SPEC_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
SPEC: dict[str, Any] = yaml.safe_load(SPEC_PATH.read_text(encoding="utf-8"))
SPEC_URI = "urn:hongbao:openapi"
REGISTRY: Registry[Any] = Registry().with_resource(SPEC_URI, DRAFT202012.create_resource(SPEC))
METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
DAY_MS = 24 * 3600 * 1000
T = TypeVar("T")

TOPUP = "/v1/admin/accounts/{user_id}/topup"
MODE = "/v1/admin/crediting-mode"
PRESSURE = "/v1/admin/lists-pressure"
TRAFFIC = "/v1/admin/traffic"
PUSH = "/v1/admin/push"
CLOCK = "/v1/admin/clock"
GROUP = "/v1/groups/{group_id}"
MEMBERS = "/v1/groups/{group_id}/members"
MEMBER = "/v1/groups/{group_id}/members/{user_id}"
PACKET = "/v1/packets/{order_id}"
PAY, GRAB, OPEN = PACKET + "/pay", PACKET + "/grab", PACKET + "/open"
WS, PREFLIGHT = "/v1/ws", "/v1/ws/preflight"
NON_JSON = {
    "/metrics": ["text/plain"],
    "/dashboard": ["text/html"],
    "/v1/ws/client.js": ["application/javascript"],
    "/v1/ws/demo": ["text/html"],
    "/v1/openapi.yaml": ["application/yaml"],
    "/v1/docs": ["text/html"],
}


def _pointer(*parts: str) -> str:
    """A JSON pointer (RFC 6901) from raw path segments."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def _resolve(pointer: str) -> Any:
    node: Any = SPEC
    for part in pointer.lstrip("/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def _deref(pointer: str) -> str:
    """Follow an OpenAPI ``$ref`` (local, e.g. to components/responses) to the object's pointer."""
    node = _resolve(pointer)
    while isinstance(node, dict) and "$ref" in node:
        pointer = node["$ref"].removeprefix("#")
        node = _resolve(pointer)
    return pointer


def spec_operations() -> dict[tuple[str, str], dict[str, Any]]:
    """(METHOD, path template) -> operation object, for every operation in the spec."""
    return {
        (method.upper(), path): op
        for path, item in SPEC["paths"].items()
        for method, op in item.items()
        if method in METHODS
    }


def app_routes(*, test_clock: bool, tmp: Path) -> list[Route]:
    """The route table of a real App (the one a worker serves), built in-process over a fresh embedded backend."""
    admission = hongbao_native.AdmissionTable.create(f"openapi-{os.getpid()}-{secrets.token_hex(4)}", 16)
    limiter = hongbao_native.RateLimiter.create(f"openapi-{os.getpid()}-{secrets.token_hex(4)}", 1.0, 1)
    settings = Settings(data_dir=tmp, test_clock=test_clock)
    backend = asyncio.run(open_backend(settings, admission, SystemClock()))
    try:
        app = App(settings, backend, TokenVerifier("k" * 32, ["HS256"]), WorkerMetrics(tmp / "metrics"), limiter)
        routes: list[Route] = app.router.routes
        return routes
    finally:
        asyncio.run(backend.aclose())
        admission.unlink()
        limiter.unlink()


@dataclass
class Answer:
    """One HTTP answer as the checker sees it (from httpx or from a raw socket)."""

    method: str
    status: int
    headers: dict[str, str]
    body: bytes

    @classmethod
    def of(cls, response: httpx.Response) -> Answer:
        """The answer of an httpx response."""
        return cls(
            response.request.method,
            response.status_code,
            {k.lower(): v for k, v in response.headers.items()},
            response.content,
        )


class Checker:
    """Validates answers against the spec and records every (method, template, status) it saw."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, str, int]] = set()

    def __call__(self, response: httpx.Response | Answer, template: str, status: int) -> Any:
        """The decoded body of ``response``, which must have ``status``, documented for the operation
        (method, ``template``), with a body matching that status's schema."""
        answer = response if isinstance(response, Answer) else Answer.of(response)
        assert answer.status == status, (answer.method, template, answer.status, answer.body[:500])
        responses = SPEC["paths"][template][answer.method.lower()]["responses"]
        assert str(status) in responses, (
            f"{answer.method} {template} answered {status}, which the spec does not document"
        )
        body = self._matches(
            answer, _deref(_pointer("paths", template, answer.method.lower(), "responses", str(status)))
        )
        self.seen.add((answer.method, template, status))
        return body

    def component(self, response: httpx.Response | Answer, name: str, status: int) -> Any:
        """As ``__call__`` for a connection-level answer documented as ``components/responses/<name>``."""
        answer = response if isinstance(response, Answer) else Answer.of(response)
        assert answer.status == status, (answer.method, name, answer.status, answer.body[:500])
        return self._matches(answer, _pointer("components", "responses", name))

    @staticmethod
    def _matches(answer: Answer, pointer: str) -> Any:
        documented = _resolve(pointer)
        for name, header in documented.get("headers", {}).items():
            value = answer.headers.get(name.lower())
            if header.get("required"):
                assert value is not None, f"{name} missing from {answer.status} answer"
            if value is not None and header["schema"].get("type") == "integer":
                assert value.isdigit() and int(value) >= header["schema"].get("minimum", 0), (name, value)
            if value is not None and "pattern" in header["schema"]:
                assert re.fullmatch(header["schema"]["pattern"], value), (name, value)
        media = answer.headers.get("content-type", "").split(";")[0].strip()
        assert media in documented["content"], f"content type {media!r} is not documented at {pointer}"
        if media != "application/json":
            return answer.body.decode()
        body = httpx.Response(200, content=answer.body).json()
        schema_ref = {"$ref": f"{SPEC_URI}#{pointer}{_pointer('content', 'application/json', 'schema')}"}
        validator = Draft202012Validator(
            schema_ref, registry=REGISTRY, format_checker=Draft202012Validator.FORMAT_CHECKER
        )
        problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(body)]
        assert not problems, f"{answer.method} {answer.status} body {body!r} breaks {pointer}: {problems}"
        return body


def raw(server: Server, request: bytes, *, wait_s: float = 0.0, method: str = "GET") -> Answer:
    """Send ``request`` on a fresh socket (after it, wait ``wait_s`` seconds without sending more),
    then read one answer until the server closes the connection. ``method`` names the request's
    method when ``request`` is empty (an answer the server gives before any request)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        if request:
            sock.sendall(request)
        time.sleep(wait_s)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict((k.strip().lower(), v.strip()) for k, v in (line.split(":", 1) for line in lines[1:]))
    return Answer(request.split(b" ", 1)[0].decode() if request else method, int(lines[0].split()[1]), headers, body)


def code(body: dict[str, Any]) -> str:
    """The error code of an error body."""
    return str(body["error"]["code"])


def test_spec_is_valid_openapi_3_1() -> None:
    """docs/openapi.yaml is a valid OpenAPI 3.1 document whose every local $ref resolves."""
    assert SPEC["openapi"].startswith("3.1.")
    validate_spec(SPEC)

    def refs(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                yield node["$ref"]
            for value in node.values():
                yield from refs(value)
        elif isinstance(node, list):
            for value in node:
                yield from refs(value)

    targets = set(refs(SPEC))
    assert targets and all(t.startswith("#/") for t in targets)
    for target in targets:
        assert _resolve(target.removeprefix("#")) is not None, target


def test_spec_operations_are_the_route_table(tmp_path: Path) -> None:
    """The spec's (method, path) pairs equal the App's route table; the test-only clock route is marked
    x-test-only. HEAD, which every GET route takes (as GET without the body), is said once in the
    description, not listed per path."""
    operations = spec_operations()
    assert (
        "HEAD" not in {method for method, _ in operations}
        and "**HEAD.** Every GET operation also answers HEAD" in SPEC["info"]["description"]
    )
    with_clock = {(r.method, r.template) for r in app_routes(test_clock=True, tmp=tmp_path / "a")}
    without_clock = {(r.method, r.template) for r in app_routes(test_clock=False, tmp=tmp_path / "b")}
    assert set(operations) == with_clock
    assert {key for key, op in operations.items() if not op.get("x-test-only")} == without_clock
    assert with_clock - without_clock == {("POST", CLOCK)}


def test_spec_security_matches_route_auth(tmp_path: Path) -> None:
    """Routes without auth declare no security and no 401 (but the WebSocket handshake, which takes its
    token from the subprotocol or the query); every other route declares bearer auth and 401;
    admin routes are exactly /v1/admin/* and declare 403."""
    default = SPEC["security"]
    assert default == [{"bearer": []}]
    bearer = SPEC["components"]["securitySchemes"]["bearer"]
    assert (bearer["type"], bearer["scheme"], bearer["bearerFormat"]) == ("http", "bearer", "JWT")
    for route in app_routes(test_clock=True, tmp=tmp_path):
        op = SPEC["paths"][route.template][route.method.lower()]
        security = op.get("security", default)
        label = f"{route.method} {route.template}"
        if route.auth == "none":
            assert security == [], label
            assert ("401" in op["responses"]) == (route.template == WS), label  # the handshake checks its own token
        else:
            assert security == [{"bearer": []}], label
            assert "401" in op["responses"], label
        assert (route.auth == "admin") == route.template.startswith("/v1/admin/"), label
        if route.auth == "admin":
            assert "403" in op["responses"], label


def test_spec_error_codes_are_the_codes_the_server_uses() -> None:
    """The ErrorCode enum lists every code of core/errors.py, the HTTP layer and the app, and nothing else."""

    def subclasses(cls: type[errors.HongbaoError]) -> Iterator[type[errors.HongbaoError]]:
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    from hongbao.server import app as app_module

    used = {errors.HongbaoError.code} | {c.code for c in subclasses(errors.HongbaoError)}
    used |= set(http_protocol._PARSE_CODES.values()) | {"request_timeout", "busy", "internal", "not_implemented"}
    source = Path(app_module.__file__).read_text() + Path(http_protocol.__file__).read_text()
    assert '"internal"' in source and '"request_timeout"' in source
    assert set(SPEC["components"]["schemas"]["ErrorCode"]["enum"]) == used


def test_spec_examples_match_their_schemas() -> None:
    """Every request-body example validates against its schema, and the example order id passes the codec."""
    examples = 0
    for (method, path), op in spec_operations().items():
        for media, content in op.get("requestBody", {}).get("content", {}).items():
            pointer = _pointer("paths", path, method.lower(), "requestBody", "content", media, "schema")
            validator = Draft202012Validator(
                {"$ref": f"{SPEC_URI}#{pointer}"}, registry=REGISTRY, format_checker=Draft202012Validator.FORMAT_CHECKER
            )
            values = [content["example"]] if "example" in content else []
            values += [e["value"] for e in content.get("examples", {}).values()]
            for value in values:
                assert not list(validator.iter_errors(value)), (method, path, value)
                examples += 1
    assert examples >= 5
    for order_id in SPEC["components"]["schemas"]["OrderId"]["examples"]:
        assert hongbao_native.decode_order_id(order_id).region in (1, 2)


def test_spec_limits_are_the_server_limits() -> None:
    """The documented bounds (shares, totals, greeting, group size, page, year, top-up) are the server's defaults."""
    limits, schemas = Settings().limits, SPEC["components"]["schemas"]
    send = schemas["SendRequest"]["properties"]
    assert send["count"]["maximum"] == limits.max_count
    assert send["total_fen"]["maximum"] == send["per_share_fen"]["maximum"] == limits.max_total_fen
    assert send["greeting"]["maxLength"] == limits.greeting_max_chars
    assert (
        SPEC["paths"]["/v1/groups"]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"][
            "members"
        ]["maxItems"]
        == limits.max_group_size - 1
    )
    assert (
        SPEC["paths"][MEMBERS]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"]["members"][
            "maxItems"
        ]
        == limits.max_group_size
    )
    assert SPEC["components"]["parameters"]["Page"]["schema"]["maximum"] == MAX_PAGE
    assert (
        SPEC["components"]["parameters"]["Year"]["schema"]["minimum"],
        SPEC["components"]["parameters"]["Year"]["schema"]["maximum"],
    ) == (2000, 2099)
    topup_body = SPEC["paths"][TOPUP]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert topup_body["properties"]["amount_fen"]["maximum"] == MAX_TOPUP_FEN


def test_every_operation_documents_its_success_and_transport_errors() -> None:
    """Each operation documents one 2xx with a JSON (or, for NON_JSON, its own) body, or for the
    WebSocket route a 101 with none, and the 408, 413, 431, 500 and 503 any request can get;
    every error response is an Error."""
    for (method, path), op in spec_operations().items():
        responses = op["responses"]
        success = [s for s in responses if s.startswith("2") or s == "101"]
        assert len(success) == 1 and (success[0] == "101") == (path == WS), (method, path, success)
        content = _resolve(_deref(_pointer("paths", path, method.lower(), "responses", success[0]))).get("content", {})
        assert list(content) == NON_JSON.get(path, [] if path == WS else ["application/json"]), (method, path)
        assert {"400", "408", "413", "431", "500", "503"} <= set(responses), (method, path)
        for status in responses:
            if status not in success:
                documented = _resolve(_deref(_pointer("paths", path, method.lower(), "responses", status)))
                schema = documented["content"]["application/json"]["schema"]
                assert schema["$ref"].endswith("Error"), (method, path, status)


def test_main_flow_matches_the_spec(server: Server) -> None:
    """Every answer along the main flow and its error paths has a documented status and matches its schema."""
    check = Checker()
    anon = httpx.Client(base_url=server.url, timeout=30)
    admin, alice, bob = server.client("admin", admin=True), server.client("alice"), server.client("bob")
    carol, frank, dave = server.client("carol"), server.client("frank"), server.client("dave")

    # operations and auth
    assert check(anon.get("/healthz"), "/healthz", 200) == {"status": "ok"}
    assert check(anon.get("/readyz"), "/readyz", 200) == {"status": "ready", "degraded": []}
    assert "hongbao_http_requests_total" in check(anon.get("/metrics"), "/metrics", 200)
    assert "<script>" in check(anon.get("/dashboard"), "/dashboard", 200)
    summary = check(admin.get("/v1/admin/metrics"), "/v1/admin/metrics", 200)
    assert summary["metrics"]["hongbao_crediting_mode"] == [
        {"labels": {"mode": mode}, "value": float(mode == "realtime_large")}
        for mode in sorted(("realtime_large", "queued", "deferred"))
    ]
    assert code(check(anon.get("/v1/admin/metrics"), "/v1/admin/metrics", 401)) == "unauthorized"
    assert code(check(alice.get("/v1/admin/metrics"), "/v1/admin/metrics", 403)) == "forbidden"
    assert code(check(anon.get("/v1/balance"), "/v1/balance", 401)) == "unauthorized"
    forged = {"authorization": "Bearer " + server.token("alice")[:-2] + "xx"}
    assert code(check(anon.get("/v1/balance", headers=forged), "/v1/balance", 401)) == "unauthorized"
    assert code(check(alice.post("/v1/admin/accounts/alice/topup", json={"amount_fen": 1}), TOPUP, 403)) == "forbidden"

    # the WebSocket route without an upgrade, and its preflight
    assert code(check(alice.get(WS), WS, 426)) == "upgrade_required"
    assert code(check(anon.get(WS), WS, 426)) == "upgrade_required"  # the token is looked at only in a handshake
    assert check(alice.get(PREFLIGHT), PREFLIGHT, 200) == {"status": "ok"}
    assert code(check(anon.get(PREFLIGHT), PREFLIGHT, 401)) == "unauthorized"
    assert "class HongbaoPush" in check(anon.get("/v1/ws/client.js"), "/v1/ws/client.js", 200)
    assert '<script src="/v1/ws/client.js">' in check(anon.get("/v1/ws/demo"), "/v1/ws/demo", 200)

    # the API's own description
    assert yaml.safe_load(check(anon.get("/v1/openapi.yaml"), "/v1/openapi.yaml", 200)) == SPEC
    assert "<code>/v1/packets/{order_id}/open</code>" in check(anon.get("/v1/docs"), "/v1/docs", 200)

    # top-up, crediting mode, balance
    key = {"idempotency-key": "flow-1"}
    first = check(admin.post("/v1/admin/accounts/alice/topup", json={"amount_fen": 10_000}, headers=key), TOPUP, 200)
    assert first == {"user_id": "alice", "balance_fen": 10_000, "applied": True}
    again = check(admin.post("/v1/admin/accounts/alice/topup", json={"amount_fen": 10_000}, headers=key), TOPUP, 200)
    assert again == {"user_id": "alice", "balance_fen": 10_000, "applied": False}
    for amount in (1.5, "100", 0, -5, MAX_TOPUP_FEN + 1):
        assert (
            code(check(admin.post("/v1/admin/accounts/alice/topup", json={"amount_fen": amount}), TOPUP, 400))
            == "invalid_amount"
        )
    assert (
        code(check(admin.post("/v1/admin/accounts/al%20ice/topup", json={"amount_fen": 5}), TOPUP, 400))
        == "invalid_request"
    )
    assert code(check(admin.post("/v1/admin/accounts/alice/topup", content=b"{nope"), TOPUP, 400)) == "invalid_request"
    assert check(admin.post(MODE, json={"mode": "queued"}), MODE, 200) == {"mode": "queued"}
    assert check(admin.post(MODE, json={"mode": "realtime_large"}), MODE, 200) == {"mode": "realtime_large"}
    assert code(check(admin.post(MODE, json={"mode": "sometimes"}), MODE, 400)) == "invalid_request"
    assert check(alice.get("/v1/balance"), "/v1/balance", 200) == {"user_id": "alice", "balance_fen": 10_000}

    # groups
    assert check(bob.get("/v1/groups"), "/v1/groups", 200) == {"page": 1, "items": []}
    created = check(alice.post("/v1/groups", json={"members": ["bob", "bob", "alice"]}), "/v1/groups", 201)
    gid = created["group_id"]
    assert created["members"] == ["alice", "bob"]
    mine = {"page": 1, "items": [{"group_id": gid, "creator_id": "alice"}]}
    assert check(bob.get("/v1/groups"), "/v1/groups", 200) == mine
    assert check(bob.get("/v1/groups", params={"page": 2}), "/v1/groups", 200) == {"page": 2, "items": []}
    assert code(check(bob.get("/v1/groups", params={"page": 0}), "/v1/groups", 400)) == "invalid_request"
    assert code(check(alice.post("/v1/groups", json={"members": "bob"}), "/v1/groups", 400)) == "invalid_request"
    assert check(bob.get(f"/v1/groups/{gid}"), GROUP, 200) == {
        "group_id": gid,
        "creator_id": "alice",
        "members": ["alice", "bob"],
    }
    assert code(check(dave.get(f"/v1/groups/{gid}"), GROUP, 403)) == "not_member"
    assert code(check(alice.get("/v1/groups/g0000000000000000"), GROUP, 404)) == "not_found"
    added = check(bob.post(f"/v1/groups/{gid}/members", json={"members": ["carol", "frank", "erin"]}), MEMBERS, 200)
    assert added == {"group_id": gid, "added": 3, "members": ["alice", "bob", "carol", "erin", "frank"]}
    assert code(check(bob.post(f"/v1/groups/{gid}/members", json={"members": [1]}), MEMBERS, 400)) == "invalid_request"
    assert code(check(dave.post(f"/v1/groups/{gid}/members", json={"members": ["dave"]}), MEMBERS, 403)) == "not_member"
    assert code(check(alice.post("/v1/groups/gnothere/members", json={"members": ["x"]}), MEMBERS, 404)) == "not_found"
    assert code(check(bob.delete(f"/v1/groups/{gid}/members/erin"), MEMBER, 403)) == "forbidden"
    assert check(alice.delete(f"/v1/groups/{gid}/members/erin"), MEMBER, 200) == {"group_id": gid, "removed": "erin"}
    assert code(check(alice.delete(f"/v1/groups/{gid}/members/erin"), MEMBER, 404)) == "not_found"

    # admin push: to a user who is not connected, to a group, to a topic
    to_carol = check(admin.post(PUSH, json={"user_id": "carol", "event": "note", "data": {"n": 1}}), PUSH, 200)
    assert to_carol["result"] == "queued" and to_carol["offset"] == 1
    assert check(admin.post(PUSH, json={"group_id": gid, "event": "note"}), PUSH, 200) == {
        "group_id": gid,
        "result": "queued",
    }
    published = check(admin.post(PUSH, json={"topic": "news", "event": "note", "data": [1]}), PUSH, 200)
    assert (published["result"], published["offset"]) == ("published", 1)
    for bad in (
        {"user_id": "carol", "topic": "news", "event": "note"},
        {"topic": "news"},
        {"user_id": "c d", "event": "e"},
    ):
        assert code(check(admin.post(PUSH, json=bad), PUSH, 400)) == "invalid_request", bad
    assert code(check(admin.post(PUSH, json={"group_id": "gnothere", "event": "note"}), PUSH, 404)) == "not_found"
    assert code(check(alice.post(PUSH, json={"topic": "news", "event": "note"}), PUSH, 403)) == "forbidden"

    # profile
    unset = {"user_id": "alice", "nickname": "alice", "avatar_url": ""}
    assert check(alice.get("/v1/me/profile"), "/v1/me/profile", 200) == unset
    profile = {"nickname": "Alice", "avatar_url": "https://example.com/a.png"}
    assert check(alice.put("/v1/me/profile", json=profile), "/v1/me/profile", 200) == {"user_id": "alice", **profile}
    assert check(alice.get("/v1/me/profile"), "/v1/me/profile", 200) == {"user_id": "alice", **profile}
    assert code(check(alice.put("/v1/me/profile", json={"nickname": 5}), "/v1/me/profile", 400)) == "invalid_request"

    # send: bad input, then a lucky packet of 3 shares
    lucky = {"kind": "lucky", "count": 3, "total_fen": 300, "group_id": gid, "greeting": "恭喜发财"}
    for bad, expected in [
        ({**lucky, "count": 0}, "invalid_count"),
        ({**lucky, "count": 101}, "invalid_count"),
        ({**lucky, "total_fen": 3.0}, "invalid_amount"),
        ({**lucky, "total_fen": 20_001}, "invalid_amount"),
        ({"kind": "lucky", "count": 3, "total_yuan": "1.234", "group_id": gid}, "invalid_amount"),
        ({**lucky, "kind": "golden"}, "invalid_request"),
        ({**lucky, "greeting": "x" * 65}, "invalid_request"),
    ]:
        assert code(check(alice.post("/v1/packets", json=bad), "/v1/packets", 400)) == expected, bad
    assert code(check(dave.post("/v1/packets", json=lucky), "/v1/packets", 403)) == "not_member"
    sent = check(alice.post("/v1/packets", json=lucky), "/v1/packets", 201)
    order = sent["order_id"]
    assert sent["status"] == "pending_payment"
    assert code(check(bob.get(f"/v1/packets/{order}"), PACKET, 409)) == "not_paid"
    assert code(check(bob.post(f"/v1/packets/{order}/grab"), GRAB, 409)) == "not_paid"
    assert code(check(bob.post(f"/v1/packets/{order}/pay"), PAY, 403)) == "forbidden"
    paid = check(alice.post(f"/v1/packets/{order}/pay"), PAY, 200)
    assert paid["order_id"] == order and paid["status"] == "active"
    assert check(alice.post(f"/v1/packets/{order}/pay"), PAY, 200) == paid
    assert code(check(alice.delete(f"/v1/packets/{order}"), PACKET, 409)) == "conflict"

    # cancel an exclusive pre-order; an over-balance pay
    exclusive = check(
        alice.post("/v1/packets", json={"kind": "exclusive", "total_yuan": "0.50", "receiver_id": "bob"}),
        "/v1/packets",
        201,
    )
    other = exclusive["order_id"]
    assert code(check(bob.delete(f"/v1/packets/{other}"), PACKET, 403)) == "forbidden"
    assert check(alice.delete(f"/v1/packets/{other}"), PACKET, 200) == {"order_id": other, "status": "cancelled"}
    assert code(check(alice.delete(f"/v1/packets/{other}"), PACKET, 404)) == "not_found"
    assert code(check(alice.post(f"/v1/packets/{other}/pay"), PAY, 404)) == "not_found"
    big = check(
        alice.post("/v1/packets", json={"kind": "equal", "count": 4, "per_share_fen": 5000, "group_id": gid}),
        "/v1/packets",
        201,
    )
    assert code(check(alice.post(f"/v1/packets/{big['order_id']}/pay"), PAY, 409)) == "insufficient_balance"

    # order ids: a bad check digit is 400 on every packet route, an unknown valid id 404
    bad_id = order[:-1] + str((int(order[-1]) + 1) % 10)
    unknown = hongbao_native.encode_order_id(1, int(order[1:7]), 1, 99_999_999_999)
    for method, suffix, template in [
        ("GET", "", PACKET),
        ("DELETE", "", PACKET),
        ("POST", "/pay", PAY),
        ("POST", "/grab", GRAB),
        ("POST", "/open", OPEN),
    ]:
        assert code(check(alice.request(method, f"/v1/packets/{bad_id}{suffix}"), template, 400)) == "bad_order_id"
        assert code(check(alice.request(method, f"/v1/packets/{unknown}{suffix}"), template, 404)) == "not_found"

    # grab and open until finished
    assert check(bob.post(f"/v1/packets/{order}/grab"), GRAB, 200) == {"status": "ok"}
    opened = check(bob.post(f"/v1/packets/{order}/open"), OPEN, 200)
    assert opened["order_id"] == order and opened["repeat"] is False and 1 <= opened["amount_fen"] <= 298
    assert check(bob.post(f"/v1/packets/{order}/open"), OPEN, 200) == {**opened, "repeat": True}
    assert check(bob.post(f"/v1/packets/{order}/grab"), GRAB, 200) == {
        "status": "opened",
        "amount_fen": opened["amount_fen"],
    }
    for method, suffix, template in [("POST", "/open", OPEN), ("POST", "/grab", GRAB), ("GET", "", PACKET)]:
        assert code(check(dave.request(method, f"/v1/packets/{order}{suffix}"), template, 403)) == "not_member"
    shares = [opened["amount_fen"]] + [
        check(c.post(f"/v1/packets/{order}/open"), OPEN, 200)["amount_fen"] for c in (carol, alice)
    ]
    assert sum(shares) == 300
    assert code(check(frank.post(f"/v1/packets/{order}/grab"), GRAB, 410)) == "finished"
    assert code(check(frank.post(f"/v1/packets/{order}/open"), OPEN, 410)) == "finished"
    details = check(frank.get(f"/v1/packets/{order}"), PACKET, 200)
    assert details["status"] == "finished" and details["opened_fen"] == 300 and details["greeting"] == "恭喜发财"
    assert [(r["user_id"], r["nickname"], r["avatar_url"]) for r in details["receipts"]] == [
        ("bob", "bob", ""),
        ("carol", "carol", ""),
        ("alice", "Alice", "https://example.com/a.png"),
    ]
    assert details["sender"] == {"user_id": "alice", **profile}
    assert details["best_luck_user_id"] in {"bob", "carol", "alice"}

    # lists and the bill (written by background jobs)
    def received() -> dict[str, Any]:
        got: dict[str, Any] = check(bob.get("/v1/me/received"), "/v1/me/received", 200)
        assert [item["order_id"] for item in got["items"]] == [order]
        return got

    assert eventually(received)["summary"]["total_fen"] == opened["amount_fen"]

    def sent_list() -> dict[str, Any]:
        got: dict[str, Any] = check(alice.get("/v1/me/sent", params={"page": 1}), "/v1/me/sent", 200)
        assert [(item["order_id"], item["amount_fen"], item["best_luck"]) for item in got["items"]] == [
            (order, 300, False)
        ]
        return got

    assert eventually(sent_list)["summary"] == {"count": 1, "total_fen": 300, "best_luck_count": 0}
    assert code(check(bob.get("/v1/me/received", params={"year": 1999}), "/v1/me/received", 400)) == "invalid_request"
    assert code(check(alice.get("/v1/me/sent", params={"page": 0}), "/v1/me/sent", 400)) == "invalid_request"
    bill = check(alice.get("/v1/me/ledger"), "/v1/me/ledger", 200)
    assert [e["kind"] for e in bill["items"]][-2:] == ["send", "topup"] and bill["items"][-2]["amount_fen"] == -300
    for page in ("x", "²", "١", "9" * 5000, "-1", str(MAX_PAGE + 1)):
        assert (
            code(check(alice.get("/v1/me/ledger", params={"page": page}), "/v1/me/ledger", 400)) == "invalid_request"
        ), page

    # under pressure, pages past the second are shed
    assert check(admin.post(PRESSURE, json={"on": True}), PRESSURE, 200) == {"on": True}
    assert "hongbao_lists_pressure 1.0" in check(anon.get("/metrics"), "/metrics", 200)
    for path in ("/v1/me/received", "/v1/me/sent", "/v1/me/ledger"):
        shed = alice.get(path, params={"page": 3})
        assert code(check(shed, path, 503)) == "degraded" and shed.headers["retry-after"] == "30", path
        assert check(alice.get(path, params={"page": 2}), path, 200)["items"] == [], path
    assert code(check(admin.post(PRESSURE, json={"on": "yes"}), PRESSURE, 400)) == "invalid_request"
    assert code(check(alice.post(PRESSURE, json={"on": False}), PRESSURE, 403)) == "forbidden"
    assert check(admin.post(PRESSURE, json={"on": False}), PRESSURE, 200) == {"on": False}
    assert check(alice.get("/v1/me/ledger", params={"page": 3}), "/v1/me/ledger", 200)["items"] == []
    assert "hongbao_lists_pressure 0.0" in check(anon.get("/metrics"), "/metrics", 200)

    # the traffic switch (one region here: it is kept, and sends stay)
    assert check(admin.get(TRAFFIC), TRAFFIC, 200) == {"new_packets": "auto"}
    weighted = {"new_packets": "weighted", "weights": {"north": 3, "south": 1}}
    assert check(admin.post(TRAFFIC, json=weighted), TRAFFIC, 200) == {
        "new_packets": "weighted",
        "weights": {"north": 3.0, "south": 1.0},
    }
    assert 'hongbao_traffic_mode{mode="weighted"} 1.0' in check(anon.get("/metrics"), "/metrics", 200)
    for bad in ({"new_packets": "east"}, {"new_packets": "north", "weights": {}}, {**weighted, "weights": {}}):
        assert code(check(admin.post(TRAFFIC, json=bad), TRAFFIC, 400)) == "invalid_request", bad
    assert code(check(alice.post(TRAFFIC, json={"new_packets": "auto"}), TRAFFIC, 403)) == "forbidden"
    assert check(admin.post(TRAFFIC, json={"new_packets": "auto"}), TRAFFIC, 200) == {"new_packets": "auto"}

    # expiry: a paid packet past its expiry is gone, then refunded
    late = check(
        alice.post("/v1/packets", json={"kind": "lucky", "count": 2, "total_fen": 100, "group_id": gid}),
        "/v1/packets",
        201,
    )["order_id"]
    expires_at = check(alice.post(f"/v1/packets/{late}/pay"), PAY, 200)["expires_at"]
    assert code(check(admin.post(CLOCK, json={"now_ms": "tomorrow"}), CLOCK, 400)) == "invalid_request"
    now_ms = int(time.time() * 1000) + DAY_MS + 3_600_000
    assert check(admin.post(CLOCK, json={"now_ms": now_ms}), CLOCK, 200)["now_ms"] >= now_ms
    assert code(check(bob.post(f"/v1/packets/{late}/grab"), GRAB, 410)) == "expired"
    assert code(check(bob.post(f"/v1/packets/{late}/open"), OPEN, 410)) == "expired"

    def refunded() -> dict[str, Any]:
        got: dict[str, Any] = check(bob.get(f"/v1/packets/{late}"), PACKET, 200)
        assert got["status"] == "refunded" and got["refunded_fen"] == 100 and got["expires_at"] == expires_at
        return got

    eventually(refunded)
    assert check(alice.post(f"/v1/packets/{late}/pay"), PAY, 200)["status"] == "refunded"

    # connection-level answers
    not_allowed = alice.put("/v1/balance")
    assert code(check.component(not_allowed, "MethodNotAllowed", 405)) == "method_not_allowed"
    assert not_allowed.headers["allow"] == "GET, HEAD"
    assert code(check.component(alice.get("/v1/nothing-here"), "NotFound", 404)) == "not_found"
    token = server.token("alice")
    too_big = raw(
        server,
        f"POST /v1/packets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {1 << 20}\r\n\r\n".encode(),
    )
    assert code(check(too_big, "/v1/packets", 413)) == "payload_too_large"
    huge_head = raw(server, f"GET /v1/balance HTTP/1.1\r\nHost: x\r\nX-Pad: {'a' * 9000}\r\n\r\n".encode())
    assert code(check(huge_head, "/v1/balance", 431)) == "headers_too_large"
    gzip = raw(server, b"POST /v1/packets HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n")
    assert code(check.component(gzip, "NotImplemented", 501)) == "not_implemented"
    http2 = raw(server, b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n")
    assert code(check.component(http2, "HttpVersionNotSupported", 505)) == "http_version_not_supported"
    garbage = raw(server, b"GET /healthz HTTP/1.1\r\nHost x\r\n\r\n")
    assert code(check(garbage, "/healthz", 400)) == "invalid_request"
    for client in (anon, admin, alice, bob, carol, frank, dave):
        client.close()

    every_success = {
        (method, path, int(s))
        for (method, path), op in spec_operations().items()
        for s in op["responses"]
        if s.startswith("2")
    }
    assert every_success <= check.seen, every_success - check.seen


def test_slow_and_surplus_connections_match_the_spec(make_server: Callable[..., Server]) -> None:
    """A head that arrives too slowly gets the documented 408, and a connection past max_connections
    the documented 503 busy."""
    server = make_server(extra_config="header_timeout_s = 0.3\nmax_connections = 3\n")
    check = Checker()
    slow = raw(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n", wait_s=0.6)
    assert code(check(slow, "/healthz", 408)) == "request_timeout"
    host, port = server.url.removeprefix("http://").split(":")
    held = [socket.create_connection((host, int(port)), timeout=10) for _ in range(3)]
    try:
        for sock in held:  # each is served, so all three count against the limit
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        # the worker answers 503 as the connection is made and closes it; the client sends nothing
        # (a request already in flight would turn the close into a reset that discards the answer)
        surplus = raw(server, b"", method="GET")
        body = check(surplus, "/healthz", 503)
        assert code(body) == "busy" and int(surplus.headers["retry-after"]) >= 1
    finally:
        for sock in held:
            sock.close()
    assert check(httpx.get(f"{server.url}/healthz"), "/healthz", 200) == {"status": "ok"}
