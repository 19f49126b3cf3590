"""hongbao_native WebSocket framing (native/src/ws_frame.rs) against RFC 6455, the pure-Python
reference (tests/reference/ws_frame.py), wsproto and websockets, plus the frame-level push cases
P-20, P-21, P-22, P-23 and P-25 of /work/shared/cases/push.md."""

from __future__ import annotations

import base64
import hashlib
import os
from itertools import pairwise

import hongbao_native as hn
import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets import frames as wsframes
from websockets.streams import StreamReader
from wsproto.frame_protocol import FrameProtocol

from tests.reference import ws_frame as ref

KEY = b"\x37\xfa\x21\x3d"
LENGTHS = [0, 1, 125, 126, 127, 65535, 65536, 70000]
BIG = 1 << 20


def server(max_frame: int = BIG, max_msg: int = BIG) -> hn.FrameDecoder:
    return hn.FrameDecoder(max_frame, max_msg)


def m(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """A masked (client) frame."""
    return hn.encode_frame(opcode, payload, fin=fin, mask_key=KEY)


def feed_all(dec: hn.FrameDecoder, chunks: list[bytes]) -> tuple[list[hn.Frame], int | None]:
    """Frames from successive feeds and the close code of the ProtocolError that stopped them."""
    out: list[hn.Frame] = []
    for c in chunks:
        try:
            out.extend(dec.feed(c))
        except hn.ProtocolError as e:
            return out, e.close_code
    return out, None


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def outcome(data: bytes, **kw: int) -> int | None:
    """Close code of the first violation in `data`, checked fed whole and byte by byte."""
    whole = feed_all(server(**kw), [data])[1]
    assert feed_all(server(**kw), bytewise(data))[1] == whole
    return whole


def as_tuples(frames: list[hn.Frame]) -> list[tuple[int, bytes, int | None, str]]:
    return [(f.opcode, f.payload, f.close_code, f.close_reason) for f in frames]


def ref_tuples(frames: list[ref.RefFrame]) -> list[tuple[int, bytes, int | None, str]]:
    return [(f.opcode, f.payload, f.close_code, f.close_reason) for f in frames]


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    pts = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *pts, len(data)]
    return [data[a:b] for a, b in pairwise(bounds)]


# --- accept_key ---------------------------------------------------------------------------


def test_accept_key_rfc_6455_example() -> None:
    """accept_key reproduces the worked example of RFC 6455 section 1.3."""
    assert hn.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@given(st.binary(min_size=16, max_size=16))
def test_accept_key_matches_hashlib(nonce: bytes) -> None:
    """accept_key is base64(SHA-1(key + GUID)) for any 16-byte nonce, as the reference computes it."""
    key = base64.b64encode(nonce).decode()
    want = base64.b64encode(hashlib.sha1(key.encode() + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest()).decode()
    assert hn.accept_key(key) == want == ref.accept_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "",
        "dGhlIHNhbXBsZSBub25jZQ",
        "dGhlIHNhbXBsZSBub25jZR==",
        "aGVsbG8=",
        "!!!!dGhlIHNhbXBsZSBub2",
        " dGhlIHNhbXBsZSBub25jZQ==",
        base64.b64encode(b"x" * 17).decode(),
    ],
)
def test_accept_key_rejects_keys_that_are_not_16_base64_bytes(key: str) -> None:
    """A Sec-WebSocket-Key that is not canonical base64 of exactly 16 bytes raises ValueError."""
    with pytest.raises(ValueError):
        hn.accept_key(key)
    with pytest.raises(ValueError):
        ref.accept_key(key)


# --- encoder ------------------------------------------------------------------------------


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("mask_key", [None, KEY])
def test_encode_frame_matches_reference_at_length_boundaries(length: int, mask_key: bytes | None) -> None:
    """encode_frame emits the minimal length encoding (RFC 6455 5.2) and masks like the reference."""
    payload = bytes(i % 251 for i in range(length))
    got = hn.encode_frame(hn.OP_BINARY, payload, mask_key=mask_key)
    assert got == ref.encode_frame(ref.OP_BINARY, payload, mask_key=mask_key)
    header = 2 + (0 if length < 126 else 2 if length < 65536 else 8) + (4 if mask_key else 0)
    assert len(got) == header + length


def test_encode_frame_rfc_6455_examples() -> None:
    """The examples of RFC 6455 section 5.7 encode byte for byte."""
    assert hn.encode_frame(hn.OP_TEXT, b"Hello") == bytes.fromhex("810548656c6c6f")
    assert hn.encode_frame(hn.OP_TEXT, b"Hello", mask_key=KEY) == bytes.fromhex("818537fa213d7f9f4d5158")
    assert hn.encode_frame(hn.OP_TEXT, b"Hel", fin=False) == bytes.fromhex("010348656c")
    assert hn.encode_frame(hn.OP_CONT, b"lo") == bytes.fromhex("80026c6f")
    assert hn.encode_frame(hn.OP_PING, b"Hello") == bytes.fromhex("890548656c6c6f")
    assert hn.encode_frame(hn.OP_PONG, b"Hello", mask_key=KEY) == bytes.fromhex("8a8537fa213d7f9f4d5158")
    assert hn.encode_frame(hn.OP_BINARY, b"\0" * 256)[:4] == bytes.fromhex("827e0100")
    assert hn.encode_frame(hn.OP_BINARY, b"\0" * 65536)[:10] == bytes.fromhex("827f0000000000010000")
    assert hn.encode_frame(hn.OP_TEXT, b"z", rsv1=True) == b"\xc1\x01z"


def test_encode_frame_accepts_buffers() -> None:
    """encode_frame takes bytes, bytearray and memoryview payloads alike."""
    want = hn.encode_frame(hn.OP_BINARY, b"abcdef", mask_key=KEY)
    assert hn.encode_frame(hn.OP_BINARY, bytearray(b"abcdef"), mask_key=KEY) == want
    assert hn.encode_frame(hn.OP_BINARY, memoryview(b"xxabcdef")[2:], mask_key=KEY) == want
    assert type(want) is bytes


@pytest.mark.parametrize(
    ("args", "kwargs", "fragment"),
    [
        ((3, b""), {}, "opcode 3"),
        ((0xB, b""), {}, "opcode 11"),
        ((-1, b""), {}, "opcode -1"),
        ((hn.OP_PING, b"x" * 126), {}, "126 bytes"),
        ((hn.OP_CLOSE, b""), {"fin": False}, "fin=True"),
        ((hn.OP_PONG, b""), {"fin": False}, "fin=True"),
        ((hn.OP_PING, b""), {"rsv1": True}, "rsv1"),
        ((hn.OP_CONT, b""), {"rsv1": True}, "rsv1"),
        ((hn.OP_TEXT, b""), {"mask_key": b"abc"}, "4 bytes"),
        ((hn.OP_TEXT, b""), {"mask_key": b"abcde"}, "4 bytes"),
    ],
)
def test_encode_frame_rejects_invalid_frames(args: tuple[int, bytes], kwargs: dict[str, object], fragment: str) -> None:
    """Bad opcodes, long or fragmented control frames, misplaced rsv1 and bad mask keys raise ValueError."""
    with pytest.raises(ValueError, match=fragment):
        hn.encode_frame(*args, **kwargs)  # type: ignore[arg-type]


def test_encode_close() -> None:
    """encode_close builds code + UTF-8 reason (RFC 6455 5.5.1) and refuses reserved codes and long reasons."""
    assert hn.encode_close(1000) == b"\x88\x02\x03\xe8"
    assert hn.encode_close(1001, "going away") == b"\x88\x0c\x03\xe9going away"
    assert hn.encode_close(4000, "é", mask_key=KEY) == ref.encode_close(4000, "é", mask_key=KEY)
    assert len(hn.encode_close(1000, "a" * 123)) == 127
    for code in (0, 999, 1004, 1005, 1006, 1015, 2999, 5000, 70000):
        with pytest.raises(ValueError, match=f"close code {code}"):
            hn.encode_close(code)
    with pytest.raises(ValueError, match="123"):
        hn.encode_close(1000, "é" * 62)


# --- round trips --------------------------------------------------------------------------


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("masked", [True, False])
def test_round_trip_one_chunk_and_byte_by_byte(length: int, masked: bool) -> None:
    """A frame of every boundary length decodes to its payload, fed whole or one byte at a time."""
    payload = os.urandom(length)
    frame = hn.encode_frame(hn.OP_BINARY, payload, mask_key=KEY if masked else None)
    for chunks in ([frame], bytewise(frame)):
        dec = hn.FrameDecoder(BIG, BIG, require_mask=masked)
        frames, err = feed_all(dec, chunks)
        assert err is None
        assert [(f.opcode, f.payload) for f in frames] == [(hn.OP_BINARY, payload)]


@pytest.mark.parametrize("length", LENGTHS)
def test_text_round_trip_exposes_str(length: int) -> None:
    """A text message decodes to bytes and, via .text, to the original str."""
    text = ("aé€😀" * length)[:length]
    frames = server().feed(m(hn.OP_TEXT, text.encode()))
    assert frames[0].opcode == hn.OP_TEXT
    assert frames[0].text == text
    assert frames[0].payload == text.encode()
    assert frames[0].close_code is None and frames[0].close_reason == ""


def test_feed_accepts_buffers_and_empty_input() -> None:
    """feed takes bytes, bytearray and memoryview; an empty feed returns no frames."""
    dec = server()
    f = m(hn.OP_BINARY, b"abc")
    assert dec.feed(b"") == []
    assert [x.payload for x in dec.feed(bytearray(f))] == [b"abc"]
    assert [x.payload for x in dec.feed(memoryview(f + f)[len(f) :])] == [b"abc"]


def test_frame_attributes_and_repr() -> None:
    """Frame exposes opcode, payload, close_code, close_reason; .text refuses non-text frames."""
    close, ping = server().feed(m(hn.OP_CLOSE, b"\x03\xe8bye"))[0], server().feed(m(hn.OP_PING, b"p"))[0]
    assert (close.opcode, close.payload, close.close_code, close.close_reason) == (
        hn.OP_CLOSE,
        b"\x03\xe8bye",
        1000,
        "bye",
    )
    assert "close_code=1000" in repr(close)
    assert (ping.opcode, ping.payload, ping.close_code) == (hn.OP_PING, b"p", None)
    with pytest.raises(ValueError, match="not a text message"):
        _ = ping.text
    assert (hn.OP_CONT, hn.OP_TEXT, hn.OP_BINARY, hn.OP_CLOSE, hn.OP_PING, hn.OP_PONG) == (0, 1, 2, 8, 9, 10)


def test_decoder_properties() -> None:
    """FrameDecoder reports its limits and whether it has failed."""
    dec = hn.FrameDecoder(10, 20, require_mask=False)
    assert (dec.max_frame_size, dec.max_message_size, dec.require_mask, dec.failed) == (10, 20, False, False)
    with pytest.raises(hn.ProtocolError):
        dec.feed(b"\xc1\x00")
    assert dec.failed is True


# --- independent implementations ----------------------------------------------------------


def wsproto_server_decode(data: bytes) -> list[tuple[int, object]]:
    proto = FrameProtocol(client=False, extensions=[])
    proto.receive_bytes(data)
    out: list[tuple[int, object]] = []
    for f in proto.received_frames():
        assert f.frame_finished and f.message_finished
        out.append((int(f.opcode), f.payload))
    return out


def websockets_parse(data: bytes, mask: bool) -> wsframes.Frame:
    reader = StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    gen = wsframes.Frame.parse(reader.read_exact, mask=mask)
    try:
        next(gen)
    except StopIteration as stop:
        frame: wsframes.Frame = stop.value
        return frame
    raise AssertionError("websockets wants more bytes")


@pytest.mark.parametrize("length", LENGTHS)
def test_our_frames_decode_in_wsproto_and_websockets(length: int) -> None:
    """Frames we encode (masked and not) are read back exactly by wsproto and websockets."""
    payload = os.urandom(length)
    text = ("é" * length)[:length]
    assert wsproto_server_decode(m(hn.OP_BINARY, payload)) == [(2, payload)]
    assert wsproto_server_decode(m(hn.OP_TEXT, text.encode())) == [(1, text)]
    for mask_key, mask in ((KEY, True), (None, False)):
        f = websockets_parse(hn.encode_frame(hn.OP_BINARY, payload, mask_key=mask_key), mask)
        assert (f.opcode, f.data, f.fin) == (wsframes.Opcode.BINARY, payload, True)
    close = wsproto_server_decode(hn.encode_close(1001, "bye", mask_key=KEY))
    assert close == [(8, (1001, "bye"))]
    assert websockets_parse(hn.encode_close(4001, "x"), False).data == wsframes.Close(4001, "x").serialize()


@pytest.mark.parametrize("length", LENGTHS)
def test_wsproto_and_websockets_frames_decode_here(length: int) -> None:
    """Frames encoded by wsproto's client and websockets (random masks) decode to the same payloads here."""
    payload = os.urandom(length)
    text = ("€" * length)[:length]
    client = FrameProtocol(client=True, extensions=[])
    stream = bytes(client.send_data(payload)) + bytes(client.ping(b"pi")) + bytes(client.send_data(text))
    stream += bytes(client.close(1000, "done"))
    frames = server().feed(stream)
    assert as_tuples(frames) == [
        (2, payload, None, ""),
        (9, b"pi", None, ""),
        (1, text.encode(), None, ""),
        (8, b"\x03\xe8done", 1000, "done"),
    ]
    assert frames[2].text == text
    ws = wsframes.Frame(wsframes.Opcode.BINARY, payload).serialize(mask=True)
    assert [f.payload for f in server().feed(ws)] == [payload]
    unmasked = wsframes.Frame(wsframes.Opcode.TEXT, text.encode()).serialize(mask=False)
    assert [f.text for f in hn.FrameDecoder(BIG, BIG, require_mask=False).feed(unmasked)] == [text]


def test_wsproto_fragments_decode_here() -> None:
    """A message wsproto sends in fragments, with a ping between, reassembles here."""
    client = FrameProtocol(client=True, extensions=[])
    stream = (
        bytes(client.send_data("hel", fin=False)) + bytes(client.ping(b"x")) + bytes(client.send_data("lo", fin=True))
    )
    assert as_tuples(server().feed(stream)) == [(9, b"x", None, ""), (1, b"hello", None, "")]


# --- push cases ---------------------------------------------------------------------------


def test_p20_control_frame_inside_fragments() -> None:
    """P-20: text "hel" FIN=0, ping "x", continuation "lo" give the ping then one message "hello"."""
    stream = m(hn.OP_TEXT, b"hel", fin=False) + m(hn.OP_PING, b"x") + m(hn.OP_CONT, b"lo")
    for chunks in ([stream], bytewise(stream)):
        frames, err = feed_all(server(), chunks)
        assert err is None
        assert [(f.opcode, f.payload) for f in frames] == [(hn.OP_PING, b"x"), (hn.OP_TEXT, b"hello")]
        assert frames[1].text == "hello"


@pytest.mark.parametrize(
    "stream",
    [
        m(hn.OP_TEXT, b"hel", fin=False) + m(hn.OP_TEXT, b"lo"),
        m(hn.OP_CONT, b"lo"),
        bytes([0x09, 0x81]) + KEY + b"x",
    ],
    ids=["new-text-while-open", "continuation-with-nothing-open", "fragmented-ping"],
)
def test_p20_fragmentation_violations_are_1002(stream: bytes) -> None:
    """P-20: a new text frame mid-message, an orphan continuation and a fragmented ping each fail with 1002."""
    assert outcome(stream) == 1002


def test_p21_utf8() -> None:
    """P-21: ED A0 80 is 1007, a euro sign split over three fragments is fine, a close reason with FF is 1007."""
    assert outcome(m(hn.OP_TEXT, b"\xed\xa0\x80")) == 1007
    euro = m(hn.OP_TEXT, b"\xe2", fin=False) + m(hn.OP_CONT, b"\x82", fin=False) + m(hn.OP_CONT, b"\xac")
    for chunks in ([euro], bytewise(euro)):
        frames, err = feed_all(server(), chunks)
        assert err is None and [f.text for f in frames] == ["€"]
    assert outcome(m(hn.OP_CLOSE, b"\x03\xe8\xff")) == 1007


def test_p21_fails_as_soon_as_the_offending_byte_arrives() -> None:
    """P-21: the decoder raises on the first bad byte, before the rest of the frame has come."""
    frame = m(hn.OP_TEXT, b"ab\xed\xa0" + b"a" * 200)
    dec = server()
    assert dec.feed(frame[:8]) == []  # header (8 bytes: 2 + 2 + 4) and nothing more
    assert dec.feed(frame[8:11]) == []  # "ab" + ED is still a valid prefix
    with pytest.raises(hn.ProtocolError) as info:
        dec.feed(frame[11:12])  # A0 after ED: a surrogate
    assert info.value.close_code == 1007
    close = m(hn.OP_CLOSE, b"\x03\xe8ok\xff" + b"x" * 100)
    dec = server()
    assert dec.feed(close[:10]) == []
    with pytest.raises(hn.ProtocolError) as info:
        dec.feed(close[10:11])
    assert info.value.close_code == 1007


def test_p22_unmasked_client_frame() -> None:
    """P-22: 81 02 48 69 from a client fails with 1002 and "Hi" is never delivered."""
    dec = server()
    with pytest.raises(hn.ProtocolError) as info:
        dec.feed(bytes.fromhex("81024869"))
    assert info.value.close_code == 1002
    assert isinstance(info.value, ValueError)
    assert "unmasked" in str(info.value)
    assert outcome(bytes.fromhex("81024869")) == 1002


def test_p23_one_tib_claim_fails_at_once() -> None:
    """P-23: a header claiming 1 TiB fails with 1009 as soon as the length is read, with no payload sent."""
    header = b"\x82\xff" + (1 << 40).to_bytes(8, "big")
    dec = server()
    with pytest.raises(hn.ProtocolError) as info:
        dec.feed(header)
    assert info.value.close_code == 1009
    assert "1099511627776" in str(info.value)


def test_p23_length_encodings() -> None:
    """P-23: a 64-bit length with the top bit set and non-minimal 16/64-bit lengths fail with 1002."""
    assert outcome(b"\x82\xff" + (1 << 63).to_bytes(8, "big") + KEY) == 1002
    assert outcome(b"\x82\xff" + ((1 << 64) - 1).to_bytes(8, "big")) == 1002
    assert outcome(b"\x82\xfe\x00\x7d" + KEY + b"x" * 125) == 1002
    assert outcome(b"\x82\xff" + (65535).to_bytes(8, "big") + KEY) == 1002
    assert outcome(b"\x82\xff" + (200).to_bytes(8, "big") + KEY) == 1002
    assert outcome(b"\x82\xfe\x00\x7e" + KEY + b"x" * 126) is None


def test_p23_message_total_over_limit_fails_as_soon_as_it_passes() -> None:
    """P-23: fragments whose running total passes max_message_size fail with 1009 at the header that passes it."""
    dec = hn.FrameDecoder(100, 250)
    frames = dec.feed(m(hn.OP_BINARY, b"a" * 100, fin=False) + m(hn.OP_CONT, b"b" * 100, fin=False))
    assert frames == []
    third = m(hn.OP_CONT, b"c" * 51)
    with pytest.raises(hn.ProtocolError) as info:
        dec.feed(third[:2])
    assert info.value.close_code == 1009
    with pytest.raises(hn.ProtocolError) as again:
        dec.feed(m(hn.OP_PING, b""))
    assert again.value.close_code == 1009
    ok = hn.FrameDecoder(100, 250)
    got = ok.feed(
        m(hn.OP_BINARY, b"a" * 100, fin=False) + m(hn.OP_CONT, b"b" * 100, fin=False) + m(hn.OP_CONT, b"c" * 50)
    )
    assert [f.payload for f in got] == [b"a" * 100 + b"b" * 100 + b"c" * 50]


def test_p23_frame_over_max_frame_size() -> None:
    """P-23: a frame one byte above max_frame_size fails with 1009; one at the limit passes."""
    assert outcome(m(hn.OP_BINARY, b"x" * 101), max_frame=100) == 1009
    assert outcome(m(hn.OP_BINARY, b"x" * 100), max_frame=100) is None


def test_p25_ping_edge_cases() -> None:
    """P-25: a 126-byte ping is 1002; an unsolicited pong is delivered (for the app to ignore); ten
    pings give ten frames."""
    assert outcome(b"\x89\xfe\x00\x7e" + KEY + b"p" * 126) == 1002
    assert outcome(b"\x89\xfd" + KEY + b"p" * 125) is None
    frames = server().feed(m(hn.OP_PONG, b"unsolicited") + b"".join(m(hn.OP_PING, bytes([i])) for i in range(10)))
    assert [(f.opcode, f.payload) for f in frames] == [(hn.OP_PONG, b"unsolicited")] + [
        (hn.OP_PING, bytes([i])) for i in range(10)
    ]


def test_decoder_stays_failed() -> None:
    """After a ProtocolError every later feed raises the same close code, even for valid bytes."""
    dec = server()
    with pytest.raises(hn.ProtocolError):
        dec.feed(m(hn.OP_TEXT, b"\xff"))
    for _ in range(2):
        with pytest.raises(hn.ProtocolError) as info:
            dec.feed(m(hn.OP_TEXT, b"fine"))
        assert info.value.close_code == 1007


# --- properties ---------------------------------------------------------------------------

messages = st.lists(
    st.one_of(
        st.tuples(st.just(hn.OP_TEXT), st.lists(st.text(max_size=40).map(str.encode), min_size=1, max_size=4)),
        st.tuples(st.just(hn.OP_BINARY), st.lists(st.binary(max_size=300), min_size=1, max_size=4)),
        st.tuples(st.sampled_from([hn.OP_PING, hn.OP_PONG]), st.lists(st.binary(max_size=125), min_size=1, max_size=1)),
    ),
    max_size=6,
)


@given(messages, st.binary(min_size=4, max_size=4), st.lists(st.integers(min_value=0), max_size=12))
def test_random_messages_and_chunking_round_trip(
    msgs: list[tuple[int, list[bytes]]], key: bytes, cuts: list[int]
) -> None:
    """Random messages, fragmented (text split at arbitrary bytes), fed in random chunks, come back exactly."""
    stream = b""
    want: list[tuple[int, bytes]] = []
    for op, parts in msgs:
        if op == hn.OP_TEXT:
            whole = b"".join(parts)
            # Re-split the UTF-8 at byte positions that may fall inside a code point.
            parts = [whole[i : i + 3] for i in range(0, len(whole), 3)] or [b""]
        for i, part in enumerate(parts):
            stream += hn.encode_frame(op if i == 0 else hn.OP_CONT, part, fin=i == len(parts) - 1, mask_key=key)
        want.append((op, b"".join(parts)))
    frames, err = feed_all(server(), split_at(stream, cuts))
    assert err is None
    assert [(f.opcode, f.payload) for f in frames] == want


@given(st.binary(max_size=400), st.lists(st.integers(min_value=0), max_size=8), st.booleans())
def test_random_bytes_raise_only_protocol_error(data: bytes, cuts: list[int], require_mask: bool) -> None:
    """Arbitrary bytes in arbitrary chunks either decode or raise ProtocolError carrying 1002, 1007 or 1009."""
    dec = hn.FrameDecoder(200, 300, require_mask=require_mask)
    try:
        for c in split_at(data, cuts):
            dec.feed(c)
    except hn.ProtocolError as e:
        assert e.close_code in (1002, 1007, 1009)


@st.composite
def raw_streams(draw: st.DrawFn) -> bytes:
    """Mostly valid frame sequences (fragments, controls, every length encoding, tricky UTF-8 and
    close payloads) with an occasional corrupted header bit, optionally truncated."""
    out = b""
    open_msg = False
    for _ in range(draw(st.integers(1, 6))):
        control = draw(st.integers(0, 3)) == 0
        if control:
            op, fin = draw(st.sampled_from([8, 9, 10])), True
        else:
            op, fin = (0 if open_msg else draw(st.sampled_from([1, 2]))), draw(st.booleans())
            open_msg = not fin
        masked = True
        rsv = 0
        corrupt = draw(st.integers(0, 12))
        if corrupt == 0:
            rsv = draw(st.sampled_from([1, 2, 4]))
        elif corrupt == 1:
            op = draw(st.sampled_from([0, 1, 2, 3, 7, 0xB, 0xF]))
        elif corrupt == 2:
            fin = not fin
        elif corrupt == 3:
            masked = False
        payload = draw(
            st.one_of(
                st.binary(max_size=140),
                st.binary(min_size=35, max_size=140),
                st.text(max_size=40).map(str.encode),
                st.sampled_from(
                    [
                        b"\x03\xe8ok",
                        b"\x03\xed",
                        b"\x0b\xb8\xe2\x82",
                        b"\xed\xa0\x80",
                        b"\xf4\x90\x80\x80",
                        b"\xc0\xaf",
                        b"\xe2",
                        b"\x82\xac",
                        b"\x03",
                        b"\x0f\xa0\xff",
                    ]
                ),
            )
        )
        if control and corrupt != 4:
            payload = payload[:125]
        if op == 8 and corrupt > 5:
            code = draw(st.sampled_from([1000, 1001, 1011, 3000, 4999, 1005, 999]))
            payload = code.to_bytes(2, "big") + draw(st.text(max_size=20)).encode()[:123]
        form = draw(st.sampled_from(["min"] * 10 + ["16", "64"]))
        n = len(payload)
        b0 = (0x80 if fin else 0) | (rsv << 4) | op
        mb = 0x80 if masked else 0
        if form == "min":
            out += bytes([b0]) + (bytes([mb | n]) if n < 126 else bytes([mb | 126]) + n.to_bytes(2, "big"))
        elif form == "16":
            out += bytes([b0, mb | 126]) + n.to_bytes(2, "big")
        else:
            out += bytes([b0, mb | 127]) + n.to_bytes(8, "big")
        key = draw(st.binary(min_size=4, max_size=4)) if masked else b""
        out += key + (ref.mask(payload, key) if masked else payload)
    if draw(st.integers(0, 3)) == 0:
        out = out[: draw(st.integers(0, len(out)))]
    return out


@given(
    raw_streams(),
    st.lists(st.integers(min_value=0), max_size=8),
    st.booleans(),
    st.sampled_from([(130, 300), (100, 150), (40, 90)]),
)
def test_decoder_matches_reference(data: bytes, cuts: list[int], require_mask: bool, limits: tuple[int, int]) -> None:
    """On random (often invalid, often truncated) streams native and reference agree on the frames
    and the close code."""
    want_frames, want_code = ref.decode_stream(data, *limits, require_mask)
    whole, code = feed_all(hn.FrameDecoder(*limits, require_mask=require_mask), [data])
    assert code == want_code
    if code is None:
        assert as_tuples(whole) == ref_tuples(want_frames)
    chunked, code2 = feed_all(hn.FrameDecoder(*limits, require_mask=require_mask), split_at(data, cuts))
    assert code2 == want_code
    # Frames decoded in the feed that raised are dropped with the error: a prefix of the reference's.
    assert as_tuples(chunked) == ref_tuples(want_frames)[: len(chunked)]
    if code is None:
        assert len(chunked) == len(want_frames)


@given(
    st.sampled_from([0, 1, 2, 8, 9, 10]),
    st.binary(max_size=300),
    st.booleans(),
    st.one_of(st.none(), st.binary(min_size=4, max_size=4)),
    st.booleans(),
)
def test_encoder_matches_reference(opcode: int, payload: bytes, fin: bool, mask_key: bytes | None, rsv1: bool) -> None:
    """encode_frame gives the reference's bytes or, for invalid frames, the reference's ValueError."""
    try:
        want = ref.encode_frame(opcode, payload, fin=fin, mask_key=mask_key, rsv1=rsv1)
    except ValueError:
        with pytest.raises(ValueError):
            hn.encode_frame(opcode, payload, fin=fin, mask_key=mask_key, rsv1=rsv1)
        return
    assert hn.encode_frame(opcode, payload, fin=fin, mask_key=mask_key, rsv1=rsv1) == want


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_p23_claimed_length_within_limits_is_not_preallocated() -> None:
    """P-23: memory follows the bytes that arrived, not the length a header claims (512 GiB here)."""
    dec = hn.FrameDecoder(1 << 40, 1 << 40)
    before = _rss_bytes()
    assert dec.feed(b"\x82\xff" + (1 << 39).to_bytes(8, "big") + KEY + b"x" * 1000) == []
    assert _rss_bytes() - before < 16 << 20
    assert dec.failed is False


def test_negative_limits_raise_overflow_error() -> None:
    """FrameDecoder refuses negative limits with OverflowError."""
    with pytest.raises(OverflowError):
        hn.FrameDecoder(-1, 10)
    with pytest.raises(OverflowError):
        hn.FrameDecoder(10, -1)
