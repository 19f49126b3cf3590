"""The Autobahn testsuite's case families (https://github.com/crossbario/autobahn-testsuite), re-done
at the decoder level: each case is a list of client frames and the exact outcome, either the
frames delivered or the frames delivered before the failure and its RFC 6455 close code.

Every case runs fed three ways: in one chunk, one frame per feed, and one byte per feed (small
streams only). Frames decoded in the feed that raises are dropped with the error, so the
one-chunk run checks the close code and a prefix; the other two check the frames exactly.

Families: 1 framing, 2 ping/pong, 3 reserved bits, 4 reserved opcodes, 5 fragmentation,
6 UTF-8, 7 close, 9 limits (sizes scaled to a debug build). The decoder does not track the
closing handshake (frames after a close are still decoded; the connection layer stops reading),
so Autobahn's 7.1.x cases appear here as plain decoding."""

from __future__ import annotations

from dataclasses import dataclass, field

import hongbao_native as hn
import pytest

KEY = b"\x9a\x01\xfe\x42"
LIMIT = 16 << 20
T, B, C, X, P, Q = hn.OP_TEXT, hn.OP_BINARY, hn.OP_CONT, hn.OP_CLOSE, hn.OP_PING, hn.OP_PONG


def f(opcode: int, payload: bytes = b"", fin: bool = True, rsv: int = 0) -> bytes:
    """A masked client frame built by hand (so invalid frames can be made too)."""
    n = len(payload)
    b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
    if n < 126:
        head = bytes([b0, 0x80 | n])
    elif n < 65536:
        head = bytes([b0, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([b0, 0x80 | 127]) + n.to_bytes(8, "big")
    return (
        head + KEY + bytes(b ^ KEY[i % 4] for i, b in enumerate(payload))
        if n < 4096
        else head + KEY + _mask_fast(payload)
    )


def _mask_fast(payload: bytes) -> bytes:
    stream = (KEY * (len(payload) // 4 + 1))[: len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(stream, "big")).to_bytes(len(payload), "big")


def close(code: int, reason: bytes = b"") -> bytes:
    return f(X, code.to_bytes(2, "big") + reason)


@dataclass
class Case:
    id: str
    frames: list[bytes]
    delivered: list[tuple[int, bytes]] = field(default_factory=list)
    close_code: int | None = None
    max_frame: int = LIMIT
    max_msg: int = LIMIT


def ok(cid: str, frames: list[bytes], *delivered: tuple[int, bytes], **kw: int) -> Case:
    return Case(cid, frames, list(delivered), None, **kw)


def fail(cid: str, frames: list[bytes], code: int, *delivered: tuple[int, bytes], **kw: int) -> Case:
    return Case(cid, frames, list(delivered), code, **kw)


def text_case(cid: str, payload: bytes, valid: bool) -> list[Case]:
    """6.x: one payload as a single frame, fragmented per byte (code points split), and per frame."""
    frags = [f(T if i == 0 else C, payload[i : i + 1], fin=i == len(payload) - 1) for i in range(len(payload))] or [
        f(T)
    ]
    if valid:
        return [ok(cid, [f(T, payload)], (T, payload)), ok(cid + "-bytefrags", frags, (T, payload))]
    return [fail(cid, [f(T, payload)], 1007), fail(cid + "-bytefrags", frags, 1007)]


KOSME = "κόσμε".encode()
HELLO = "Hello-µ@ßöäüàá-UTF-8!!".encode()
SMALL = b"Hello, world!"
BIN8 = bytes([0x00, 0xFF, 0xFE, 0xFD, 0xFC, 0xFB, 0x00, 0xFF])

CASES: list[Case] = []

# 1.x framing: text and binary across the length encodings.
for i, n in enumerate([0, 125, 126, 127, 128, 65535, 65536], start=1):
    CASES.append(ok(f"1.1.{i}", [f(T, b"*" * n)], (T, b"*" * n)))
    CASES.append(ok(f"1.2.{i}", [f(B, b"\xfe" * n)], (B, b"\xfe" * n)))


def chop(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


CASES.append(ok("1.1.8-chopped-997", chop(f(T, b"*" * 65536), 997), (T, b"*" * 65536)))
CASES.append(ok("1.2.8-chopped-997", chop(f(B, b"\xfe" * 65536), 997), (B, b"\xfe" * 65536)))

# 2.x pings and pongs.
CASES += [
    ok("2.1", [f(P)], (P, b"")),
    ok("2.2", [f(P, SMALL)], (P, SMALL)),
    ok("2.3", [f(P, BIN8)], (P, BIN8)),
    ok("2.4", [f(P, b"\xfe" * 125)], (P, b"\xfe" * 125)),
    fail("2.5", [f(P, b"\xfe" * 126)], 1002),
    ok("2.6-bytewise", list(map(bytes, zip(f(P, b"\xfe" * 125)))), (P, b"\xfe" * 125)),
    ok("2.7", [f(Q)], (Q, b"")),
    ok("2.8", [f(Q, b"unsolicited pong payload")], (Q, b"unsolicited pong payload")),
    ok("2.9", [f(Q, b"unsolicited"), f(P, b"ping")], (Q, b"unsolicited"), (P, b"ping")),
    ok("2.10", [f(P, b"payload-%d" % i) for i in range(10)], *[(P, b"payload-%d" % i) for i in range(10)]),
    ok(
        "2.11-bytewise",
        list(map(bytes, zip(b"".join(f(P, b"payload-%d" % i) for i in range(10))))),
        *[(P, b"payload-%d" % i) for i in range(10)],
    ),
]

# 3.x reserved bits (no extension negotiated): 1002, frames before it still delivered.
CASES += [
    fail("3.1", [f(T, SMALL, rsv=1)], 1002),
    fail("3.2", [f(T, SMALL), f(T, SMALL, rsv=2), f(P)], 1002, (T, SMALL)),
    fail("3.3", [f(T, SMALL), f(T, SMALL, rsv=3), f(P)], 1002, (T, SMALL)),
    fail("3.4", [f(T, SMALL), f(T, SMALL, rsv=4), f(P)], 1002, (T, SMALL)),
    fail("3.5", [f(B, BIN8, rsv=5)], 1002),
    fail("3.6", [f(P, SMALL, rsv=6)], 1002),
    fail("3.7", [f(X, b"\x03\xe8", rsv=7)], 1002),
    fail("3.x-continuation-rsv1", [f(T, b"a", fin=False), f(C, b"b", rsv=4)], 1002),
]

# 4.x reserved opcodes: non-control 3-7 and control 11-15.
for i, op in enumerate([3, 4, 5, 6, 7], start=1):
    CASES.append(fail(f"4.1.{i}", [f(T, SMALL), f(op, b"reserved" if i % 2 == 0 else b""), f(P)], 1002, (T, SMALL)))
for i, op in enumerate([11, 12, 13, 14, 15], start=1):
    CASES.append(fail(f"4.2.{i}", [f(T, SMALL), f(op, b"reserved" if i % 2 == 0 else b""), f(P)], 1002, (T, SMALL)))

# 5.x fragmentation.
CASES += [
    fail("5.1", [f(P, b"frag1", fin=False), f(C, b"frag2")], 1002),
    fail("5.2", [f(Q, b"frag1", fin=False), f(C, b"frag2")], 1002),
    ok("5.3", [f(T, b"frag1", fin=False), f(C, b"frag2")], (T, b"frag1frag2")),
    ok("5.4-bytewise", list(map(bytes, zip(f(T, b"frag1", fin=False) + f(C, b"frag2")))), (T, b"frag1frag2")),
    ok("5.6", [f(T, b"frag1", fin=False), f(P, b"ping"), f(C, b"frag2")], (P, b"ping"), (T, b"frag1frag2")),
    ok(
        "5.8-bytewise",
        list(map(bytes, zip(f(T, b"frag1", fin=False) + f(P, b"ping") + f(C, b"frag2")))),
        (P, b"ping"),
        (T, b"frag1frag2"),
    ),
    fail("5.9", [f(C, b"non-continuation payload"), f(T, b"Hello, world!")], 1002),
    fail("5.12", [f(C, b"non-continuation payload", fin=False), f(T, b"Hello, world!")], 1002),
    fail(
        "5.15",
        [f(T, b"fragment1", fin=False), f(C, b"fragment2"), f(C, b"fragment3", fin=False), f(T, b"fragment4")],
        1002,
        (T, b"fragment1fragment2"),
    ),
    fail("5.16", [f(C, b"fragment1", fin=False), f(T, b"fragment2", fin=False), f(C, b"fragment3")], 1002),
    fail("5.17", [f(C, b"fragment1"), f(T, b"fragment2", fin=False), f(C, b"fragment3")], 1002),
    fail("5.18", [f(T, b"fragment1", fin=False), f(T, b"fragment2")], 1002),
    ok(
        "5.19",
        [
            f(T, b"fragment1", fin=False),
            f(C, b"fragment2", fin=False),
            f(P, b"pong1"),
            f(C, b"fragment3", fin=False),
            f(C, b"fragment4", fin=False),
            f(P, b"pong2"),
            f(C, b"fragment5"),
        ],
        (P, b"pong1"),
        (P, b"pong2"),
        (T, b"fragment1fragment2fragment3fragment4fragment5"),
    ),
    ok("5.x-empty-fragments", [f(B, b"", fin=False), f(C, b"", fin=False), f(C, b"")], (B, b"")),
    ok("5.x-close-inside-fragments", [f(B, b"a", fin=False), close(1000), f(C, b"b")], (X, b"\x03\xe8"), (B, b"ab")),
    fail("5.x-fragmented-close", [f(X, b"\x03\xe8", fin=False)], 1002),
]

# 6.x UTF-8 handling.
CASES += [
    ok("6.1.1", [f(T)], (T, b"")),
    ok("6.1.2", [f(T, fin=False), f(C, fin=False), f(C)], (T, b"")),
    ok("6.1.3", [f(T, fin=False), f(C, b"middle frame payload", fin=False), f(C)], (T, b"middle frame payload")),
    ok("6.2.1", [f(T, HELLO)], (T, HELLO)),
    ok("6.2.2", [f(T, HELLO[:6], fin=False), f(C, HELLO[6:])], (T, HELLO)),
    ok("6.2.3-bytewise", list(map(bytes, zip(f(T, HELLO)))), (T, HELLO)),
    ok(
        "6.2.4",
        [f(T, b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5" * 4)],
        (T, b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5" * 4),
    ),
    fail("6.3.1", [f(T, b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80\x65\x64\x69\x74\x65\x64")], 1007),
    fail(
        "6.3.2-bytewise",
        list(
            map(bytes, zip(f(T, b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80\x65\x64\x69\x74\x65\x64")))
        ),
        1007,
    ),
    fail("6.4.1", [f(T, KOSME, fin=False), f(C, b"\xf4\x90\x80\x80", fin=False), f(C, b"edited")], 1007),
    fail("6.4.2", [f(T, KOSME + b"\xf4", fin=False), f(C, b"\x90\x80\x80", fin=False), f(C, b"edited")], 1007),
    fail("6.4.3-fail-fast", [f(T, KOSME + b"\xf4\x90\x80\x80" + b"edited" * 200)[:30]], 1007),
    fail(
        "6.4.4-fail-fast-bytewise",
        list(map(bytes, zip(f(T, KOSME + b"\xf4\x90\x80\x80" + b"edited" * 200)[:30]))),
        1007,
    ),
    ok("6.5.1", [f(T, KOSME)], (T, KOSME)),
    ok("6.x-split-code-points", [f(T, b"\xe2", fin=False), f(C, b"\x82", fin=False), f(C, b"\xac")], (T, "€".encode())),
    ok("6.x-split-4-byte", [f(T, b"\xf0\x9f", fin=False), f(C, b"\x98\x80")], (T, "😀".encode())),
    fail("6.x-message-ends-inside-code-point", [f(T, b"\xf0\x9f", fin=False), f(C, b"\x98")], 1007),
    fail("6.x-binary-after-bad-text", [f(T, b"ok", fin=False), f(C, b"\xff"), f(B, b"\xff")], 1007),
    ok("6.x-binary-is-not-utf8-checked", [f(B, b"\xff\xfe\xed\xa0\x80")], (B, b"\xff\xfe\xed\xa0\x80")),
]
UTF8_TABLE: list[tuple[str, bytes, bool]] = [
    # 6.6 kosme split at every byte: prefixes that stop mid code point are invalid messages.
    *[
        (f"6.6.{i}", KOSME[:i], KOSME[:i].decode("utf-8", "ignore").encode() == KOSME[:i])
        for i in range(1, len(KOSME) + 1)
    ],
    ("6.7.1", b"\x00", True),
    ("6.7.2", b"\xc2\x80", True),
    ("6.7.3", b"\xe0\xa0\x80", True),
    ("6.7.4", b"\xf0\x90\x80\x80", True),
    ("6.8.1", b"\xf8\x88\x80\x80\x80", False),
    ("6.8.2", b"\xfc\x84\x80\x80\x80\x80", False),
    ("6.9.1", b"\x7f", True),
    ("6.9.2", b"\xdf\xbf", True),
    ("6.9.3", b"\xef\xbf\xbf", True),
    ("6.9.4", b"\xf4\x8f\xbf\xbf", True),
    ("6.10.1", b"\xf7\xbf\xbf\xbf", False),
    ("6.10.2", b"\xfb\xbf\xbf\xbf\xbf", False),
    ("6.10.3", b"\xfd\xbf\xbf\xbf\xbf\xbf", False),
    ("6.11.1", b"\xed\x9f\xbf", True),
    ("6.11.2", b"\xee\x80\x80", True),
    ("6.11.3", b"\xef\xbf\xbd", True),
    ("6.11.4", b"\xf4\x8f\xbf\xbf", True),
    ("6.11.5", b"\xf4\x90\x80\x80", False),
    ("6.12.1", b"\x80", False),
    ("6.12.2", b"\xbf", False),
    ("6.12.3", b"\x80\xbf", False),
    ("6.12.4", b"\x80\xbf\x80", False),
    ("6.12.5", b"\x80\xbf\x80\xbf", False),
    ("6.12.6", b"\x80\xbf\x80\xbf\x80", False),
    ("6.12.7", b"\x80\xbf\x80\xbf\x80\xbf", False),
    ("6.12.8", bytes(range(0x80, 0xC0)), False),
    ("6.13.1", b"".join(bytes([c, 0x20]) for c in range(0xC0, 0xE0)), False),
    ("6.13.2", b"".join(bytes([c, 0x20]) for c in range(0xE0, 0xF0)), False),
    ("6.13.3", b"".join(bytes([c, 0x20]) for c in range(0xF0, 0xF8)), False),
    ("6.13.4", b"".join(bytes([c, 0x20]) for c in range(0xF8, 0xFC)), False),
    ("6.13.5", b"".join(bytes([c, 0x20]) for c in range(0xFC, 0xFE)), False),
    ("6.14.1", b"\xc0", False),
    ("6.14.2", b"\xe0\x80", False),
    ("6.14.3", b"\xf0\x80\x80", False),
    ("6.14.4", b"\xf8\x80\x80\x80", False),
    ("6.14.5", b"\xfc\x80\x80\x80\x80", False),
    ("6.14.6", b"\xdf", False),
    ("6.14.7", b"\xef\xbf", False),
    ("6.14.8", b"\xf7\xbf\xbf", False),
    ("6.14.9", b"\xfb\xbf\xbf\xbf", False),
    ("6.14.10", b"\xfd\xbf\xbf\xbf\xbf", False),
    ("6.14.x-truncated-euro", b"\xe2\x82", False),
    (
        "6.15.1",
        b"\xc0\xe0\x80\xf0\x80\x80\xf8\x80\x80\x80\xfc\x80\x80\x80\x80\xdf\xef\xbf\xf7\xbf\xbf\xfb\xbf\xbf\xbf\xfd\xbf\xbf\xbf\xbf",
        False,
    ),
    ("6.16.1", b"\xfe", False),
    ("6.16.2", b"\xff", False),
    ("6.16.3", b"\xfe\xfe\xff\xff", False),
    ("6.17.1", b"\xc0\xaf", False),
    ("6.17.2", b"\xe0\x80\xaf", False),
    ("6.17.3", b"\xf0\x80\x80\xaf", False),
    ("6.17.4", b"\xf8\x80\x80\x80\xaf", False),
    ("6.17.5", b"\xfc\x80\x80\x80\x80\xaf", False),
    ("6.18.1", b"\xc1\xbf", False),
    ("6.18.2", b"\xe0\x9f\xbf", False),
    ("6.18.3", b"\xf0\x8f\xbf\xbf", False),
    ("6.18.4", b"\xf8\x87\xbf\xbf\xbf", False),
    ("6.18.5", b"\xfc\x83\xbf\xbf\xbf\xbf", False),
    ("6.19.1", b"\xc0\x80", False),
    ("6.19.2", b"\xe0\x80\x80", False),
    ("6.19.3", b"\xf0\x80\x80\x80", False),
    ("6.19.4", b"\xf8\x80\x80\x80\x80", False),
    ("6.19.5", b"\xfc\x80\x80\x80\x80\x80", False),
    *[
        (f"6.20.{i}", s, False)
        for i, s in enumerate(
            [
                b"\xed\xa0\x80",
                b"\xed\xad\xbf",
                b"\xed\xae\x80",
                b"\xed\xaf\xbf",
                b"\xed\xb0\x80",
                b"\xed\xbe\x80",
                b"\xed\xbf\xbf",
            ],
            start=1,
        )
    ],
    *[
        (f"6.21.{i}", s, False)
        for i, s in enumerate(
            [
                b"\xed\xa0\x80\xed\xb0\x80",
                b"\xed\xa0\x80\xed\xbf\xbf",
                b"\xed\xad\xbf\xed\xb0\x80",
                b"\xed\xad\xbf\xed\xbf\xbf",
                b"\xed\xae\x80\xed\xb0\x80",
                b"\xed\xae\x80\xed\xbf\xbf",
                b"\xed\xaf\xbf\xed\xb0\x80",
                b"\xed\xaf\xbf\xed\xbf\xbf",
            ],
            start=1,
        )
    ],
    # Noncharacters are valid UTF-8 and must be accepted.
    *[
        (f"6.22.{i}", s, True)
        for i, s in enumerate(
            [
                b"\xef\xbf\xbe",
                b"\xef\xbf\xbf",
                b"\xf0\x9f\xbf\xbe",
                b"\xf0\x9f\xbf\xbf",
                b"\xf4\x8f\xbf\xbe",
                b"\xf4\x8f\xbf\xbf",
                b"\xef\xb7\x90",
                b"\xef\xb7\xaf",
            ],
            start=1,
        )
    ],
    ("6.23.1", b"\xef\xbf\xb9", True),
    ("6.23.2", b"\xef\xbf\xbd", True),
    ("6.23.x-above-u10ffff", "\U0010ffff".encode() + b"\xf4\x90\x80\x80", False),
]
for cid, payload, valid in UTF8_TABLE:
    CASES += text_case(cid, payload, valid)

# 7.x close frames.
CASES += [
    ok("7.1.1", [f(T, SMALL), close(1000)], (T, SMALL), (X, b"\x03\xe8")),
    ok("7.1.x-frames-after-close-still-decode", [close(1000), f(P, b"late")], (X, b"\x03\xe8"), (P, b"late")),
    ok("7.3.1", [f(X)], (X, b"")),
    fail("7.3.2", [f(X, b"\x03")], 1002),
    ok("7.3.3", [close(1000)], (X, b"\x03\xe8")),
    ok("7.3.4", [close(1000, b"Hello World!")], (X, b"\x03\xe8Hello World!")),
    ok("7.3.5", [close(1000, b"*" * 123)], (X, b"\x03\xe8" + b"*" * 123)),
    fail("7.3.6", [close(1000, b"*" * 124)], 1002),
    fail("7.5.1", [close(1000, KOSME + b"\xed\xa0\x80edited")], 1007),
    fail("7.5.x-truncated-code-point", [close(1000, b"\xe2\x82")], 1007),
    ok("7.5.x-multibyte-reason", [close(1001, "€😀".encode())], (X, b"\x03\xe9" + "€😀".encode())),
]
for i, code in enumerate(
    [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999], start=1
):
    CASES.append(ok(f"7.7.{i}-code-{code}", [close(code)], (X, code.to_bytes(2, "big"))))
for i, code in enumerate([0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535], start=1):
    CASES.append(fail(f"7.9.{i}-code-{code}", [close(code)], 1002))

# 9.x limits: big messages, many fragments, tiny chops; and the configured limits, exactly.
MIB = 1 << 20
CASES += [
    ok("9.1.1-64k-text", [f(T, b"*" * (64 << 10))], (T, b"*" * (64 << 10))),
    ok("9.1.3-1m-text", [f(T, b"*" * MIB)], (T, b"*" * MIB)),
    ok("9.1.4-4m-text", [f(T, b"*" * (4 * MIB))], (T, b"*" * (4 * MIB))),
    ok("9.2.3-1m-binary", [f(B, b"\xfe" * MIB)], (B, b"\xfe" * MIB)),
    ok("9.2.4-4m-binary", [f(B, b"\xfe" * (4 * MIB))], (B, b"\xfe" * (4 * MIB))),
]
for i, frag in enumerate([64, 256, 1024, 4096, 16384, 65536, 262144, MIB], start=1):
    parts = [b"*" * frag] * (MIB // frag)
    CASES.append(
        ok(
            f"9.3.{i}-1m-text-in-{frag}-byte-fragments",
            [b"".join(f(T if j == 0 else C, p, fin=j == len(parts) - 1) for j, p in enumerate(parts))],
            (T, b"*" * MIB),
        )
    )
BIG_FRAME = f(B, b"\xfe" * MIB)
for i, size in enumerate([64, 128, 256, 512, 1024, 2048, 4096], start=1):
    CASES.append(ok(f"9.6.{i}-1m-binary-chopped-{size}", chop(BIG_FRAME, size), (B, b"\xfe" * MIB)))
CASES += [
    ok("9.x-frame-at-limit", [f(B, b"x" * 1000)], (B, b"x" * 1000), max_frame=1000),
    fail("9.x-frame-over-limit", [f(B, b"x" * 1001)], 1009, max_frame=1000),
    fail("9.x-ping-over-frame-limit", [f(P, b"x" * 11)], 1009, max_frame=10),
    ok(
        "9.x-message-at-limit",
        [f(B, b"x" * 600, fin=False), f(C, b"y" * 400)],
        (B, b"x" * 600 + b"y" * 400),
        max_msg=1000,
    ),
    fail("9.x-message-over-limit", [f(B, b"x" * 600, fin=False), f(C, b"y" * 401)], 1009, max_msg=1000),
    fail(
        "9.x-message-over-limit-after-message",
        [f(T, b"a" * 1000), f(T, b"b" * 600, fin=False), f(C, b"c" * 401)],
        1009,
        (T, b"a" * 1000),
        max_msg=1000,
    ),
    fail("9.x-claimed-1-tib", [b"\x82\xff" + (1 << 40).to_bytes(8, "big")], 1009),
    fail("9.x-claimed-2-63", [b"\x82\xff" + (1 << 63).to_bytes(8, "big")], 1002),
]


def run(case: Case, chunks: list[bytes]) -> tuple[list[tuple[int, bytes]], int | None]:
    dec = hn.FrameDecoder(case.max_frame, case.max_msg)
    got: list[tuple[int, bytes]] = []
    for c in chunks:
        try:
            got += [(x.opcode, x.payload) for x in dec.feed(c)]
        except hn.ProtocolError as e:
            return got, e.close_code
    return got, None


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_autobahn_case(case: Case) -> None:
    """Each case delivers exactly its frames and fails with exactly its close code, however it is chunked."""
    stream = b"".join(case.frames)
    modes = [("per-frame", case.frames), ("one-chunk", [stream])]
    if len(stream) <= 4096:
        modes.append(("bytewise", [stream[i : i + 1] for i in range(len(stream))]))
    for mode, chunks in modes:
        got, code = run(case, chunks)
        assert code == case.close_code, mode
        if mode == "one-chunk" and code is not None:
            assert got == case.delivered[: len(got)], mode
        else:
            assert got == case.delivered, mode


def test_case_ids_are_unique() -> None:
    """Every conformance case has its own id (so a failure names one case)."""
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) > 250
