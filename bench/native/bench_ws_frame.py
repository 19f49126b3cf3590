"""WebSocket framing: encode a 1 KiB masked client text frame (fresh random mask) and decode it on
the server side, RFC 6455 section 5.

Group "ws_frame_1k", impls "native" (encode_frame + FrameDecoder.feed), "wsproto" (a client
FrameProtocol's send_data + a server FrameProtocol's receive_bytes / received_frames) and
"websockets" (websockets.frames.Frame.serialize(mask=True) + Frame.parse over a StreamReader,
with websockets' C masking speedup when installed). Decoders and readers persist across
rounds, as a connection's would. Floors: native >= 10x wsproto, >= 1x websockets."""

from __future__ import annotations

import os
from collections.abc import Callable

import hongbao_native as hn
import pytest
from pytest_benchmark.fixture import BenchmarkFixture
from websockets import frames as wsframes
from websockets.streams import StreamReader
from wsproto.frame_protocol import FrameProtocol

GROUP = "ws_frame_1k"
TEXT = ("hongbao 红包 lucky money, " * 64).encode()[:1022].decode("utf-8", "ignore")
TEXT += "x" * (1024 - len(TEXT.encode()))
PAYLOAD = TEXT.encode()
assert len(PAYLOAD) == 1024


def _native() -> Callable[[], bytes]:
    dec = hn.FrameDecoder(1 << 20, 1 << 20)
    encode, feed, urandom, op = hn.encode_frame, dec.feed, os.urandom, hn.OP_TEXT

    def run() -> bytes:
        (frame,) = feed(encode(op, PAYLOAD, mask_key=urandom(4)))
        return frame.payload

    return run


def _wsproto() -> Callable[[], str]:
    client = FrameProtocol(client=True, extensions=[])
    server = FrameProtocol(client=False, extensions=[])

    def run() -> str:
        server.receive_bytes(bytes(client.send_data(TEXT)))
        (frame,) = server.received_frames()
        assert frame.message_finished
        assert isinstance(frame.payload, str)
        return frame.payload

    return run


def _websockets() -> Callable[[], bytes]:
    reader = StreamReader()
    Frame, TEXT_OP = wsframes.Frame, wsframes.Opcode.TEXT

    def run() -> bytes:
        reader.feed_data(Frame(TEXT_OP, PAYLOAD).serialize(mask=True))
        parser = Frame.parse(reader.read_exact, mask=True)
        try:
            next(parser)
        except StopIteration as done:
            frame: wsframes.Frame = done.value
            return bytes(frame.data)
        raise AssertionError("websockets wanted more bytes")

    return run


# The group is fixed before the timed call: pytest-benchmark reads it when it starts measuring.
pytestmark = pytest.mark.benchmark(group=GROUP)


def _record(benchmark: BenchmarkFixture, impl: str, correct: bool) -> None:
    benchmark.extra_info["impl"] = impl
    benchmark.extra_info["correct"] = correct
    assert correct


def test_ws_frame_1k_native(benchmark: BenchmarkFixture) -> None:
    """Native encode_frame + FrameDecoder.feed of a 1 KiB masked text frame."""
    result = benchmark(_native())
    _record(benchmark, "native", result == PAYLOAD)


def test_ws_frame_1k_wsproto(benchmark: BenchmarkFixture) -> None:
    """wsproto client send_data + server receive_bytes/received_frames of the same text."""
    result = benchmark(_wsproto())
    _record(benchmark, "wsproto", result == TEXT)


def test_ws_frame_1k_websockets(benchmark: BenchmarkFixture) -> None:
    """websockets Frame.serialize(mask=True) + Frame.parse of the same frame."""
    result = benchmark(_websockets())
    _record(benchmark, "websockets", result == PAYLOAD)
