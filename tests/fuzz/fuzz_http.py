"""Atheris fuzz target for hongbao_native.RequestParser (native/src/http.rs).

Arbitrary bytes, either raw or spliced into a valid request, are fed whole and in arbitrary
pieces under small random limits. Only HttpParseError (status 400, 413, 431, 501 or 505) may
escape, the split must not change the outcome (the requests returned ahead of an error, and the
error), and every returned request respects the limits.
The Rust code is not coverage-instrumented, so the Python side is (`instrument_func`) and
branches on the outcome (which status, how many requests) to give libFuzzer some signal, and
templates get the fuzzer past the request line.

    .venv/bin/python tests/fuzz/fuzz_http.py -max_total_time=20 -rss_limit_mb=2048
"""

import sys

import atheris  # type: ignore[import-untyped]

with atheris.instrument_imports():
    from hongbao_native import HttpParseError, RequestParser

TEMPLATES = [
    b"GET /v1/balance?x=1 HTTP/1.1\r\nHost: h\r\nAccept: */*\r\n\r\n",
    b"POST /v1/packets/7/open HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}",
    b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;e=1\r\nabc\r\n0\r\nT: 1\r\n\r\n",
    b"GET /v1/ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x80",
    b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
]
STATUSES = {400, 413, 431, 501, 505}


@atheris.instrument_func  # type: ignore[untyped-decorator]
def classify(outcome: tuple[list[tuple[object, ...]], int | None]) -> str:
    requests, status = outcome
    if status == 400:
        return "400"
    if status == 413:
        return "413"
    if status == 431:
        return "431"
    if status == 501:
        return "501"
    if status == 505:
        return "505"
    if len(requests) == 0:
        return "none"
    if len(requests) == 1:
        return "websocket" if requests[0][8] else "one"
    return "many"


@atheris.instrument_func  # type: ignore[untyped-decorator]
def run(pieces: list[bytes], limits: tuple[int, int, int]) -> tuple[list[tuple[object, ...]], int | None]:
    parser = RequestParser(*limits)
    got: list[tuple[object, ...]] = []
    try:
        for piece in [*pieces, b""]:  # the last feed raises an error found after a complete request
            for r in parser.feed(piece):
                got.append(
                    (r.method, r.target, r.path, r.query, r.version, r.headers, r.body, r.keep_alive, r.websocket)
                )
    except HttpParseError as e:
        if e.status not in STATUSES or parser.state != "failed" or parser.pending_bytes != 0:
            raise AssertionError(f"bad error state: {e.status} {parser.state} {parser.pending_bytes}") from e
        return got, e.status
    return got, None


@atheris.instrument_func  # type: ignore[untyped-decorator]
def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    limits = (fdp.ConsumeIntInRange(0, 300), fdp.ConsumeIntInRange(0, 8), fdp.ConsumeIntInRange(0, 64))
    mode = fdp.ConsumeIntInRange(0, len(TEMPLATES))
    cuts = [fdp.ConsumeIntInRange(0, 1 << 16) for _ in range(fdp.ConsumeIntInRange(0, 8))]
    tail = fdp.ConsumeBytes(fdp.remaining_bytes())
    if mode == len(TEMPLATES):
        payload = tail
    else:
        template = TEMPLATES[mode]
        at = int.from_bytes(tail[:2] or b"\0", "little") % (len(template) + 1)
        cut = tail[2:3][0] % 4 if len(tail) > 2 else 0
        payload = template[:at] + tail[3:] + template[at + cut :]

    bounds = sorted(c % (len(payload) + 1) for c in cuts)
    pieces = [payload[a:b] for a, b in zip([0, *bounds], [*bounds, len(payload)], strict=True)]
    whole = run([payload], limits)
    split = run(pieces, limits)
    if whole != split:
        raise AssertionError(f"split changed the outcome: {whole!r} != {split!r}")
    classify(whole)
    for req in split[0]:
        body = req[6]
        assert isinstance(body, bytes) and len(body) <= limits[2], "body over max_body_size"
        headers = req[5]
        assert isinstance(headers, list) and len(headers) <= limits[1], "more headers than max_headers"


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
