"""atheris fuzz target for hongbao_native.FrameDecoder (native/src/ws_frame.rs).

Arbitrary bytes, split at arbitrary points, go into a decoder with arbitrary limits: the only
exception allowed is ProtocolError carrying 1002, 1007 or 1009, every frame delivered must be
well formed, and the outcome must match the pure-Python reference (tests/reference/ws_frame.py).
Half the inputs are turned into frame sequences first (valid-looking headers, masks, fragments),
since the native code is not coverage-instrumented and raw bytes rarely get past the first header.

    .venv/bin/python tests/fuzz/fuzz_ws_frame.py -max_total_time=20 -rss_limit_mb=2048
"""

from __future__ import annotations

import os
import sys
from itertools import pairwise

import atheris  # type: ignore[import-untyped]

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

with atheris.instrument_imports():
    import hongbao_native as hn

    from tests.reference import ws_frame as ref

OPCODES = (0, 1, 2, 8, 9, 10)


def structured(fdp: atheris.FuzzedDataProvider) -> bytes:
    """A sequence of frames whose header fields, lengths and payloads come from the input."""
    out = bytearray()
    for _ in range(fdp.ConsumeIntInRange(1, 8)):
        b0 = fdp.ConsumeIntInRange(0, 255)
        if fdp.ConsumeIntInRange(0, 3):
            b0 = (b0 & 0x80) | OPCODES[fdp.ConsumeIntInRange(0, len(OPCODES) - 1)]
        payload = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 300))
        masked = fdp.ConsumeIntInRange(0, 7) != 0
        mb = 0x80 if masked else 0
        n = len(payload)
        form = fdp.ConsumeIntInRange(0, 7)
        if form == 6:
            out += bytes([b0, mb | 126]) + n.to_bytes(2, "big")
        elif form == 7:
            out += bytes([b0, mb | 127]) + n.to_bytes(8, "big")
        elif n < 126:
            out += bytes([b0, mb | n])
        else:
            out += bytes([b0, mb | 126]) + n.to_bytes(2, "big")
        if masked:
            key = fdp.ConsumeBytes(4).ljust(4, b"\0")
            out += key + ref.mask(payload, key)
        else:
            out += payload
    return bytes(out)


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    max_frame = fdp.ConsumeIntInRange(0, 1 << 12)
    max_msg = fdp.ConsumeIntInRange(0, 1 << 13)
    require_mask = fdp.ConsumeBool()
    cuts = sorted(fdp.ConsumeIntInRange(0, 1 << 12) for _ in range(fdp.ConsumeIntInRange(0, 8)))
    stream = structured(fdp) if fdp.ConsumeBool() else fdp.ConsumeBytes(fdp.remaining_bytes())
    bounds = [0, *(min(c, len(stream)) for c in cuts), len(stream)]

    dec = hn.FrameDecoder(max_frame, max_msg, require_mask=require_mask)
    got: list[tuple[int, bytes, int | None, str]] = []
    code = None
    try:
        for a, b in pairwise(bounds):
            for f in dec.feed(stream[a:b]):
                assert f.opcode in OPCODES and f.opcode != 0, f
                assert isinstance(f.payload, bytes)
                if f.opcode == hn.OP_TEXT:
                    assert f.text.encode() == f.payload
                if f.opcode == hn.OP_CLOSE and f.close_code is not None:
                    assert f.payload == f.close_code.to_bytes(2, "big") + f.close_reason.encode()
                got.append((f.opcode, f.payload, f.close_code, f.close_reason))
    except hn.ProtocolError as e:
        code = e.close_code
        assert code in (1002, 1007, 1009), code
        assert dec.failed
    want, want_code = ref.decode_stream(stream, max_frame, max_msg, require_mask)
    assert code == want_code, (code, want_code)
    assert got == [(f.opcode, f.payload, f.close_code, f.close_reason) for f in want][: len(got)]
    if code is None:
        assert len(got) == len(want)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
