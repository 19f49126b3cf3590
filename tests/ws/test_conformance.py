"""The Autobahn testsuite's case families (https://github.com/crossbario/autobahn-testsuite)
re-done against a live server over raw sockets, each with the exact outcome on the wire: the
server frames that come back (pongs for pings, the app pong for an app ping message, which proves
a message was reassembled and reached the app layer), then either a still-open connection (a
further app ping is answered, then a clean 1000 close) or the server's close code and the end of
the TCP connection. Also push cases P-20 (control frames inside fragments), P-21 (UTF-8), P-22
(unmasked frames), P-23 (lengths) and P-25 (pings).

Families: 1 framing (lengths 0/125/126/65535/65536), 2 ping/pong, 3 reserved bits, 4 opcodes,
5 fragmentation, 6 UTF-8, 7 close, 9 limits (``ws_max_message_bytes`` = 65536), plus what the
app layer refuses (binary 1003; text that is valid UTF-8 but not a JSON object is answered with an
error message and the connection stays open: 1007 is for text that is not UTF-8). Valid client
frames come from the native encoder with a fresh mask; invalid ones are made by hand."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import hongbao_native as hn
import pytest

from tests.native.test_ws_conformance import f as hand_made
from tests.server.conftest import Server
from tests.ws.wire import PING_MESSAGE, PONG_MESSAGE, Wire

T, B, C, X, P, Q = hn.OP_TEXT, hn.OP_BINARY, hn.OP_CONT, hn.OP_CLOSE, hn.OP_PING, hn.OP_PONG
LIMIT = 65536
NO_STATUS = 1005  # an empty close frame reads as 1005 (RFC 6455 section 7.1.5)
APP_PONG = (T, PONG_MESSAGE)
NOT_AN_OBJECT = (T, b'{"type":"error","code":"invalid_request","message":"a message must be a JSON object"}')
NOT_JSON = (
    T,
    b'{"type":"error","code":"invalid_request","message":"a message must be a JSON object: '
    b"this one does not parse (RFC 8259: valid UTF-8, numbers in a double's range)\"}",
)
MASK = b"\x00\x00\x00\x00"  # an all-zero mask key: the payload goes as it is


def m(opcode: int, payload: bytes = b"", fin: bool = True) -> bytes:
    """A valid client frame: the native encoder, masked with a fresh key."""
    return hn.encode_frame(opcode, payload, fin=fin, mask_key=os.urandom(4))


def client_close(code: int, reason: bytes = b"") -> bytes:
    """A masked close frame with any code and reason bytes (valid or not)."""
    return hand_made(X, code.to_bytes(2, "big") + reason)


def app_ping(size: int) -> bytes:
    """An app ping message of exactly ``size`` bytes (a JSON object padded with a string field)."""
    head = b'{"type":"ping","pad":"'
    return head + b"x" * (size - len(head) - 2) + b'"}'


def pieces(data: bytes, size: int) -> list[bytes]:
    """``data`` as text fragments of ``size`` bytes each (the last one FIN)."""
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    return [m(T if i == 0 else C, chunk, fin=i == len(chunks) - 1) for i, chunk in enumerate(chunks)]


@dataclass
class Case:
    """Frames to send, server frames expected back, then the close code (None: stays open)."""

    id: str
    frames: list[bytes]
    back: list[tuple[int, bytes]] = field(default_factory=list)
    close: int | None = None
    client_closed: bool = False


def ok(cid: str, frames: list[bytes], *back: tuple[int, bytes]) -> Case:
    return Case(cid, frames, list(back))


def fail(cid: str, frames: list[bytes], code: int, *back: tuple[int, bytes]) -> Case:
    return Case(cid, frames, list(back), code)


def echoed(cid: str, frames: list[bytes], code: int, *back: tuple[int, bytes]) -> Case:
    return Case(cid, frames, list(back), code, client_closed=True)


EURO = "€".encode()  # E2 82 AC
CASES: list[Case] = [
    # 1 framing: the app ping message at each length boundary, and a zero-length fragment
    *[ok(f"1.1-text-{n}", [m(T, app_ping(n))], APP_PONG) for n in (125, 126, 65535, 65536)],
    ok("1.1-text-0-fragment", [m(T, b"", fin=False), m(C, PING_MESSAGE)], APP_PONG),
    ok("1.1-two-messages-one-write", [m(T, PING_MESSAGE) + m(T, PING_MESSAGE)], APP_PONG, APP_PONG),
    *[fail(f"1.2-binary-{n}", [m(B, b"\xfe" * n)], 1003) for n in (0, 125, 126, 65535, 65536)],
    # 2 ping/pong (P-25)
    ok("2.1-empty", [m(P)], (Q, b"")),
    ok("2.3-binary", [m(P, bytes(range(256))[:125])], (Q, bytes(range(256))[:125])),
    fail("2.5-ping-126", [hand_made(P, b"\xfe" * 126)], 1002),
    ok("2.7-unsolicited-pong", [m(Q), m(Q, b"unsolicited")]),
    ok("2.10-ten-pings", [m(P, b"p%d" % i) for i in range(10)], *[(Q, b"p%d" % i) for i in range(10)]),
    ok(
        "2.11-ten-pings-one-write",
        [b"".join(m(P, b"p%d" % i) for i in range(10))],
        *[(Q, b"p%d" % i) for i in range(10)],
    ),
    # 3 reserved bits (no extension negotiated)
    fail("3.1-rsv1", [hand_made(T, PING_MESSAGE, rsv=4)], 1002),
    fail("3.2-rsv2-after-valid", [m(T, PING_MESSAGE), hand_made(T, PING_MESSAGE, rsv=2), m(P)], 1002, APP_PONG),
    fail("3.3-rsv3", [hand_made(T, PING_MESSAGE, rsv=1)], 1002),
    fail("3.6-ping-rsv", [hand_made(P, b"x", rsv=6)], 1002),
    fail("3.7-close-rsv", [hand_made(X, b"\x03\xe8", rsv=7)], 1002),
    # 4 reserved opcodes
    *[fail(f"4-opcode-{op}", [hand_made(op, b"x")], 1002) for op in (3, 4, 5, 6, 7, 11, 12, 13, 14, 15)],
    fail("4-opcode-after-valid", [m(T, PING_MESSAGE), hand_made(5, b"")], 1002, APP_PONG),
    # 5 fragmentation (P-20)
    ok("5-control-inside-fragments", [m(T, b'{"type":', fin=False), m(P, b"x"), m(C, b'"ping"}')], (Q, b"x"), APP_PONG),
    ok("5-one-byte-fragments", pieces(PING_MESSAGE, 1), APP_PONG),
    ok("5-empty-middle-fragments", [m(T, b"{", fin=False), m(C, b"", fin=False), m(C, PING_MESSAGE[1:])], APP_PONG),
    fail("5-new-text-while-open", [m(T, b"{", fin=False), m(T, PING_MESSAGE)], 1002),
    fail("5-continuation-with-nothing-open", [m(C, PING_MESSAGE)], 1002),
    fail("5-fragmented-ping", [hand_made(P, b"x", fin=False), hand_made(C, b"y")], 1002),
    # 6 UTF-8 (P-21)
    ok("6-euro-split-in-three", pieces(b'{"type":"ping","x":"' + EURO + b'"}', 1), APP_PONG),
    ok(
        "6-euro-split-at-fragment-edge",
        [m(T, b'{"type":"ping","x":"' + EURO[:2], fin=False), m(C, EURO[2:] + b'"}')],
        APP_PONG,
    ),
    ok("6-kosme", [m(T, '{"type":"ping","x":"κόσμε 红包 🧧"}'.encode())], APP_PONG),
    fail("6-surrogate-ED-A0-80", [m(T, b'{"type":"ping","x":"\xed\xa0\x80"}')], 1007),
    fail("6-overlong", [m(T, b'{"type":"ping","x":"\xc0\xaf"}')], 1007),
    fail("6-above-10FFFF", [m(T, b'{"type":"ping","x":"\xf4\x90\x80\x80"}')], 1007),
    fail("6-fails-at-the-offending-byte", [m(T, b'{"type":"ping","x":"\xff', fin=False)], 1007),
    fail("6-message-ends-inside-a-code-point", [m(T, b'{"x":"' + EURO[:2], fin=False), m(C, b"")], 1007),
    fail("6-close-reason-FF", [client_close(1000, b"\xff")], 1007),
    # 7 close
    echoed("7.1-close-1000", [client_close(1000, b"bye")], 1000),
    echoed("7.1-close-empty", [hand_made(X, b"")], NO_STATUS),
    echoed("7.1-data-after-close-ignored", [client_close(1000) + m(T, PING_MESSAGE) + m(P, b"late")], 1000),
    echoed("7.1-pong-before-close", [m(P, b"a"), client_close(1001)], 1001, (Q, b"a")),
    *[
        echoed(f"7.7-valid-code-{code}", [client_close(code)], code)
        for code in (1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999)
    ],
    echoed("7.5-reason-123-bytes", [client_close(1000, b"r" * 123)], 1000),
    fail("7.3-close-one-byte", [hand_made(X, b"\x03")], 1002),
    fail("7.5-reason-124-bytes", [client_close(1000, b"r" * 124)], 1002),
    *[
        fail(f"7.9-invalid-code-{code}", [client_close(code)], 1002)
        for code in (0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535)
    ],
    # 9 limits (P-23)
    fail("9-text-over-limit", [m(T, app_ping(LIMIT + 1))], 1009),
    fail("9-1-TiB-header-alone", [bytes([0x81, 0xFF]) + (1 << 40).to_bytes(8, "big") + MASK], 1009),
    fail("9-fragments-pass-the-limit", [m(T, b"{" + b" " * (LIMIT - 1), fin=False), bytes([0x80, 0x81]) + MASK], 1009),
    fail("9-length-top-bit", [bytes([0x81, 0xFF]) + (1 << 63 | 5).to_bytes(8, "big") + MASK], 1002),
    fail("9-non-minimal-16", [bytes([0x81, 0xFE, 0x00, 0x05]) + MASK + b"hello"], 1002),
    fail("9-non-minimal-64", [bytes([0x81, 0xFF]) + (200).to_bytes(8, "big") + MASK], 1002),
    # masking (P-22): unmasked client frames fail, and "Hi" never reaches the app
    fail("P22-unmasked-Hi", [bytes([0x81, 0x02, 0x48, 0x69])], 1002),
    fail("P22-unmasked-app-ping", [hn.encode_frame(T, PING_MESSAGE)], 1002),
    # the app layer
    ok("app-empty-text", [m(T)], NOT_JSON),
    ok("app-not-json", [m(T, b"hello")], NOT_JSON),
    ok("app-number-past-a-double", [m(T, b'{"type":"ack","offset":1e400}')], NOT_JSON),
    ok("app-lone-surrogate", [m(T, b'{"type":"\\ud800"}')], NOT_JSON),
    ok("app-json-array", [m(T, b'[{"type":"ping"}]')], NOT_AN_OBJECT),
    ok("app-not-json-then-ping", [m(T, b"null"), m(T, PING_MESSAGE)], NOT_AN_OBJECT, APP_PONG),
    fail("app-binary-after-ping", [m(T, PING_MESSAGE), m(B, b"\x00")], 1003, APP_PONG),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(ws_server: Server, case: Case) -> None:
    """The server answers the case's frames with exactly the expected frames, then stays open
    or closes with exactly the expected code and ends the TCP connection."""
    wire = Wire.open(ws_server, ws_server.token("autobahn"))
    try:
        for data in case.frames:
            wire.send_raw(data)
        got = []
        for _ in case.back:
            frame = wire.recv()
            got.append((frame.opcode, frame.payload) if frame is not None else None)
        assert got == case.back
        if case.close is None:
            wire.ping_pong()  # nothing else came back, and the connection is still open
            wire.send_raw(client_close(1000))
            assert wire.close_code() == 1000
        else:
            frame = wire.recv()
            assert frame is not None and frame.opcode == X, frame
            assert (frame.close_code or NO_STATUS) == case.close
            if not case.client_closed and case.close not in (1002, 1007, 1009):
                wire.send_raw(client_close(1000))  # the close handshake's reply
        assert wire.eof(2.0)
    finally:
        wire.close()


def test_case_ids_are_unique() -> None:
    """Each case has its own id."""
    assert len({c.id for c in CASES}) == len(CASES)
