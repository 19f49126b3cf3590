"""hongbao_native HTTP/1.1 request parser and response encoder (native/src/http.rs).

The independent reference is httptools (llhttp): the same bytes go through
`httptools.HttpRequestParser` / `HttpResponseParser` and the fields must agree."""

from __future__ import annotations

from dataclasses import dataclass, field

import httptools
import pytest
from hongbao_native import HttpParseError, Request, RequestParser, encode_response
from hypothesis import given
from hypothesis import strategies as st

# --------------------------------------------------------------------------------------------
# helpers


def feed_whole(data: bytes, **limits: int) -> list[Request]:
    return RequestParser(**limits).feed(data)


def feed_bytewise(data: bytes, **limits: int) -> list[Request]:
    parser = RequestParser(**limits)
    out: list[Request] = []
    for i in range(len(data)):
        out.extend(parser.feed(data[i : i + 1]))
    return out


def feed_split(data: bytes, cuts: list[int]) -> list[Request]:
    parser = RequestParser()
    out: list[Request] = []
    last = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        out.extend(parser.feed(data[last:cut]))
        last = cut
    return out


def fields(req: Request) -> dict[str, object]:
    return {
        "method": req.method,
        "target": req.target,
        "path": req.path,
        "query": req.query,
        "version": req.version,
        "headers": req.headers,
        "body": req.body,
        "keep_alive": req.keep_alive,
        "websocket": req.websocket,
    }


@dataclass
class _RefMessage:
    url: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    method: bytes = b""
    version: str = ""
    keep_alive: bool = False
    upgrade: bool = False
    headers_done: bool = False


class _RefCollector:
    """httptools callbacks gathering each request's fields (trailers excluded)."""

    def __init__(self) -> None:
        self.messages: list[_RefMessage] = []
        self.parser = httptools.HttpRequestParser(self)

    def on_message_begin(self) -> None:
        self.messages.append(_RefMessage())

    def on_url(self, url: bytes) -> None:
        self.messages[-1].url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.messages[-1].headers_done:
            self.messages[-1].headers.append((name, value))

    def on_headers_complete(self) -> None:
        m = self.messages[-1]
        m.headers_done = True
        m.method = self.parser.get_method()
        m.version = self.parser.get_http_version()
        m.keep_alive = self.parser.should_keep_alive()
        m.upgrade = self.parser.should_upgrade()

    def on_body(self, body: bytes) -> None:
        self.messages[-1].body += body


def reference_parse(data: bytes) -> list[_RefMessage]:
    collector = _RefCollector()
    try:
        collector.parser.feed_data(data)
    except httptools.HttpParserUpgrade:
        pass
    return collector.messages


def assert_matches_reference(data: bytes, ours: list[Request]) -> None:
    ref = reference_parse(data)
    assert len(ours) == len(ref)
    for mine, theirs in zip(ours, ref, strict=True):
        assert mine.method == theirs.method.decode()
        assert mine.target == theirs.url.decode("latin-1")
        assert mine.version == theirs.version
        # llhttp keeps trailing whitespace; RFC 9112 section 5 says it is not part of the value.
        assert mine.headers == [(n.decode().lower(), v.decode("latin-1").strip(" \t")) for n, v in theirs.headers]
        assert mine.body == theirs.body
        assert mine.keep_alive == theirs.keep_alive
        assert mine.websocket == theirs.upgrade


# --------------------------------------------------------------------------------------------
# valid requests

H = "example.com"

VALID: list[tuple[str, bytes, list[dict[str, object]]]] = [
    (
        "get",
        b"GET /v1/balance HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n",
        [
            {
                "method": "GET",
                "target": "/v1/balance",
                "path": "/v1/balance",
                "query": "",
                "version": "1.1",
                "headers": [("host", H), ("accept", "*/*")],
                "body": b"",
                "keep_alive": True,
                "websocket": False,
            }
        ],
    ),
    (
        "get-query",
        b"GET /v1/ws/preflight?offset=12&epoch=3 HTTP/1.1\r\nHost: example.com\r\nX-Trace:  t 1 \r\n\r\n",
        [
            {
                "method": "GET",
                "target": "/v1/ws/preflight?offset=12&epoch=3",
                "path": "/v1/ws/preflight",
                "query": "offset=12&epoch=3",
                "version": "1.1",
                "headers": [("host", H), ("x-trace", "t 1")],
                "body": b"",
                "keep_alive": True,
                "websocket": False,
            }
        ],
    ),
    (
        "post-content-length",
        b"POST /v1/packets HTTP/1.1\r\nHost: example.com\r\nContent-Type: application/json\r\n"
        b'Content-Length: 16\r\n\r\n{"count": 10000}',
        [
            {
                "method": "POST",
                "target": "/v1/packets",
                "path": "/v1/packets",
                "query": "",
                "version": "1.1",
                "headers": [("host", H), ("content-type", "application/json"), ("content-length", "16")],
                "body": b'{"count": 10000}',
                "keep_alive": True,
                "websocket": False,
            }
        ],
    ),
    (
        "post-chunked",
        b"POST /up HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4;name=value\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: yes\r\n\r\n",
        [
            {
                "method": "POST",
                "target": "/up",
                "path": "/up",
                "query": "",
                "version": "1.1",
                "headers": [("host", H), ("transfer-encoding", "chunked")],
                "body": b"Wikipedia in\r\n\r\nchunks.",
                "keep_alive": True,
                "websocket": False,
            }
        ],
    ),
    (
        "pipelined-pair",
        b"POST /a HTTP/1.1\r\nHost: example.com\r\nContent-Length: 3\r\n\r\nabc"
        b"DELETE /b?x HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n",
        [
            {
                "method": "POST",
                "target": "/a",
                "path": "/a",
                "query": "",
                "version": "1.1",
                "headers": [("host", H), ("content-length", "3")],
                "body": b"abc",
                "keep_alive": True,
                "websocket": False,
            },
            {
                "method": "DELETE",
                "target": "/b?x",
                "path": "/b",
                "query": "x",
                "version": "1.1",
                "headers": [("host", H), ("connection", "close")],
                "body": b"",
                "keep_alive": False,
                "websocket": False,
            },
        ],
    ),
    (
        "http10-default-close",
        b"GET / HTTP/1.0\r\n\r\n",
        [
            {
                "method": "GET",
                "target": "/",
                "path": "/",
                "query": "",
                "version": "1.0",
                "headers": [],
                "body": b"",
                "keep_alive": False,
                "websocket": False,
            }
        ],
    ),
    (
        "http10-keep-alive",
        b"GET /x HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
        [
            {
                "method": "GET",
                "target": "/x",
                "path": "/x",
                "query": "",
                "version": "1.0",
                "headers": [("connection", "Keep-Alive")],
                "body": b"",
                "keep_alive": True,
                "websocket": False,
            }
        ],
    ),
    (
        "http11-close-in-list",
        b"GET / HTTP/1.1\r\nHost: example.com\r\nConnection: te, Close\r\n\r\n",
        [
            {
                "method": "GET",
                "target": "/",
                "path": "/",
                "query": "",
                "version": "1.1",
                "headers": [("host", H), ("connection", "te, Close")],
                "body": b"",
                "keep_alive": False,
                "websocket": False,
            }
        ],
    ),
    (
        "websocket-upgrade",
        b"GET /v1/ws?token=abc HTTP/1.1\r\nHost: example.com\r\nUpgrade: websocket\r\n"
        b"Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\n\r\n",
        [
            {
                "method": "GET",
                "target": "/v1/ws?token=abc",
                "path": "/v1/ws",
                "query": "token=abc",
                "version": "1.1",
                "headers": [
                    ("host", H),
                    ("upgrade", "websocket"),
                    ("connection", "keep-alive, Upgrade"),
                    ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
                    ("sec-websocket-version", "13"),
                ],
                "body": b"",
                "keep_alive": True,
                "websocket": True,
            }
        ],
    ),
    (
        "leading-empty-line-and-latin1",
        b"\r\nPUT /p HTTP/1.1\r\nHost: example.com\r\nX-Name: Zo\xeb\r\nContent-Length: 0\r\n\r\n",
        [
            {
                "method": "PUT",
                "target": "/p",
                "path": "/p",
                "query": "",
                "version": "1.1",
                "headers": [("host", H), ("x-name", "Zo\u00eb"), ("content-length", "0")],
                "body": b"",
                "keep_alive": True,
                "websocket": False,
            }
        ],
    ),
]


@pytest.mark.parametrize(("name", "data", "expected"), VALID, ids=[v[0] for v in VALID])
def test_valid_requests_fed_whole(name: str, data: bytes, expected: list[dict[str, object]]) -> None:
    """A valid request (or pipelined set) fed in one piece yields exactly the expected fields."""
    assert [fields(r) for r in feed_whole(data)] == expected


@pytest.mark.parametrize(("name", "data", "expected"), VALID, ids=[v[0] for v in VALID])
def test_valid_requests_fed_byte_by_byte(name: str, data: bytes, expected: list[dict[str, object]]) -> None:
    """Feeding the same bytes one at a time yields the same requests."""
    assert [fields(r) for r in feed_bytewise(data)] == expected


@pytest.mark.parametrize(("name", "data", "expected"), VALID, ids=[v[0] for v in VALID])
def test_valid_requests_match_httptools(name: str, data: bytes, expected: list[dict[str, object]]) -> None:
    """httptools parses each table entry to the same method, target, headers, body and flags."""
    assert_matches_reference(data, feed_whole(data))


def test_header_lookup_is_case_insensitive_and_joins_repeats() -> None:
    """`header()` ignores case, returns None when absent and joins a repeated field with ', '."""
    (req,) = feed_whole(b"GET / HTTP/1.1\r\nHost: h\r\nAccept: a/b\r\nX-Y: 1\r\nx-y: 2\r\n\r\n")
    assert req.header("ACCEPT") == "a/b"
    assert req.header("x-y") == "1, 2"
    assert req.header("missing") is None


def test_absolute_and_asterisk_form_targets() -> None:
    """An absolute-form target's path is its path part; '*' stays '*'."""
    (req,) = feed_whole(b"GET http://example.com:8080/v1/x?q=1 HTTP/1.1\r\nHost: example.com\r\n\r\n")
    assert (req.target, req.path, req.query) == ("http://example.com:8080/v1/x?q=1", "/v1/x", "q=1")
    (req,) = feed_whole(b"GET http://example.com HTTP/1.1\r\nHost: example.com\r\n\r\n")
    assert req.path == "/"
    (req,) = feed_whole(b"OPTIONS * HTTP/1.1\r\nHost: example.com\r\n\r\n")
    assert (req.path, req.query) == ("*", "")


def test_request_is_immutable() -> None:
    """Request attributes cannot be assigned."""
    (req,) = feed_whole(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
    with pytest.raises(AttributeError):
        req.method = "POST"  # type: ignore[misc]
    assert req.method == "GET"


# --------------------------------------------------------------------------------------------
# parser state


def test_state_and_pending_bytes_follow_the_request() -> None:
    """state moves idle -> head -> body -> idle and pending_bytes counts unreturned bytes."""
    parser = RequestParser()
    assert (parser.state, parser.pending_bytes) == ("idle", 0)
    start = b"POST / HTTP/1.1\r\nHost: h\r\n"
    assert parser.feed(start) == []
    assert (parser.state, parser.pending_bytes) == ("head", len(start))
    assert parser.feed(b"Content-Length: 4\r\n\r\nab") == []
    assert (parser.state, parser.pending_bytes) == ("body", 2)
    (req,) = parser.feed(b"cdGET")
    assert req.body == b"abcd"
    assert (parser.state, parser.pending_bytes) == ("head", 3)


def test_chunked_pending_bytes_count_decoded_content() -> None:
    """While de-chunking, pending_bytes counts decoded content plus raw leftovers."""
    parser = RequestParser()
    assert parser.feed(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n1") == []
    assert (parser.state, parser.pending_bytes) == ("body", 4)
    (req,) = parser.feed(b"\r\nd\r\n0\r\n\r\n")
    assert req.body == b"abcd"
    assert (parser.state, parser.pending_bytes) == ("idle", 0)


def test_limits_are_exposed() -> None:
    """The constructor's limits read back as properties, with the documented defaults."""
    assert (RequestParser().max_header_size, RequestParser().max_headers, RequestParser().max_body_size) == (
        8192,
        64,
        1048576,
    )
    p = RequestParser(max_header_size=100, max_headers=3, max_body_size=10)
    assert (p.max_header_size, p.max_headers, p.max_body_size) == (100, 3, 10)


def test_upgrade_stops_parsing_and_hands_over_bytes() -> None:
    """After a WebSocket upgrade request the following bytes are kept raw for take_buffered()."""
    parser = RequestParser()
    head = b"GET /v1/ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    (req,) = parser.feed(head + b"\x81\x80abcd")
    assert req.websocket is True
    assert parser.state == "upgraded"
    assert parser.feed(b"GET / HTTP/1.1\r\n\r\n") == []
    assert parser.pending_bytes == 4 + 2 + 18
    assert parser.take_buffered() == b"\x81\x80abcdGET / HTTP/1.1\r\n\r\n"
    assert parser.pending_bytes == 0


def test_upgrade_to_other_protocol_or_http10_is_plain_request() -> None:
    """Upgrade: h2c, or a WebSocket upgrade in HTTP/1.0, is not a WebSocket request."""
    reqs = feed_whole(
        b"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"
        b"GET / HTTP/1.0\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    )
    assert [r.websocket for r in reqs] == [False, False]


def test_expect_continue_reported_once() -> None:
    """take_continue() is True once while a 100-continue request's body is still to come."""
    parser = RequestParser()
    assert parser.feed(b"PUT / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n") == []
    assert parser.take_continue() is True
    assert parser.take_continue() is False
    (req,) = parser.feed(b"xyz")
    assert req.body == b"xyz"
    (req,) = parser.feed(b"PUT / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nz")
    assert parser.take_continue() is False


def test_failed_parser_stays_failed() -> None:
    """After an error every later feed raises the same status, and nothing stays buffered."""
    parser = RequestParser()
    with pytest.raises(HttpParseError) as first:
        parser.feed(b"GET / HTTP/2.0\r\nHost: h\r\n\r\n")
    assert first.value.status == 505
    assert (parser.state, parser.pending_bytes) == ("failed", 0)
    with pytest.raises(HttpParseError) as again:
        parser.feed(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
    assert again.value.status == 505


def test_http_parse_error_is_value_error() -> None:
    """HttpParseError subclasses ValueError and says what is wrong."""
    with pytest.raises(ValueError, match="Host") as err:
        feed_whole(b"GET / HTTP/1.1\r\n\r\n")
    assert isinstance(err.value, HttpParseError)
    assert err.value.status == 400


# --------------------------------------------------------------------------------------------
# bad requests

_P = b"POST / HTTP/1.1\r\nHost: h\r\n"
_TE = _P + b"Transfer-Encoding: chunked\r\n\r\n"

BAD: list[tuple[str, bytes, int]] = [
    ("http09-request-line", b"GET /\r\n\r\n", 400),
    ("double-space", b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("tab-delimiter", b"GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("bad-method-char", b"G@T / HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("lowercase-version", b"GET / http/1.1\r\nHost: h\r\n\r\n", 400),
    ("version-garbage", b"GET / HTTP/11.1\r\nHost: h\r\n\r\n", 400),
    ("trailing-after-version", b"GET / HTTP/1.1 x\r\nHost: h\r\n\r\n", 400),
    ("non-ascii-target", b"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("missing-host", b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", 400),
    ("two-hosts", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    ("space-before-colon", b"GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400),
    ("space-in-name", b"GET / HTTP/1.1\r\nHost: h\r\nX Y: 1\r\n\r\n", 400),
    ("obs-fold", b"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n  continued\r\n\r\n", 400),
    ("nul-in-value", b"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x00b\r\n\r\n", 400),
    ("bare-cr-in-value", b"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\rb\r\n\r\n", 400),
    ("cl-and-te", _P + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("te-and-cl", _P + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400),
    ("cl-differing-duplicates", _P + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400),
    ("cl-differing-list", _P + b"Content-Length: 5, 6\r\n\r\nhello!", 400),
    ("cl-negative", _P + b"Content-Length: -1\r\n\r\n", 400),
    ("cl-plus-sign", _P + b"Content-Length: +5\r\n\r\nhello", 400),
    ("cl-hex", _P + b"Content-Length: 0x5\r\n\r\nhello", 400),
    ("cl-empty", _P + b"Content-Length: \r\n\r\n", 400),
    ("cl-space-inside", _P + b"Content-Length: 1 2\r\n\r\n", 400),
    ("te-in-http10", b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("te-chunked-twice", _P + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("te-chunked-not-last", _P + b"Transfer-Encoding: chunked, gzip\r\n\r\n", 501),
    ("te-gzip", _P + b"Transfer-Encoding: gzip\r\n\r\n", 501),
    ("te-gzip-chunked", _P + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501),
    ("te-unknown", _P + b"Transfer-Encoding: xchunked\r\n\r\n", 501),
    ("te-identity", _P + b"Transfer-Encoding: identity\r\n\r\n", 501),
    ("chunk-size-not-hex", _TE + b"zz\r\nab\r\n0\r\n\r\n", 400),
    ("chunk-size-negative", _TE + b"-1\r\nab\r\n0\r\n\r\n", 400),
    ("chunk-size-0x", _TE + b"0x2\r\nab\r\n0\r\n\r\n", 400),
    ("chunk-size-empty", _TE + b"\r\nab\r\n0\r\n\r\n", 400),
    ("chunk-size-only-extension", _TE + b";x\r\n", 400),
    ("chunk-size-overflow", _TE + b"10000000000000000\r\n", 400),
    ("chunk-ext-bare-lf", _TE + b"2;a\nb\r\nab\r\n0\r\n\r\n", 400),
    ("chunk-size-bare-lf", _TE + b"2\nab\r\n0\r\n\r\n", 400),
    ("chunk-data-too-long", _TE + b"2\r\nabc\r\n0\r\n\r\n", 400),
    ("chunk-data-lf-only", _TE + b"2\r\nab\n0\r\n\r\n", 400),
    ("chunk-line-too-long", _TE + b"1;" + b"x" * 5000 + b"\r\n", 400),
    ("http20", b"GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505),
    ("space-in-target", b"GET /v1/ba lance HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("http12", b"GET / HTTP/1.2\r\nHost: h\r\n\r\n", 505),
    ("http09-version", b"GET / HTTP/0.9\r\nHost: h\r\n\r\n", 505),
    ("cl-over-limit", _P + b"Content-Length: 1048577\r\n\r\n", 413),
    ("cl-huge", _P + b"Content-Length: 99999999999999999999999999\r\n\r\n", 413),
    ("chunk-over-limit", _TE + b"100001\r\n", 413),
    ("chunk-size-max", _TE + b"ffffffffffffffff\r\n", 413),
    ("head-too-large", b"GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431),
    ("too-many-headers", b"GET / HTTP/1.1\r\nHost: h\r\n" + b"X-A: 1\r\n" * 64 + b"\r\n", 431),
    ("endless-empty-lines", b"\r\n" * 5000, 431),
]


def status_of(data: bytes, **limits: int) -> int | None:
    parser = RequestParser(**limits)
    try:
        parser.feed(data)
        parser.feed(b"")  # raises an error found after a complete request
    except HttpParseError as e:
        return e.status
    return None


def status_bytewise(data: bytes, **limits: int) -> int | None:
    parser = RequestParser(**limits)
    try:
        for i in range(len(data)):
            parser.feed(data[i : i + 1])
    except HttpParseError as e:
        return e.status
    return None


@pytest.mark.parametrize(("name", "data", "status"), BAD, ids=[b[0] for b in BAD])
def test_bad_request_status(name: str, data: bytes, status: int) -> None:
    """Each malformed, smuggling-prone or oversized request raises its exact status."""
    assert status_of(data) == status


@pytest.mark.parametrize(("name", "data", "status"), BAD, ids=[b[0] for b in BAD])
def test_bad_request_status_byte_by_byte(name: str, data: bytes, status: int) -> None:
    """The same status comes out when the bytes arrive one at a time."""
    assert status_bytewise(data) == status


def test_pipelined_garbage_after_good_requests_fails_after_them() -> None:
    """Good requests ahead of a bad one in the same feed come out; the parser is failed and the
    next feed raises the bad one's status, as when they arrive in separate reads."""
    parser = RequestParser()
    good = b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}GET /b HTTP/1.1\r\nHost: h\r\n\r\n"
    assert [(r.method, r.path, r.body) for r in parser.feed(good + b"garbage\r\n\r\n")] == [
        ("POST", "/a", b"{}"),
        ("GET", "/b", b""),
    ]
    assert (parser.state, parser.pending_bytes) == ("failed", 0)
    with pytest.raises(HttpParseError) as err:
        parser.feed(b"")
    assert err.value.status == 400 and parser.state == "failed"


def test_repeated_equal_content_length_is_accepted() -> None:
    """Identical Content-Length values (repeated or listed) frame the body once (RFC 9110 8.6)."""
    (req,) = feed_whole(_P + b"Content-Length: 3\r\nContent-Length: 3, 03\r\n\r\nabc")
    assert req.body == b"abc"


# --------------------------------------------------------------------------------------------
# limits exactly at and one past the boundary


def _head_of_size(size: int) -> bytes:
    base = b"GET / HTTP/1.1\r\nHost: h\r\nX-Pad: \r\n\r\n"
    return base.replace(b"X-Pad: ", b"X-Pad: " + b"p" * (size - len(base)))


@pytest.mark.parametrize("limit", [64, 100, 8192])
def test_header_size_limit_boundary(limit: int) -> None:
    """A head of exactly max_header_size bytes parses; one byte more is 431, whole or bytewise."""
    at = _head_of_size(limit)
    assert len(at) == limit
    assert len(feed_whole(at, max_header_size=limit)) == 1
    assert len(feed_bytewise(at, max_header_size=limit)) == 1
    past = _head_of_size(limit + 1)
    assert status_of(past, max_header_size=limit) == 431
    assert status_bytewise(past, max_header_size=limit) == 431


@pytest.mark.parametrize("limit", [1, 5, 64])
def test_header_count_limit_boundary(limit: int) -> None:
    """max_headers fields parse; one more is 431."""

    def make(n: int) -> bytes:
        return b"GET / HTTP/1.1\r\nHost: h\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(n - 1)) + b"\r\n"

    (req,) = feed_whole(make(limit), max_headers=limit)
    assert len(req.headers) == limit
    assert status_of(make(limit + 1), max_headers=limit) == 431
    assert status_bytewise(make(limit + 1), max_headers=limit) == 431


@pytest.mark.parametrize("limit", [0, 1, 1000])
def test_content_length_limit_boundary(limit: int) -> None:
    """A Content-Length of exactly max_body_size parses; one more is 413 before any content."""
    body = b"b" * limit
    (req,) = feed_whole(_P + b"Content-Length: %d\r\n\r\n" % limit + body, max_body_size=limit)
    assert req.body == body
    assert status_of(_P + b"Content-Length: %d\r\n\r\n" % (limit + 1), max_body_size=limit) == 413


@pytest.mark.parametrize("limit", [1, 7, 1000])
def test_chunked_limit_boundary(limit: int) -> None:
    """De-chunked content of exactly max_body_size parses; one byte more is 413 at its chunk size."""

    def make(n: int) -> bytes:
        sizes = [s for s in (n // 2, n - n // 2) if s]
        return _TE + b"".join(b"%x\r\n%s\r\n" % (s, b"c" * s) for s in sizes) + b"0\r\n\r\n"

    (req,) = feed_whole(make(limit), max_body_size=limit)
    assert req.body == b"c" * limit
    over = make(limit + 1)
    assert status_of(over, max_body_size=limit) == 413
    assert status_bytewise(over, max_body_size=limit) == 413


def test_trailer_section_has_the_header_limits() -> None:
    """Trailers count against max_header_size and max_headers too."""
    trailer = b"X-T: " + b"t" * 200 + b"\r\n"
    data = _TE + b"1\r\na\r\n0\r\n" + trailer + b"\r\n"
    assert len(feed_whole(data, max_header_size=len(trailer) + 2)) == 1
    assert status_of(data, max_header_size=len(trailer) + 1) == 431
    assert status_of(_TE + b"0\r\nA: 1\r\nB: 2\r\n\r\n", max_headers=2) is None
    assert status_of(_TE + b"0\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", max_headers=2) == 431


# --------------------------------------------------------------------------------------------
# hypothesis: generated requests against httptools

_SPECIAL = {
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "expect",
    "proxy-connection",
    "keep-alive",
}
_name = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", min_size=1, max_size=12).filter(
    lambda n: n.lower() not in _SPECIAL
)
_vchar = st.characters(min_codepoint=0x21, max_codepoint=0xFF, blacklist_characters="\x7f")  # VCHAR and obs-text
_value = st.text(_vchar, max_size=12).flatmap(lambda a: st.text(_vchar, max_size=8).map(lambda b: f"{a} {b}".strip()))
_segment = st.text("abcdefghijklmnopqrstuvwxyz0123456789-._~%", min_size=0, max_size=10)


@st.composite
def _request(draw: st.DrawFn, last: bool = True) -> bytes:
    """One valid request; unless `last`, one that keeps the connection open (llhttp refuses
    bytes after a request that closes it)."""
    method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]))
    path = "/" + "/".join(draw(st.lists(_segment, max_size=4)))
    query = draw(st.one_of(st.just(""), st.text("abcdefghij0123456789=&%+", max_size=20).map(lambda q: "?" + q)))
    version = draw(st.sampled_from(["1.1", "1.1", "1.0"]))
    headers = draw(st.lists(st.tuples(_name, _value), max_size=8))
    if version == "1.1" or draw(st.booleans()):
        headers.insert(draw(st.integers(0, len(headers))), ("Host", "example.com"))
    if last:
        connection = draw(st.sampled_from([None, "close", "keep-alive", "Keep-Alive", "Close", "foo, close"]))
    elif version == "1.1":
        connection = draw(st.sampled_from([None, "keep-alive", "foo"]))
    else:
        connection = draw(st.sampled_from(["keep-alive", "Keep-Alive", "foo, keep-alive"]))
    if connection is not None:
        headers.append(("Connection", connection))
    body = draw(st.binary(max_size=300))
    framing = draw(st.sampled_from(["length", "chunked"] if version == "1.1" else ["length"]))
    if not body and draw(st.booleans()):
        framing = "none"
    if framing == "length":
        headers.append(("Content-Length", str(len(body))))
    elif framing == "chunked":
        headers.append(("Transfer-Encoding", "chunked"))
    head = f"{method} {path}{query} HTTP/{version}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers) + "\r\n"
    out = head.encode("latin-1")
    if framing == "length":
        out += body
    elif framing == "chunked":
        sizes = draw(st.lists(st.integers(1, 64), max_size=8))
        rest = body
        for size in sizes:
            if not rest:
                break
            piece, rest = rest[:size], rest[size:]
            ext = draw(st.sampled_from(["", ";a=1", ";x"]))
            out += b"%x%s\r\n%s\r\n" % (len(piece), ext.encode(), piece)
        if rest:
            out += b"%X\r\n%s\r\n" % (len(rest), rest)
        out += b"0\r\n\r\n"
    return out


@given(st.lists(_request(last=False), max_size=2), _request(), st.lists(st.integers(min_value=0), max_size=10))
def test_generated_requests_match_httptools(leading: list[bytes], final: bytes, cuts: list[int]) -> None:
    """Random pipelined requests, split anywhere, parse to what httptools parses from the whole."""
    requests = [*leading, final]
    data = b"".join(requests)
    ours = feed_split(data, cuts)
    assert len(ours) == len(requests)
    assert_matches_reference(data, ours)
    assert [fields(r) for r in ours] == [fields(r) for r in feed_whole(data)]


@given(st.binary(max_size=200), st.lists(st.integers(min_value=0), max_size=6))
def test_arbitrary_bytes_only_raise_http_parse_error(data: bytes, cuts: list[int]) -> None:
    """Arbitrary bytes in arbitrary pieces give requests or HttpParseError, the same as whole."""

    def outcome(pieces: list[bytes]) -> tuple[list[dict[str, object]], int | None]:
        parser = RequestParser(max_header_size=128, max_headers=4, max_body_size=64)
        got: list[dict[str, object]] = []
        try:
            for piece in pieces:
                got.extend(fields(r) for r in parser.feed(piece))
        except HttpParseError as e:
            return got, e.status
        return got, None

    bounds = sorted(c % (len(data) + 1) for c in cuts)
    pieces = [data[a:b] for a, b in zip([0, *bounds], [*bounds, len(data)], strict=True)]
    split_reqs, split_status = outcome(pieces)
    whole_reqs, whole_status = outcome([data])
    assert split_status == whole_status
    if whole_status is None:
        assert split_reqs == whole_reqs
    assert split_status in (None, 400, 413, 431, 501, 505)


# --------------------------------------------------------------------------------------------
# encode_response


ENCODED: list[tuple[str, int, list[tuple[str, str]], bytes, bytes]] = [
    (
        "json-200",
        200,
        [("Content-Type", "application/json")],
        b'{"ok":true}',
        b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}',
    ),
    ("empty-404", 404, [], b"", b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"),
    ("204-no-length", 204, [("X-A", "1")], b"", b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n"),
    ("304-no-length", 304, [("ETag", '"v1"')], b"", b'HTTP/1.1 304 Not Modified\r\nETag: "v1"\r\n\r\n'),
    (
        "101-switching",
        101,
        [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")],
        b"",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
    ),
    (
        "429-retry",
        429,
        [("Retry-After", "1")],
        b"",
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n",
    ),
    ("431", 431, [], b"", b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n\r\n"),
    ("unregistered", 299, [], b"x", b"HTTP/1.1 299 \r\nContent-Length: 1\r\n\r\nx"),
    ("given-length-kept", 200, [("content-length", "2")], b"hi", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi"),
    ("head-response", 200, [("Content-Length", "1234")], b"", b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"),
    (
        "caller-chunked",
        200,
        [("Transfer-Encoding", "chunked")],
        b"0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "latin1-and-tab",
        200,
        [("X-N", "Zo\u00eb\ta")],
        b"",
        b"HTTP/1.1 200 OK\r\nX-N: Zo\xeb\ta\r\nContent-Length: 0\r\n\r\n",
    ),
]


@pytest.mark.parametrize(("name", "status", "headers", "body", "expected"), ENCODED, ids=[e[0] for e in ENCODED])
def test_encode_response_exact_bytes(
    name: str, status: int, headers: list[tuple[str, str]], body: bytes, expected: bytes
) -> None:
    """encode_response writes exactly the expected status line, headers and body."""
    assert encode_response(status, headers, body) == expected


def test_encode_response_accepts_tuple_of_headers() -> None:
    """Headers may be any sequence of (name, value) pairs."""
    assert encode_response(200, (("A", "b"),), b"") == b"HTTP/1.1 200 OK\r\nA: b\r\nContent-Length: 0\r\n\r\n"


REFUSED: list[tuple[str, int, list[tuple[str, str]], bytes]] = [
    ("status-99", 99, [], b""),
    ("status-600", 600, [], b""),
    ("status-negative", -200, [], b""),
    ("status-huge", 2**70, [], b""),
    ("crlf-in-value", 302, [("Location", "/x\r\nSet-Cookie: a=b")], b""),
    ("lf-in-value", 200, [("X", "a\nb")], b""),
    ("cr-in-value", 200, [("X", "a\rb")], b""),
    ("nul-in-value", 200, [("X", "a\x00b")], b""),
    ("del-in-value", 200, [("X", "a\x7fb")], b""),
    ("beyond-latin1", 200, [("X", "\u4e2d")], b""),
    ("crlf-in-name", 200, [("X\r\nY", "1")], b""),
    ("colon-in-name", 200, [("X:Y", "1")], b""),
    ("space-in-name", 200, [("X Y", "1")], b""),
    ("nul-in-name", 200, [("X\x00", "1")], b""),
    ("empty-name", 200, [("", "1")], b""),
    ("body-with-204", 204, [], b"x"),
    ("body-with-304", 304, [], b"x"),
    ("body-with-101", 101, [], b"x"),
    ("length-with-204", 204, [("Content-Length", "0")], b""),
    ("length-mismatch", 200, [("Content-Length", "5")], b"abc"),
    ("length-twice", 200, [("Content-Length", "3"), ("Content-Length", "3")], b"abc"),
    ("length-not-numeric", 200, [("Content-Length", "3a")], b""),
    ("length-with-te", 200, [("Content-Length", "3"), ("Transfer-Encoding", "chunked")], b""),
]


@pytest.mark.parametrize(("name", "status", "headers", "body"), REFUSED, ids=[r[0] for r in REFUSED])
def test_encode_response_refuses_injection_and_bad_input(
    name: str, status: int, headers: list[tuple[str, str]], body: bytes
) -> None:
    """Response splitting, bad tokens, bad statuses and impossible framing raise ValueError."""
    with pytest.raises(ValueError) as err:
        encode_response(status, headers, body)
    assert not isinstance(err.value, HttpParseError)
    assert str(err.value)


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        ("X: y", TypeError),
        ([("X", 1)], TypeError),
        ([["X", "y"]], TypeError),
        ([("X",)], ValueError),
        ([("X", "y", "z")], ValueError),
    ],
)
def test_encode_response_checks_header_shapes(headers: object, error: type[Exception]) -> None:
    """Headers must be (str, str) tuples: other shapes raise TypeError or ValueError."""
    with pytest.raises(error):
        encode_response(200, headers, b"")  # type: ignore[arg-type]


def test_encode_response_accepts_iterable_headers() -> None:
    """A generator of pairs works like a list."""
    pairs = ((f"X-{i}", str(i)) for i in range(2))
    assert encode_response(201, pairs, b"") == b"HTTP/1.1 201 Created\r\nX-0: 0\r\nX-1: 1\r\nContent-Length: 0\r\n\r\n"


class _RespCollector:
    def __init__(self) -> None:
        self.status = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""
        self.complete = False

    def on_status(self, status: bytes) -> None:
        self.status += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


_resp_value = (
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0xFF, blacklist_characters="\x7f"), max_size=16)
    .map(lambda v: v.strip())
    .filter(lambda v: all(not 0x80 <= ord(c) < 0xA0 for c in v))
)


@given(
    st.integers(200, 599).filter(lambda s: s != 204 and s != 304),
    st.lists(st.tuples(_name, _resp_value), max_size=6),
    st.binary(max_size=200),
)
def test_encoded_response_parses_back_with_httptools(status: int, headers: list[tuple[str, str]], body: bytes) -> None:
    """httptools reads back the status, every header and the body of an encoded response."""
    out = encode_response(status, headers, body)
    collector = _RespCollector()
    parser = httptools.HttpResponseParser(collector)
    parser.feed_data(out)
    assert collector.complete
    assert parser.get_status_code() == status
    expected = [(n.encode(), v.encode("latin-1")) for n, v in headers] + [(b"Content-Length", str(len(body)).encode())]
    assert collector.headers == expected
    assert collector.body == body
