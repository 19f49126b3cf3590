from collections.abc import Iterable
from typing import Literal, final

@final
class Request:
    """One complete HTTP/1.0 or HTTP/1.1 request, as returned by `RequestParser.feed`.

    Immutable. The request line and header section are parsed by the `httparse` crate
    (RFC 9112 sections 3 and 5); framing follows RFC 9112 section 6.3."""

    @property
    def method(self) -> str:
        """The method token, case preserved (`"GET"`, `"POST"`, ...; RFC 9110 section 9)."""
    @property
    def target(self) -> str:
        """The raw request-target (RFC 9112 section 3.2), ASCII, e.g. `"/v1/packets/7/open?x=1"`."""
    @property
    def path(self) -> str:
        """The path of the target: an origin-form target before its first `'?'`; for an
        absolute-form target (`http://host/p?q`) its path (`"/p"`, or `"/"` when it has none);
        authority-form and `"*"` as given. Not percent-decoded."""
    @property
    def query(self) -> str:
        """The part of the target after its first `'?'`, `""` if none. Not percent-decoded."""
    @property
    def version(self) -> Literal["1.0", "1.1"]:
        """The HTTP version of the request line."""
    @property
    def headers(self) -> list[tuple[str, str]]:
        """The header fields in arrival order as (name, value): names lower-cased, values
        decoded as ISO-8859-1 (RFC 9110 section 5.5) with surrounding whitespace removed.
        Repeated fields stay separate. A new list on each access; trailer fields of a
        chunked request are not included."""
    @property
    def body(self) -> bytes:
        """The content: `Content-Length` bytes, or the de-chunked `Transfer-Encoding: chunked`
        content (chunk extensions and trailers dropped); `b""` when the request has neither."""
    @property
    def keep_alive(self) -> bool:
        """Whether the connection may carry another request (RFC 9112 section 9.3): HTTP/1.1
        unless `Connection: close`; HTTP/1.0 only with `Connection: keep-alive` (and no close)."""
    @property
    def websocket(self) -> bool:
        """An HTTP/1.1 request with `Upgrade: websocket` and a `Connection` option `upgrade`
        (RFC 6455 section 4.2.1; tokens compared case-insensitively). Method, `Sec-WebSocket-Key`
        and `Sec-WebSocket-Version` are for the handshake to check. The parser stops after it:
        see `RequestParser.take_buffered`."""
    def header(self, name: str) -> str | None:
        """The value of header field `name` (any case), `None` if absent; a field sent more
        than once gives its values joined with `", "` (RFC 9110 section 5.3)."""
    def __repr__(self) -> str: ...

@final
class RequestParser:
    """Incremental HTTP/1.x request parser for one connection (RFC 9112).

    Feed it the bytes as they arrive; it buffers partial input and returns every request that
    became complete, in order (pipelining). Limits, with the status `HttpParseError.status`
    carries when one is passed:

    - `max_header_size` (bytes): the request line plus header section, including leading
      empty lines, every CRLF and the final empty line, may be exactly this long; one byte
      more is 431. The same limit applies to the trailer section of a chunked request.
    - `max_headers`: at most this many header fields (and trailer fields); one more is 431.
    - `max_body_size` (bytes): the content may be exactly this long; longer is 413, found
      from `Content-Length` before any content is read, or while de-chunking as soon as a
      chunk size would pass it.

    Other errors: 400 for a malformed request line or header field (including obs-fold and
    whitespace before the colon, RFC 9112 section 5.1), a missing or repeated `Host` in
    HTTP/1.1 (RFC 9112 section 3.2), a non-ASCII target, both `Content-Length` and
    `Transfer-Encoding` (request smuggling, RFC 9112 section 6.3), differing or non-numeric
    `Content-Length` values (RFC 9110 section 8.6), `Transfer-Encoding` in HTTP/1.0,
    `chunked` repeated, a bad chunk-size line (no hex digit first, a control character, a
    line over 4096 bytes) or chunk data not followed by CRLF (RFC 9112 section 7.1);
    501 for any transfer coding other than `chunked` (RFC 9112 section 6.1); 505 for a
    well-formed version other than HTTP/1.0 and HTTP/1.1.

    The result never depends on how the input is split across `feed` calls. After an error
    the parser stays failed: every later `feed` raises the same error. Not thread-safe.
    A negative limit raises OverflowError."""

    def __new__(cls, max_header_size: int = 8192, max_headers: int = 64, max_body_size: int = 1048576) -> RequestParser: ...
    def feed(self, data: bytes) -> list[Request]:
        """Add `data` and return the requests it completed (possibly none, possibly several).

        After a WebSocket upgrade request (`Request.websocket`) the bytes that follow are not
        HTTP: they are kept for `take_buffered` and `feed` returns `[]` from then on.
        Raises `HttpParseError` (with `.status` 400, 413, 431, 501 or 505) for a bad request;
        requests completed earlier in the same call are dropped with it (answer `status`, then
        close the connection)."""
    @property
    def pending_bytes(self) -> int:
        """Bytes received that are not part of a returned request yet (buffered raw input plus
        content already de-chunked); 0 after an error."""
    @property
    def state(self) -> Literal["idle", "head", "body", "upgraded", "failed"]:
        """What the parser waits for, to pick a read timeout: `"idle"` between requests with
        nothing buffered (keep-alive timeout), `"head"` within a request head (header timeout),
        `"body"` within the content (body timeout), `"upgraded"` after a WebSocket upgrade
        request, `"failed"` after an error."""
    @property
    def max_header_size(self) -> int:
        """The header section limit in bytes."""
    @property
    def max_headers(self) -> int:
        """The header field count limit."""
    @property
    def max_body_size(self) -> int:
        """The content limit in bytes."""
    def take_continue(self) -> bool:
        """True once for a request whose HTTP/1.1 head carried `Expect: 100-continue` and a
        body, while none of that body has arrived: write `HTTP/1.1 100 Continue\\r\\n\\r\\n`
        then (RFC 9110 section 10.1.1). False otherwise."""
    def take_buffered(self) -> bytes:
        """Remove and return the buffered, unparsed bytes; after a WebSocket upgrade these are
        the first bytes of the WebSocket stream."""

def encode_response(status: int, headers: Iterable[tuple[str, str]], body: bytes) -> bytes:
    """Encode an HTTP/1.1 response: status line, `headers` in order, body.

    The status line is `HTTP/1.1 <status> <reason>` with the reason phrase of RFC 9110
    section 15 (plus 103, 425, 428, 429, 431, 451, 511 from RFCs 8297, 8470, 6585, 7725;
    empty for an unregistered code). Header names are written as given, values encoded as
    ISO-8859-1. `Content-Length: <len(body)>` is appended unless a `Content-Length` or
    `Transfer-Encoding` header is given, and never for 1xx, 204 and 304 (RFC 9110 section
    8.6, RFC 9112 section 6.1).

    `headers` is a list (or any iterable) of 2-tuples of str; anything else raises TypeError.
    Raises ValueError for: `status` outside 100..=599; a header tuple that is not a pair; a header name that is empty or not an
    RFC 9110 token; a header value with CR, LF, NUL or another control character except
    HTAB, or a character beyond U+00FF (response splitting, RFC 9110 section 5.5); a body
    with status 1xx, 204 or 304; `Content-Length` given twice, non-numeric, together with
    `Transfer-Encoding`, in a 1xx or 204 response, or differing from `len(body)` when
    `body` is not empty (an empty body with `Content-Length` is a HEAD response)."""
