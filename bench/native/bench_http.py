"""HTTP/1.1 on the server's hot path (RFC 9112): parse a typical API request, encode a small response.

Group "http_parse": a ~400-byte `POST /v1/packets/{id}/open` (bearer Authorization, Host, User-Agent,
Content-Type, Content-Length, small JSON body) parsed into (method, path, headers, body) with
lower-cased str header names and latin-1 str values. Impls "native" (RequestParser.feed) and
"httptools" (llhttp with Python callbacks collecting the same fields). Both parsers persist across
rounds, as a connection's would.

Group "http_encode": a 200 JSON response. Impls "native" (encode_response, which also validates
names and values) and "reference" (a Python f-string join that validates nothing)."""

from __future__ import annotations

from collections.abc import Callable

import hongbao_native as hn
import httptools
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

Parsed = tuple[str, str, list[tuple[str, str]], bytes]

BODY = b'{"client_nonce":"5f0c2a9e41d7","device":"ios-17.4"}'
TOKEN = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMDAwMDQyIiwiZXhwIjoxNzMzMDAwMDAwLCJpYXQiOjE3MzI5OTY0MDB9"
    ".dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk4"
)
REQUEST = (
    "POST /v1/packets/0110224112100000000017/open HTTP/1.1\r\n"
    "Host: api.hongbao.example\r\n"
    "User-Agent: hongbao-ios/5.2.1 (iPhone15,2; iOS 17.4)\r\n"
    f"Authorization: Bearer {TOKEN}\r\n"
    "Content-Type: application/json\r\n"
    f"Content-Length: {len(BODY)}\r\n"
    "\r\n"
).encode() + BODY
assert 350 <= len(REQUEST) <= 450, len(REQUEST)

EXPECTED: Parsed = (
    "POST",
    "/v1/packets/0110224112100000000017/open",
    [
        ("host", "api.hongbao.example"),
        ("user-agent", "hongbao-ios/5.2.1 (iPhone15,2; iOS 17.4)"),
        ("authorization", f"Bearer {TOKEN}"),
        ("content-type", "application/json"),
        ("content-length", str(len(BODY))),
    ],
    BODY,
)

RESPONSE_BODY = b'{"order_id":"0110224112100000000017","amount_fen":1288,"status":"opened","best_luck":false}'
RESPONSE_HEADERS = [("content-type", "application/json"), ("cache-control", "no-store")]
EXPECTED_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncache-control: no-store\r\n"
    + b"Content-Length: %d\r\n\r\n" % len(RESPONSE_BODY)
    + RESPONSE_BODY
)
REASONS = {200: "OK", 201: "Created", 400: "Bad Request", 404: "Not Found"}


def _native_parse() -> Callable[[], Parsed]:
    feed = hn.RequestParser().feed

    def run() -> Parsed:
        (req,) = feed(REQUEST)
        return req.method, req.path, req.headers, req.body

    return run


class _Collector:
    __slots__ = ("url", "headers", "body", "done")

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[str, str]] = []
        self.body = b""
        self.done = False

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.body = b""
        self.done = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.decode("ascii").lower(), value.decode("latin-1")))

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.done = True


def _httptools_parse() -> Callable[[], Parsed]:
    collector = _Collector()
    parser = httptools.HttpRequestParser(collector)
    feed, get_method = parser.feed_data, parser.get_method

    def run() -> Parsed:
        feed(REQUEST)
        assert collector.done
        path = collector.url.partition(b"?")[0].decode("ascii")
        return get_method().decode("ascii"), path, collector.headers, collector.body

    return run


def _reference_encode(status: int, headers: list[tuple[str, str]], body: bytes) -> bytes:
    head = f"HTTP/1.1 {status} {REASONS[status]}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers)
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body


def _record(benchmark: BenchmarkFixture, impl: str, correct: bool) -> None:
    benchmark.extra_info["impl"] = impl
    benchmark.extra_info["correct"] = correct
    assert correct


@pytest.mark.benchmark(group="http_parse")
def test_http_parse_native(benchmark: BenchmarkFixture) -> None:
    """Native RequestParser.feed of a ~400-byte API request into method, path, headers, body."""
    result = benchmark(_native_parse())
    _record(benchmark, "native", result == EXPECTED)


@pytest.mark.benchmark(group="http_parse")
def test_http_parse_httptools(benchmark: BenchmarkFixture) -> None:
    """httptools (llhttp) with Python callbacks collecting the same fields."""
    result = benchmark(_httptools_parse())
    _record(benchmark, "httptools", result == EXPECTED)


@pytest.mark.benchmark(group="http_encode")
def test_http_encode_native(benchmark: BenchmarkFixture) -> None:
    """Native encode_response of a small JSON 200."""
    encode = hn.encode_response
    result = benchmark(lambda: encode(200, RESPONSE_HEADERS, RESPONSE_BODY))
    _record(benchmark, "native", result == EXPECTED_RESPONSE)


@pytest.mark.benchmark(group="http_encode")
def test_http_encode_reference(benchmark: BenchmarkFixture) -> None:
    """Python f-string join of the same response (no validation)."""
    result = benchmark(lambda: _reference_encode(200, RESPONSE_HEADERS, RESPONSE_BODY))
    _record(benchmark, "reference", result == EXPECTED_RESPONSE)
