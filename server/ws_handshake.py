"""The server side of the WebSocket opening handshake on ``GET /v1/ws`` (RFC 6455 section 4.2) and
its admission (docs/architecture.md section 7), as a ``Gate`` with no I/O: it reads a parsed request and
returns either the encoded 101 answer or the Response that refuses it.

Checks, in this order (cheapest first, so a storm is shed before any costly work):

1. path ``/v1/ws`` (else 404) and method GET (405; RFC 6455 section 4.2.1 item 1). The native
   parser already required HTTP/1.1, ``Upgrade: websocket`` and a ``Connection: upgrade`` option
   (items 1, 3, 4) for the request to be an upgrade at all.
2. ``Sec-WebSocket-Version``: missing is a 400, any value but 13 a 426 naming version 13
   (item 6, section 4.4).
3. ``Origin`` (section 10.2) against ``ws_allowed_origins`` (empty: any; no Origin, as non-browser
   clients send, passes): 403.
4. the push store (docs/architecture.md section 10): while its Redis is down (breaker open) a login could
   not be recorded, so it is refused with 503 degraded and ``Retry-After: 1`` before taking an admission
   token, in microseconds and without a log line (PushStores.down).
5. the host-wide admission rate (native ``RateLimiter``, shared by every worker of the host):
   no token left is a 503 with ``Retry-After`` in whole seconds, rounded up (a prebuilt answer).
   It comes before the rest because they cost more (an uncached JWT check ~55 us of CPU, docs/architecture.md
   section 8); every attempt that got this far counts, whether the rest is good or not.
6. ``Sec-WebSocket-Key``: canonical base64 of 16 bytes, else 400 (item 5); the query's reconnect
   cursor: ``offset`` (decimal digits, at most 18; empty means none) and ``epoch`` (1..64 of RFC
   3986 unreserved characters), else 400.
7. the bearer token, from ``Sec-WebSocket-Protocol: bearer, <jwt>`` (what a browser can send:
   ``new WebSocket(url, ["bearer", jwt])``) or else ``?token=``: missing or invalid is a bare 401
   (a JSON error body, no upgrade).

The 101 carries ``Sec-WebSocket-Accept`` (section 4.2.2) and, when the client offered ``bearer``,
``Sec-WebSocket-Protocol: bearer``: never the token, which no log line contains either.
``preflight`` (``GET /v1/ws/preflight``) answers what a handshake would get now without taking an
admission token; a plain ``GET /v1/ws`` without the upgrade gets 426.
"""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qs

import hongbao_native
from hongbao.core import errors
from hongbao.server.auth import Identity, TokenVerifier
from hongbao.server.config import Settings
from hongbao.server.context import Context
from hongbao.server.responses import Response, error_response, from_error, json_response
from hongbao_native import RateLimiter, Request

WS_PATH = "/v1/ws"
PROTOCOL = "bearer"
NO_TOKEN = "no token: send Sec-WebSocket-Protocol: bearer, <jwt> or ?token=<jwt> (Authorization is not read here)"
_EPOCH = re.compile(r"[A-Za-z0-9._~-]{1,64}")
_READY = json_response(200, {"status": "ok"})
_STORE_DOWN = error_response(503, "degraded", "the session store is unreachable; retry later", [("retry-after", "1")])


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a connection's stream resumes: after ``offset`` in ``epoch`` (None when not given),
    and whether the client asked for the ``hello`` frame (``?hello=1``: the stream's epoch first)."""

    offset: int | None = None
    epoch: str | None = None
    hello: bool = False


@dataclass(frozen=True, slots=True)
class Accepted:
    """A handshake that passed: who (``identity``), the new session id ``sid`` (16 url-safe
    characters), the reconnect ``cursor``, and the encoded 101 answer to write before the first frame."""

    identity: Identity
    sid: str
    cursor: Cursor
    response: bytes


class Gate:
    """The handshake checks of one worker, over its token verifier, the host's rate limiter and
    ``store_down`` (True while the push store cannot record a login)."""

    __slots__ = ("verifier", "limiter", "store_down", "origins", "busy_answers")

    def __init__(
        self,
        settings: Settings,
        verifier: TokenVerifier,
        limiter: RateLimiter,
        store_down: Callable[[], bool] = lambda: False,
    ) -> None:
        self.verifier, self.limiter, self.store_down = verifier, limiter, store_down
        self.origins = frozenset(origin.lower() for origin in settings.ws_allowed_origins)
        self.busy_answers: dict[int, Response] = {}

    def accept(self, request: Request) -> Accepted | Response:
        """Check an upgrade request (``request.websocket``) in the order of the module docstring,
        taking one admission token: the Accepted handshake, or the refusal to answer (then close)."""
        try:
            if request.path != WS_PATH:
                raise errors.NotFound(f"no WebSocket endpoint at {request.path}")
            if request.method != "GET":
                raise errors.MethodNotAllowed("a WebSocket handshake is a GET (RFC 6455 section 4.2.1)", ["GET"])
            version = request.header("sec-websocket-version")
            if version is None:
                raise errors.InvalidRequest("Sec-WebSocket-Version is missing (RFC 6455 section 4.2.1)")
            if version != "13":
                raise errors.UpgradeRequired("this server speaks WebSocket version 13 only (RFC 6455 section 4.4)")
            self._check_origin(request)
            if self.store_down():
                return _STORE_DOWN
            if not self.limiter.try_acquire():
                return self._busy()
            return self._admit(request)
        except errors.HongbaoError as exc:
            return from_error(exc)

    def _admit(self, request: Request) -> Accepted:
        """Steps 5 and 6 and the 101; raises InvalidRequest or Unauthorized."""
        try:
            accept = hongbao_native.accept_key(request.header("sec-websocket-key") or "")
        except ValueError:
            raise errors.InvalidRequest(
                "Sec-WebSocket-Key must be base64 of 16 bytes (RFC 6455 section 4.2.1)"
            ) from None
        query = parse_qs(request.query, keep_blank_values=True)
        cursor = _cursor(query)
        offered, token = _subprotocol_token(request.header("sec-websocket-protocol"))
        token = token or _last(query, "token")
        if not token:
            raise errors.Unauthorized(NO_TOKEN)
        identity = self.verifier.verify(token)
        headers = [("upgrade", "websocket"), ("connection", "Upgrade"), ("sec-websocket-accept", accept)]
        if offered:
            headers.append(("sec-websocket-protocol", PROTOCOL))
        return Accepted(identity, secrets.token_urlsafe(12), cursor, hongbao_native.encode_response(101, headers, b""))

    async def preflight(self, ctx: Context) -> Response:
        """GET /v1/ws/preflight: what a handshake would meet now, for a browser that cannot read a
        failed handshake's status (docs/architecture.md section 7). The app has already checked the bearer
        header (401); then 403 for a refused Origin, 503 + Retry-After while the push store is down
        or the admission rate has no token left, else 200 ``{"status": "ok"}``. Takes no admission
        token: it only reads the limiter."""
        try:
            self._check_origin(ctx.request)
        except errors.Forbidden as exc:
            return from_error(exc)
        if self.store_down():
            return _STORE_DOWN
        # answered, not raised: the app counts raised "busy" errors as refused opens
        return self._busy() if self.limiter.retry_after() > 0 else _READY

    async def upgrade_required(self, _ctx: Context) -> Response:
        """GET /v1/ws without an upgrade: 426, naming the protocol and version to ask for."""
        raise errors.UpgradeRequired("GET /v1/ws is a WebSocket handshake (RFC 6455 section 4.1)")

    def _check_origin(self, request: Request) -> None:
        origin = request.header("origin")
        if self.origins and origin is not None and origin.lower() not in self.origins:
            raise errors.Forbidden("this Origin may not open a WebSocket here (RFC 6455 section 10.2)")

    def _busy(self) -> Response:
        """503 busy with Retry-After: the whole seconds until the limiter has a token again, at
        least 1 (RFC 9110 section 10.2.3); one prebuilt answer per value."""
        seconds = max(1, math.ceil(self.limiter.retry_after()))
        answer = self.busy_answers.get(seconds)
        if answer is None:
            answer = self.busy_answers[seconds] = from_error(
                errors.TooManyConnections("too many new connections; retry later", seconds)
            )
        return answer


def _subprotocol_token(header: str | None) -> tuple[bool, str | None]:
    """(whether ``bearer`` was offered, the token listed right after it) from a
    Sec-WebSocket-Protocol value (RFC 6455 section 4.1: comma-separated tokens, case-sensitive)."""
    if header is None:
        return False, None
    items = [item.strip() for item in header.split(",")]
    if PROTOCOL not in items:
        return False, None
    at = items.index(PROTOCOL) + 1
    return True, items[at] if at < len(items) and items[at] else None


def _last(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None


def _cursor(query: dict[str, list[str]]) -> Cursor:
    """The reconnect cursor of the query (``offset``, ``epoch``, ``hello``); InvalidRequest for a malformed one."""
    offset_text, epoch = _last(query, "offset") or None, _last(query, "epoch") or None
    if offset_text is not None and not (offset_text.isascii() and offset_text.isdigit() and len(offset_text) <= 18):
        raise errors.InvalidRequest("offset must be a non-negative integer")
    if epoch is not None and not _EPOCH.fullmatch(epoch):
        raise errors.InvalidRequest("epoch must be 1..64 of [A-Za-z0-9._~-]")
    hello = _last(query, "hello") or "0"
    if hello not in ("0", "1"):
        raise errors.InvalidRequest("hello must be 1 (send the stream's epoch first) or 0")
    return Cursor(int(offset_text) if offset_text is not None else None, epoch, hello == "1")
