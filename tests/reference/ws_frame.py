"""Pure-Python reference of native/src/ws_frame.rs: WebSocket framing, RFC 6455.

Written for clarity, not speed. `decode_stream` decodes everything a byte string allows in one
pass, applying the same checks in the same order as the native `FrameDecoder` (so the first
violation, and its close code, is the same however the native side was fed). UTF-8 is checked
with the byte table of RFC 3629 section 4 / Unicode Table 3-7, one byte at a time, so a bad byte
fails where it stands, even in the middle of an incomplete frame."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
KNOWN_OPCODES = frozenset({OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG})
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class RefProtocolError(ValueError):
    """A protocol violation found by the reference decoder, with its RFC 6455 close code."""

    def __init__(self, message: str, close_code: int) -> None:
        super().__init__(message)
        self.close_code = close_code


@dataclass(frozen=True)
class RefFrame:
    """A delivered message or control frame."""

    opcode: int
    payload: bytes
    close_code: int | None = None
    close_reason: str = ""


def valid_close_code(code: int) -> bool:
    """RFC 6455 section 7.4 plus the IANA registry (1012-1014): the codes allowed on the wire."""
    return 1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999


def accept_key(key: str) -> str:
    """RFC 6455 section 4.2.2: base64(SHA-1(key + GUID)); the key must be base64 of 16 bytes."""
    try:
        raw = base64.b64decode(key, validate=True)
    except ValueError as e:
        raise ValueError("not base64") from e
    if base64.b64encode(raw).decode() != key:
        raise ValueError("not canonical base64")
    if len(raw) != 16:
        raise ValueError("not 16 bytes")
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def mask(payload: bytes, key: bytes, offset: int = 0) -> bytes:
    """RFC 6455 section 5.3: byte i is XORed with key[(offset + i) % 4]."""
    return bytes(b ^ key[(offset + i) % 4] for i, b in enumerate(payload))


def encode_frame(
    opcode: int, payload: bytes, *, fin: bool = True, mask_key: bytes | None = None, rsv1: bool = False
) -> bytes:
    """RFC 6455 section 5.2 with the minimal length encoding."""
    if opcode not in KNOWN_OPCODES:
        raise ValueError("bad opcode")
    if opcode >= 8 and (len(payload) > 125 or not fin):
        raise ValueError("bad control frame")
    if rsv1 and opcode not in (OP_TEXT, OP_BINARY):
        raise ValueError("rsv1 on a frame that is not a message start")
    if mask_key is not None and len(mask_key) != 4:
        raise ValueError("mask key must be 4 bytes")
    head = bytearray([(0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode])
    mbit = 0x80 if mask_key is not None else 0
    n = len(payload)
    if n < 126:
        head.append(mbit | n)
    elif n < 65536:
        head.append(mbit | 126)
        head += n.to_bytes(2, "big")
    else:
        head.append(mbit | 127)
        head += n.to_bytes(8, "big")
    if mask_key is None:
        return bytes(head) + bytes(payload)
    return bytes(head) + mask_key + mask(payload, mask_key)


def encode_close(code: int, reason: str = "", *, mask_key: bytes | None = None) -> bytes:
    """A close frame, RFC 6455 section 5.5.1."""
    body = reason.encode()
    if not valid_close_code(code) or len(body) > 123:
        raise ValueError("bad close frame")
    return encode_frame(OP_CLOSE, code.to_bytes(2, "big") + body, mask_key=mask_key)


class Utf8Checker:
    """Byte-at-a-time UTF-8 well-formedness (Unicode Table 3-7)."""

    def __init__(self) -> None:
        self.remaining = 0
        self.lo, self.hi = 0x80, 0xBF

    def feed(self, data: bytes) -> bool:
        for b in data:
            if self.remaining:
                if not self.lo <= b <= self.hi:
                    return False
                self.remaining -= 1
                self.lo, self.hi = 0x80, 0xBF
            elif b < 0x80:
                continue
            elif 0xC2 <= b <= 0xDF:
                self.remaining = 1
            elif b == 0xE0:
                self.remaining, self.lo = 2, 0xA0
            elif 0xE1 <= b <= 0xEC or 0xEE <= b <= 0xEF:
                self.remaining = 2
            elif b == 0xED:
                self.remaining, self.hi = 2, 0x9F
            elif b == 0xF0:
                self.remaining, self.lo = 3, 0x90
            elif 0xF1 <= b <= 0xF3:
                self.remaining = 3
            elif b == 0xF4:
                self.remaining, self.hi = 3, 0x8F
            else:
                return False
        return True

    @property
    def complete(self) -> bool:
        return self.remaining == 0


def decode_stream(
    data: bytes, max_frame_size: int, max_message_size: int, require_mask: bool = True
) -> tuple[list[RefFrame], int | None]:
    """Frames delivered from `data` and the close code of the first violation (None: no violation
    in the bytes so far; a trailing incomplete frame is simply pending)."""
    frames: list[RefFrame] = []
    try:
        _decode(data, max_frame_size, max_message_size, require_mask, frames)
    except RefProtocolError as e:
        return frames, e.close_code
    return frames, None


def _decode(data: bytes, max_frame: int, max_msg: int, require_mask: bool, frames: list[RefFrame]) -> None:
    pos, n = 0, len(data)
    msg_op: int | None = None  # opcode of the open fragmented message
    parts: list[bytes] = []
    claimed = 0
    utf8 = Utf8Checker()
    while pos < n:
        b0 = data[pos]
        fin, rsv, op = bool(b0 & 0x80), (b0 >> 4) & 7, b0 & 0xF
        if rsv:
            raise RefProtocolError("reserved bits", 1002)
        if op not in KNOWN_OPCODES:
            raise RefProtocolError("reserved opcode", 1002)
        control = op >= 8
        if control and not fin:
            raise RefProtocolError("fragmented control frame", 1002)
        if op == OP_CONT and msg_op is None:
            raise RefProtocolError("continuation with nothing open", 1002)
        if op in (OP_TEXT, OP_BINARY) and msg_op is not None:
            raise RefProtocolError("new message while one is open", 1002)
        if pos + 1 >= n:
            return
        b1 = data[pos + 1]
        masked, len7 = bool(b1 & 0x80), b1 & 0x7F
        if require_mask and not masked:
            raise RefProtocolError("unmasked", 1002)
        if control and len7 > 125:
            raise RefProtocolError("control frame too long", 1002)
        if op == OP_CLOSE and len7 == 1:
            raise RefProtocolError("close payload of 1 byte", 1002)
        p = pos + 2
        if len7 == 126:
            if p + 2 > n:
                return
            length = int.from_bytes(data[p : p + 2], "big")
            if length < 126:
                raise RefProtocolError("non-minimal length", 1002)
            p += 2
        elif len7 == 127:
            if p + 8 > n:
                return
            length = int.from_bytes(data[p : p + 8], "big")
            if length >> 63:
                raise RefProtocolError("length top bit", 1002)
            if length <= 0xFFFF:
                raise RefProtocolError("non-minimal length", 1002)
            p += 8
        else:
            length = len7
        if length > max_frame:
            raise RefProtocolError("frame too big", 1009)
        if not control and (claimed if op == OP_CONT else 0) + length > max_msg:
            raise RefProtocolError("message too big", 1009)
        key = None
        if masked:
            if p + 4 > n:
                return
            key = data[p : p + 4]
            p += 4
        body = data[p : p + length]
        if key is not None:
            body = mask(body, key)
        complete = len(body) == length
        if control:
            if op == OP_CLOSE and len(body) >= 2:
                code = int.from_bytes(body[:2], "big")
                if not valid_close_code(code):
                    raise RefProtocolError("bad close code", 1002)
                checker = Utf8Checker()
                if not checker.feed(body[2:]) or (complete and not checker.complete):
                    raise RefProtocolError("close reason not UTF-8", 1007)
            if not complete:
                return
            if op == OP_CLOSE and body:
                frames.append(RefFrame(op, body, int.from_bytes(body[:2], "big"), body[2:].decode()))
            else:
                frames.append(RefFrame(op, body))
        else:
            if op != OP_CONT:
                msg_op, parts, claimed, utf8 = op, [], 0, Utf8Checker()
            claimed += length
            parts.append(body)
            if msg_op == OP_TEXT and not utf8.feed(body):
                raise RefProtocolError("text not UTF-8", 1007)
            if not complete:
                return
            if fin:
                if msg_op == OP_TEXT and not utf8.complete:
                    raise RefProtocolError("text ends inside a code point", 1007)
                assert msg_op is not None
                frames.append(RefFrame(msg_op, b"".join(parts)))
                msg_op = None
        pos = p + length
