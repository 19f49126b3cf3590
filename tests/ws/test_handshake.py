"""The opening handshake on a live server (RFC 6455 section 4.2): what a good one gets (P-12: the
101 echoes only ``bearer``; no log line holds the token), each refusal's status (bare, no
upgrade), Origin, the reconnect cursor, and GET /v1/ws/preflight."""

from __future__ import annotations

import base64
import hashlib
import socket
from collections.abc import Iterator

import hongbao_native as hn
import httpx
import orjson
import pytest
from hongbao.server.ws_handshake import NO_TOKEN

from tests.server.conftest import Server, finish_server, start_server
from tests.ws.conftest import WS_CONFIG, push
from tests.ws.wire import Wire, address, handshake, read_answer, upgrade_request

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 section 1.3


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server that logs at debug level and takes two Origins only."""
    server = start_server(
        tmp_path_factory.mktemp("strict"),
        extra_config=WS_CONFIG + 'log_level = "debug"\n'
        'ws_allowed_origins = ["https://app.example", "http://localhost:3000"]\n',
    )
    yield server
    finish_server(server)


def test_101_echoes_only_bearer_and_no_log_holds_the_token(strict_server: Server) -> None:
    """P-12: the 101 carries the RFC 6455 accept value and `Sec-WebSocket-Protocol: bearer` alone;
    with ?token= and no subprotocol offered it names none; the token is in no log line, even at debug."""
    server = strict_server
    token = server.token("p12")
    key = base64.b64encode(b"0123456789abcdef").decode()
    answer = handshake(server, upgrade_request(server, token=token, key=key))
    assert answer.status == 101
    assert answer.headers["sec-websocket-protocol"] == "bearer"
    assert (
        answer.headers["sec-websocket-accept"]
        == base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
    )
    assert answer.headers["upgrade"].lower() == "websocket" and "upgrade" in answer.headers["connection"].lower()
    by_query = handshake(server, upgrade_request(server, target=f"/v1/ws?token={token}"))
    assert by_query.status == 101 and "sec-websocket-protocol" not in by_query.headers
    refused = handshake(server, upgrade_request(server, token=token[:-3] + "abc"))
    assert refused.status == 401
    with httpx.Client(base_url=server.url) as client:
        assert client.get("/v1/ws/preflight", headers={"authorization": f"Bearer {token}"}).status_code == 200
    log = server.log()
    assert "DEBUG" in log and token not in log and token[:-3] not in log


def test_refusals_are_bare_answers_without_upgrade(ws_server: Server) -> None:
    """Each malformed or unauthorised handshake gets its status and error code, Connection: close, and
    no upgrade; every header field once (a 426's Connection lists ``upgrade, close`` in one field,
    RFC 9110 section 7.6.1)."""
    token = ws_server.token("refused")
    cases: list[tuple[bytes, int, str]] = [
        (upgrade_request(ws_server, target="/v1/other", token=token), 404, "not_found"),
        (upgrade_request(ws_server, method="POST", token=token), 405, "method_not_allowed"),
        (upgrade_request(ws_server, token=token, version=None), 400, "invalid_request"),
        (upgrade_request(ws_server, token=token, version="8"), 426, "upgrade_required"),
        (upgrade_request(ws_server, token=token, key="c2hvcnQ="), 400, "invalid_request"),
        (upgrade_request(ws_server, token=token, key=""), 400, "invalid_request"),
        (upgrade_request(ws_server, target="/v1/ws?offset=x", token=token), 400, "invalid_request"),
        (upgrade_request(ws_server, target="/v1/ws?offset=-1", token=token), 400, "invalid_request"),
        (upgrade_request(ws_server, target="/v1/ws?offset=1&epoch=" + "e" * 65, token=token), 400, "invalid_request"),
        (upgrade_request(ws_server, target="/v1/ws?epoch=a%20b", token=token), 400, "invalid_request"),
        (upgrade_request(ws_server), 401, "unauthorized"),
        (upgrade_request(ws_server, protocols="bearer"), 401, "unauthorized"),
        (upgrade_request(ws_server, protocols="chat, " + token), 401, "unauthorized"),
        (upgrade_request(ws_server, token=token[:-3] + "abc"), 401, "unauthorized"),
        (upgrade_request(ws_server, token=ws_server.token("old", ttl_s=-60)), 401, "unauthorized"),
    ]
    for request, status, code in cases:
        answer = handshake(ws_server, request)
        assert (answer.status, orjson.loads(answer.body)["error"]["code"]) == (status, code), request
        assert "sec-websocket-accept" not in answer.headers and "close" in answer.headers["connection"]
        assert len(answer.names) == len(set(answer.names)), (request, answer.names)
        if status == 426:
            assert answer.headers["sec-websocket-version"] == "13" and answer.headers["upgrade"] == "websocket"
            assert answer.headers["connection"] == "upgrade, close"
        if status == 405:
            assert answer.headers["allow"] == "GET"


def test_a_handshake_without_a_token_says_how_to_send_one(ws_server: Server) -> None:
    """No token (none at all, or ``bearer`` offered without one) is 401 naming both ways to send it."""
    for request in (upgrade_request(ws_server), upgrade_request(ws_server, protocols="bearer")):
        answer = handshake(ws_server, request)
        assert (answer.status, orjson.loads(answer.body)["error"]) == (
            401,
            {"code": "unauthorized", "message": NO_TOKEN},
        )
    assert "Sec-WebSocket-Protocol: bearer, <jwt>" in NO_TOKEN and "?token=<jwt>" in NO_TOKEN


def test_reconnect_cursor_reaches_the_hub_and_early_frames_wait_for_attach(ws_server: Server) -> None:
    """?offset=&epoch= reach the hub: three events queued while offline are replayed after the
    cursor (all three with an empty or no cursor); a subscribe sent in the same write as the
    request head is decoded after the head and answered after the replay (held until attach returns)."""
    with ws_server.client("admin", admin=True) as admin:
        queued = [push(admin, "cursor", {"n": n}) for n in (1, 2, 3)]
    assert [q["result"] for q in queued] == ["queued"] * 3
    epoch = queued[0]["epoch"]
    subscribe = hn.encode_frame(hn.OP_TEXT, b'{"type":"subscribe","topic":"news"}', mask_key=b"abcd")
    for query, offsets in [(f"offset=1&epoch={epoch}", [2, 3]), ("offset=&epoch=", [1, 2, 3]), ("", [1, 2, 3])]:
        with socket.create_connection(address(ws_server), timeout=10) as sock:
            target = "/v1/ws" + (f"?{query}" if query else "")
            sock.sendall(upgrade_request(ws_server, target=target, token=ws_server.token("cursor")) + subscribe)
            wire = Wire(sock, read_answer(sock))
            got = [orjson.loads(frame.payload) for frame in (wire.recv() for _ in range(len(offsets) + 1)) if frame]
            assert [(m["type"], m.get("offset"), m.get("data")) for m in got[:-1]] == [
                ("event", n, {"n": n}) for n in offsets
            ]
            assert got[-1] == {"type": "subscribed", "topic": "news"}
            sock.sendall(hn.encode_close(1000, mask_key=b"abcd"))
            assert wire.close_code() == 1000


def test_plain_get_and_preflight(ws_server: Server) -> None:
    """GET /v1/ws without an upgrade gets 426, with or without a token (the docs: the token is checked
    last, and only in a handshake); the preflight answers 200 with a token, 401 without."""
    good = {"authorization": f"Bearer {ws_server.token('pre')}"}
    with httpx.Client(base_url=ws_server.url) as client:
        plain = client.get("/v1/ws", headers=good)
        assert plain.status_code == 426 and plain.headers["upgrade"] == "websocket"
        assert plain.headers["sec-websocket-version"] == "13" and plain.json()["error"]["code"] == "upgrade_required"
        assert client.get("/v1/ws").status_code == 426
        assert client.get("/v1/ws/preflight", headers=good).json() == {"status": "ok"}
        assert client.get("/v1/ws/preflight").json()["error"]["code"] == "unauthorized"


def test_origin_list(strict_server: Server) -> None:
    """With ws_allowed_origins set, a listed Origin (any case) or none passes; any other gets 403,
    at the preflight too."""
    server = strict_server
    token = server.token("origin")
    for origin, status in [
        ("https://app.example", 101),
        ("HTTPS://APP.EXAMPLE", 101),
        (None, 101),
        ("https://evil.example", 403),
        ("null", 403),
    ]:
        extra = {"Origin": origin} if origin is not None else {}
        assert handshake(server, upgrade_request(server, token=token, extra=extra)).status == status, origin
        preflight = httpx.get(f"{server.url}/v1/ws/preflight", headers={"authorization": f"Bearer {token}", **extra})
        assert preflight.status_code == (200 if status == 101 else 403), origin
