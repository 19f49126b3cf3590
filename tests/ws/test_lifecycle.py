"""A connection's life on a live server after the 101: the close handshake and its timeout (P-19),
idle close (P-26), token expiry (4003), the output cap (P-01, 1013), pongs ahead of queued data
(P-04), the hub's cleanup after every kind of end, and 1001 at shutdown. Timeouts are
shrunk (tests/ws/conftest.py): idle 2 s, close wait 0.5 s, token grace 0.5 s."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable

import hongbao_native as hn
import httpx
import jwt
import orjson

from tests.server.conftest import Server
from tests.ws.conftest import push
from tests.ws.wire import PING_MESSAGE, PONG_MESSAGE, Wire

IDLE_S, CLOSE_WAIT_S, GRACE_S = 2.0, 0.5, 0.5
SWEEP_S = 0.125  # the registry sweeps every min(1, close wait / 4, idle / 8) seconds
CAP = 1 << 20


def client_close(code: int) -> bytes:
    """A masked close frame."""
    return hn.encode_close(code, mask_key=os.urandom(4))


def logged_out(server: Server, admin: httpx.Client, uid: str) -> bool:
    """Whether ``uid``'s session is gone within 2 s: a push to the user stays queued."""
    deadline = time.monotonic() + 2
    while push(admin, uid, "probe")["result"] != "queued":
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_unanswered_close_drops_tcp_after_the_close_wait(ws_server: Server) -> None:
    """P-19: after the server's close (1003 for a binary message) a client that keeps sending and
    never answers gets no more answers, and TCP is dropped within the close wait (+ a sweep)."""
    wire = Wire.open(ws_server, ws_server.token("p19a"))
    wire.send(hn.OP_BINARY, b"\x00")
    frame = wire.recv()
    assert frame is not None and frame.close_code == 1003
    closed_at = time.monotonic()
    for _ in range(5):
        wire.send(hn.OP_TEXT, PING_MESSAGE)
        wire.send(hn.OP_PING, b"still here")
        time.sleep(0.05)
    assert wire.eof(3.0)
    took = time.monotonic() - closed_at
    assert CLOSE_WAIT_S - 0.05 <= took <= CLOSE_WAIT_S + SWEEP_S + 0.5, took
    assert not wire.frames


def test_idle_close_clean_reply_and_half_open_drop(ws_server: Server) -> None:
    """P-26 and P-19: two clients that send nothing are closed (1000 "idle timeout") after the
    idle timeout. One replies after one more data frame: its connection ends at once and the data
    frame got no answer. The other went silent (half-open): its TCP is dropped after the close
    wait, and its session is logged out."""
    replying, silent = Wire.open(ws_server, ws_server.token("p26")), Wire.open(ws_server, ws_server.token("p26b"))
    silent.attached()
    replying.attached()
    started = time.monotonic()
    frame = replying.recv(IDLE_S + 2)
    took = time.monotonic() - started
    assert frame is not None and (frame.close_code, frame.close_reason) == (1000, "idle timeout")
    assert IDLE_S - 0.05 <= took <= IDLE_S + SWEEP_S + 0.5, took
    replying.send(hn.OP_TEXT, PING_MESSAGE)
    replied_at = time.monotonic()
    replying.send_raw(client_close(1000))
    assert replying.eof(2.0) and time.monotonic() - replied_at < CLOSE_WAIT_S
    assert not replying.frames  # the data frame after the server's close got no answer
    with ws_server.client("admin", admin=True) as admin:
        assert logged_out(ws_server, admin, "p26b")
    assert silent.close_code() == 1000 and silent.eof(0.5)


def test_expired_token_closes_with_4003_after_the_grace(ws_server: Server) -> None:
    """A connection whose token expires (the verifier's 5 s leeway lets it in) is closed with 4003
    once exp + ws_token_grace_s has passed, even while it keeps pinging."""
    token = ws_server.token("expiring", ttl_s=1)
    exp = jwt.decode(token, options={"verify_signature": False})["exp"]
    wire = Wire.open(ws_server, token)
    while True:
        wire.send(hn.OP_TEXT, PING_MESSAGE)
        frame = wire.recv()
        assert frame is not None
        if frame.opcode == hn.OP_CLOSE:
            break
        assert frame.payload == PONG_MESSAGE and time.time() < exp + GRACE_S + 1.0
        time.sleep(0.2)
    assert (frame.close_code, frame.close_reason) == (4003, "token expired")
    assert time.time() >= exp + GRACE_S - 0.05


def test_slow_consumer_is_capped_and_closed_with_1013(ws_server: Server) -> None:
    """P-01 (the WS layer's part): a client with a 4 KB receive buffer that never reads is pushed
    8 KB messages: once its queued output would pass 1 MiB the send is refused (the push answers
    "queued": it stays in the offline log) and the worker's memory has grown by less than 1.5x the
    cap; reading at once shows what was already in the socket's buffers, then 1013 (the rest of the
    queue is dropped with the close); a reconnect after what was read gets every other message."""
    worker = int(
        subprocess.run(["pgrep", "-P", str(ws_server.process.pid)], capture_output=True, text=True).stdout.split()[0]
    )

    def rss() -> int:
        status = open(f"/proc/{worker}/status").read()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]

    with ws_server.client("admin", admin=True) as admin:
        for _ in range(200):  # warm up: the same pushes to an offline user (database cache, allocator)
            push(admin, "p01-warm-up", "x" * 8000)
        wire = Wire.open(ws_server, ws_server.token("p01"), rcvbuf=4096)
        wire.attached()
        before = rss()
        delivered = 0
        while push(admin, "p01", "x" * 8000)["result"] == "delivered_to_socket":
            delivered += 1
        grown = rss() - before
        messages = []
        while (frame := wire.recv()) is not None and frame.opcode == hn.OP_TEXT:
            messages.append(orjson.loads(frame.payload))
        assert frame is not None and frame.close_code == 1013
        total = 200
        for _ in range(total - delivered - 1):
            assert push(admin, "p01", "x" * 8000)["result"] == "queued"
    assert CAP - 256 * 1024 <= delivered * 8100 <= CAP + 256 * 1024, delivered  # kernel buffers are not counted
    assert grown < 1.5 * CAP, grown
    read = len(messages)
    assert [m["offset"] for m in messages] == list(range(1, read + 1)) and 0 < read < delivered
    wire.close()
    again = Wire.open(ws_server, ws_server.token("p01"), query=f"offset={read}&epoch={messages[0]['epoch']}")
    replayed = [
        orjson.loads(f.payload).get("offset") for f in (again.recv() for _ in range(total - read)) if f is not None
    ]
    assert replayed == list(range(read + 1, total + 1))  # nothing lost: the rest waits in the offline log


def test_pong_leaves_ahead_of_queued_data(ws_server: Server) -> None:
    """P-04: with 512 KB of messages queued for a client that is not reading (below the cap), its
    ping is answered ahead of most of that data, well within a second of the client reading again."""
    wire = Wire.open(ws_server, ws_server.token("p04"), rcvbuf=4096)
    wire.attached()
    with ws_server.client("admin", admin=True) as admin:
        assert {push(admin, "p04", "x" * 8000)["result"] for _ in range(64)} == {"delivered_to_socket"}
    wire.send(hn.OP_PING, b"p1")
    time.sleep(0.1)
    started, before_pong = time.monotonic(), 0
    while (frame := wire.recv()) is not None and frame.opcode == hn.OP_TEXT:
        before_pong += 1
    assert frame is not None and (frame.opcode, frame.payload) == (hn.OP_PONG, b"p1")
    assert time.monotonic() - started < 1.0
    assert before_pong < 32, before_pong  # the pong jumped the server's queue (what is left of 64)
    rest = [wire.recv() for _ in range(64 - before_pong)]
    assert [orjson.loads(f.payload)["offset"] for f in rest if f is not None] == list(range(before_pong + 1, 65)), (
        before_pong
    )
    wire.ping_pong()


def test_every_end_logs_the_session_out(ws_server: Server) -> None:
    """Client close, server close, protocol failure and a dropped TCP connection each end in the
    hub's cleanup: a push to the user is then queued, not sent."""
    ends: list[Callable[[Wire], object]] = [
        lambda w: (w.send_raw(client_close(1000)), w.eof()),
        lambda w: (w.send(hn.OP_BINARY, b""), w.close_code(), w.send_raw(client_close(1000)), w.eof()),
        lambda w: (w.send_raw(b"\x81\x02Hi"), w.eof()),
        lambda w: w.close(),
    ]
    with ws_server.client("admin", admin=True) as admin:
        for i, end in enumerate(ends):
            wire = Wire.open(ws_server, ws_server.token(f"end{i}"))
            wire.attached()
            assert push(admin, f"end{i}", "hi")["result"] == "delivered_to_socket"
            end(wire)
            wire.close()
            assert logged_out(ws_server, admin, f"end{i}"), i


def test_shutdown_closes_every_connection_with_1001(make_ws_server: Callable[..., Server]) -> None:
    """SIGTERM: every open connection gets 1001 going away; the ones that answer end at once, the
    silent one is dropped after the close wait; the server exits 0."""
    server = make_ws_server(workers=2)
    wires = [Wire.open(server, server.token(f"bye{i}")) for i in range(4)]
    for wire in wires:
        wire.ping_pong()
    server.process.send_signal(signal.SIGTERM)
    for wire in wires:
        assert wire.close_code() == 1001
    for wire in wires[:3]:
        wire.send_raw(client_close(1001))
    assert all(wire.eof(3.0) for wire in wires)
    assert server.process.wait(timeout=10) == 0
    assert [f.payload for w in wires for f in w.frames] == []
    assert PONG_MESSAGE not in server.log().encode()
