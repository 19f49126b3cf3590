"""An asyncio client for the push channel of docs/architecture.md section 7, for our own use (the storm, the
tests) and for users.

It runs on the ``websockets`` library rather than on our own frame codec: a well-kept, independent
implementation of RFC 6455 on the client side, so our server is exercised by a peer that does not
share its bugs. What it adds is the push protocol:

* token: each connect asks ``token_provider`` for a JWT and sends it as the subprotocol list
  ``bearer, <jwt>`` (the server echoes only ``bearer``; the token never reaches a log of ours:
  the handshake's debug log line of that header is redacted);
* acks: each message of the user's stream is acked ``{"type":"ack","offset":n}`` once the
  ``on_event`` callback has returned;
* dedupe by offset: the server sends a stream in offset order (at-least-once), so a high-water mark
  per stream (the user's, and one per topic) drops what was already delivered;
* resume: every connect asks for the hello frame (``?hello=1``: the server's first frame,
  ``{"type":"hello","epoch"}``, names the stream's epoch); a reconnect carries
  ``?offset=<last>&epoch=<epoch>`` (only ``?epoch=`` before the first message); a
  ``{"type":"reset"}`` message, a hello or a message of another epoch means the history is
  incomplete: ``on_reset`` runs so the app reloads its state over HTTP, and the marks start over
  in the new epoch;
* app ping ``{"type":"ping"}`` every ``ping_interval_s``; no inbound frame within ``pong_timeout_s``
  of a ping aborts the connection and reconnects (a half-open link is noticed);
* reconnect with exponential backoff and full jitter (AWS Architecture Blog, "Exponential Backoff
  And Jitter", 2015): the n-th retry waits uniform(0, min(cap, base * 2**n)) seconds, at least a
  503's Retry-After. A failed connect is retried like a dropped connection, whether or not the
  client was ever connected: nothing listening, a link reset or closed before the 101 (a worker
  killed mid-handshake; the ``websockets`` library may raise ConnectionClosedError then), no 101
  within ``open_timeout_s``, or any answer other than 101 (a 401 too, up to the
  ``max_auth_failures``-th; never a 403). Close 4003 (token expired) of a connection that was up
  for ``stable_after_s`` reconnects at once with a fresh token (any close of such a stable
  connection resets the retry count);
* final outcomes (PushClientError, raised by ``run``, ``wait_connected`` and ``close``):
  ``max_auth_failures`` handshakes answered 401 with no connection opened in between
  (AuthenticationFailed: the token is refused, its message says why and what to do), a 403
  (Refused), close 4001: a newer session of the same user took over (Replaced);
* topics: ``subscribe``/``unsubscribe``, sent again after every reconnect; ``subscribed`` holds the
  topics the server confirmed on the current connection (none while there is no connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.http11 import Response
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

log = logging.getLogger("hongbao.push_client")
_WIRE_LOG = logging.getLogger("hongbao.push_client.wire")  # the websockets library's own debug lines
CLOSE_REPLACED, CLOSE_TOKEN_EXPIRED = 4001, 4003


class PushClientError(Exception):
    """The client stopped for good (it does not retry)."""


class AuthenticationFailed(PushClientError):
    """``max_auth_failures`` handshakes in a row (no connection opened in between) were answered
    401: the token provider's tokens are refused (expired, or signed with another key)."""


class Refused(PushClientError):
    """A handshake was answered 403: this client may not connect (e.g. its Origin is not allowed)."""


class Replaced(PushClientError):
    """The server closed with 4001: a newer connection of the same user took over."""


@dataclass(frozen=True, slots=True)
class PushEvent:
    """One delivered message: ``event`` name, its ``data``, ``offset`` and ``epoch`` in its stream,
    and ``topic`` (None for the user's own stream, else the broadcast topic)."""

    event: str
    data: Any
    offset: int
    epoch: str | None
    topic: str | None


@dataclass(slots=True)
class ClientStats:
    """Counters since the client was made: ``connects`` (101s), ``events`` (delivered after
    dedupe), ``duplicates`` (dropped by dedupe), ``acks`` (sent), ``resets`` (on_reset calls)."""

    connects: int = 0
    events: int = 0
    duplicates: int = 0
    acks: int = 0
    resets: int = 0


TokenProvider = Callable[[], "str | Awaitable[str]"]
EventHandler = Callable[[PushEvent], "Awaitable[None] | None"]
ResetHandler = Callable[[], "Awaitable[None] | None"]
RetryHandler = Callable[[int, float, str], None]


def backoff_delay(attempt: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Full-jitter backoff (AWS Architecture Blog, "Exponential Backoff And Jitter"): seconds to
    wait before retry number ``attempt`` (0-based), uniform in [0, min(cap_s, base_s * 2**attempt)]."""
    return rng.uniform(0.0, min(cap_s, base_s * 2.0 ** min(attempt, 62)))


def _server_says(response: Response) -> str:
    """The message of a refused handshake's JSON error body (``{"error": {"message": ...}}``),
    in parentheses with a leading space, or "" when it has none."""
    try:
        message = orjson.loads(response.body)["error"]["message"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return ""
    return f" ({message})" if isinstance(message, str) and message else ""


def _retry_after_s(response: Response) -> float:
    """A refused handshake's Retry-After in seconds (the delay-seconds form; 0 without one)."""
    value = response.headers.get("Retry-After", "")
    return float(value) if value.isdigit() else 0.0


async def _call(callback: Callable[..., Any], *args: Any) -> Any:
    """Call a sync or async callback and return its result."""
    result = callback(*args)
    return await result if inspect.isawaitable(result) else result


class PushClient:
    """One user's push connection, kept up until ``close()`` (or a PushClientError).

    ``url``: ``ws://host:port/v1/ws`` (``wss://`` too; anything else raises InvalidURI here).
    ``token_provider()``: a JWT (sync or async), called before every connect. ``on_event(PushEvent)``:
    each message once, in order (sync or async). ``on_reset()``: the history was lost, reload over
    HTTP. An exception raised by one of these three ends the client (``run`` raises it), but for an
    OSError or TimeoutError of ``token_provider`` (a token fetched over the network), which is retried.
    ``on_retry(attempt, delay_s, reason)``: told before each backoff sleep (``reason``: the
    exception's class name, ``handshake <status>`` or ``closed <code>``). ``offset``/``epoch``: a
    cursor the app kept from an earlier client (e.g. across restarts), else None. Times in seconds.
    """

    def __init__(
        self,
        url: str,
        token_provider: TokenProvider,
        *,
        on_event: EventHandler,
        on_reset: ResetHandler | None = None,
        on_retry: RetryHandler | None = None,
        topics: tuple[str, ...] = (),
        ping_interval_s: float = 30.0,
        pong_timeout_s: float = 10.0,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 30.0,
        stable_after_s: float = 10.0,
        max_auth_failures: int = 3,
        open_timeout_s: float = 10.0,
        rng: random.Random | None = None,
        offset: int | None = None,
        epoch: str | None = None,
    ) -> None:
        parse_uri(url)  # InvalidURI now rather than a retry loop that cannot succeed
        self.url, self._token_provider = url, token_provider
        self._on_event, self._on_reset, self._on_retry = on_event, on_reset, on_retry
        self.topics: set[str] = set(topics)
        self.subscribed: set[str] = set()  # confirmed by the server on the current connection
        if not 0 < pong_timeout_s <= ping_interval_s:
            raise ValueError("pong_timeout_s must be in (0, ping_interval_s]")
        self.ping_interval_s, self.pong_timeout_s = ping_interval_s, pong_timeout_s
        self.backoff_base_s, self.backoff_cap_s, self.stable_after_s = backoff_base_s, backoff_cap_s, stable_after_s
        self.max_auth_failures, self.open_timeout_s = max_auth_failures, open_timeout_s
        self._rng = rng or random.Random()
        self.stats = ClientStats()
        self.epoch = epoch  # of the user's stream
        self._marks: dict[str | None, tuple[str | None, int]] = {}  # stream (None = user) -> (epoch, offset)
        if offset is not None:
            self._marks[None] = (epoch, offset)
        self._ws: ClientConnection | None = None
        self._connected, self._stop, self._ended = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._error: Exception | None = None  # what ended run(), if it raised
        self._last_rx = 0.0  # loop time of the last inbound message
        self._task: asyncio.Task[None] | None = None

    @property
    def last_offset(self) -> int | None:
        """The highest offset of the user's stream delivered in the current epoch (None: nothing yet)."""
        mark = self._marks.get(None)
        return mark[1] if mark else None

    def resume_url(self) -> str:
        """``url`` asking for the hello frame (``hello=1``), with ``offset`` and ``epoch`` of the last
        delivered message, or only ``epoch`` (from the server's hello) while no message has come yet."""
        params = {"hello": "1", **({"epoch": self.epoch} if self.epoch else {})}
        if self.last_offset is not None and self.epoch:
            params["offset"] = str(self.last_offset)
        scheme, netloc, path, query, _ = urlsplit(self.url)
        query = "&".join(q for q in (query, urlencode(params)) if q)
        return urlunsplit((scheme, netloc, path, query, ""))

    async def __aenter__(self) -> PushClient:
        self._task = asyncio.create_task(self.run())
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def wait_connected(self, timeout_s: float = 10.0) -> None:
        """Wait until a connection is open, through any number of failed connects and retries.
        Raises the client's final error if it ends first (a PushClientError, or what a callback
        raised), PushClientError if it was closed first, TimeoutError after ``timeout_s`` seconds."""
        waiters = [asyncio.ensure_future(event.wait()) for event in (self._connected, self._ended)]
        done, _ = await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()
        if waiters[1] in done:
            raise self._error or PushClientError("the client was closed")
        if waiters[0] not in done:
            raise TimeoutError(f"not connected within {timeout_s} s")

    async def close(self) -> None:
        """Stop: close the connection (1000) and end ``run``; re-raises the client's error, if any."""
        self._stop.set()
        if self._ws is not None:
            await self._ws.close()
        if self._task is not None:
            task, self._task = self._task, None
            await task

    async def subscribe(self, topic: str) -> None:
        """Receive broadcasts on ``topic`` (now, and again after every reconnect)."""
        self.topics.add(topic)
        await self._send_if_open({"type": "subscribe", "topic": topic})

    async def unsubscribe(self, topic: str) -> None:
        """Stop receiving broadcasts on ``topic``."""
        self.topics.discard(topic)
        await self._send_if_open({"type": "unsubscribe", "topic": topic})

    async def run(self) -> None:
        """Connect, receive, reconnect, until ``close()``. Every failed connect or dropped
        connection is retried with backoff (module docstring); raises AuthenticationFailed,
        Refused or Replaced, or what a callback raised."""
        try:
            await self._run()
        except Exception as exc:
            self._error = exc
            raise
        finally:
            self._ended.set()

    async def _run(self) -> None:
        attempt = auth_failures = 0
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            try:
                token = await _call(self._token_provider)
                ws = await connect(
                    self.resume_url(),
                    subprotocols=[Subprotocol("bearer"), Subprotocol(token)],
                    compression=None,
                    ping_interval=None,
                    open_timeout=self.open_timeout_s,
                    close_timeout=2.0,
                    logger=_WIRE_LOG,
                )
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status == 403:
                    raise Refused(f"handshake answered 403{_server_says(exc.response)}") from None
                if status == 401:
                    auth_failures += 1
                    if auth_failures >= self.max_auth_failures:
                        raise AuthenticationFailed(
                            f"{auth_failures} handshakes answered 401{_server_says(exc.response)}: "
                            "the server refuses the token; mint a fresh one, signed with the server's key "
                            "(hongbao token --user ID, with the server's --data-dir)"
                        ) from None
                reason, wait_s = f"handshake {status}", _retry_after_s(exc.response)
            except (OSError, TimeoutError, WebSocketException) as exc:
                # nothing listening, a link reset or closed before the 101 (ConnectionClosedError
                # when that happened before the request was written), no answer within open_timeout_s;
                # or the token provider's own fetch failed
                reason, wait_s = type(exc).__name__, 0.0
            else:
                opened, auth_failures = loop.time(), 0
                async with ws:
                    code = await self._session(ws)
                if code == CLOSE_REPLACED:
                    raise Replaced("closed 4001: a newer connection of this user took over")
                if loop.time() - opened >= self.stable_after_s:
                    attempt = 0
                    if code == CLOSE_TOKEN_EXPIRED:
                        continue  # at once, with a fresh token
                reason, wait_s = f"closed {code}", 0.0
            if self._stop.is_set():
                break
            delay = max(wait_s, backoff_delay(attempt, self.backoff_base_s, self.backoff_cap_s, self._rng))
            if self._on_retry is not None:
                self._on_retry(attempt, delay, reason)
            log.info("push connection failed or lost (%s); retry %d in %.2f s", reason, attempt, delay)
            attempt += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)

    async def _session(self, ws: ClientConnection) -> int | None:
        """Serve one open connection until it closes; returns the close code received (None: none)."""
        if self._stop.is_set():  # close() ran during the handshake
            await ws.close()
            return ws.close_code
        self._ws, self._last_rx = ws, asyncio.get_running_loop().time()
        self.subscribed.clear()
        self.stats.connects += 1
        self._connected.set()
        keepalive = asyncio.create_task(self._keepalive(ws))
        try:
            for topic in sorted(self.topics):
                await ws.send(orjson.dumps({"type": "subscribe", "topic": topic}).decode())
            async for raw in ws:
                self._last_rx = asyncio.get_running_loop().time()
                await self._handle(ws, raw)
        except ConnectionClosed:
            pass
        finally:
            keepalive.cancel()
            self._ws = None
            self._connected.clear()
            self.subscribed.clear()  # there is no current connection to have confirmed them
        return ws.close_code

    async def _keepalive(self, ws: ClientConnection) -> None:
        """An app ping every ping_interval_s; no inbound message within pong_timeout_s of one
        aborts the TCP connection (the receive loop then ends and the client reconnects)."""
        loop = asyncio.get_running_loop()
        await asyncio.sleep(self.ping_interval_s)
        while True:
            sent = loop.time()
            await ws.send('{"type":"ping"}')
            await asyncio.sleep(self.pong_timeout_s)
            if self._last_rx < sent:
                log.info("no answer %.1f s after a ping: dropping the connection", self.pong_timeout_s)
                ws.transport.abort()
                return
            await asyncio.sleep(self.ping_interval_s - self.pong_timeout_s)

    async def _handle(self, ws: ClientConnection, raw: str | bytes) -> None:
        """Act on one server message (unknown types and non-objects are ignored, for newer servers)."""
        try:
            message = orjson.loads(raw)
        except orjson.JSONDecodeError:
            message = None
        if not isinstance(message, dict):
            log.warning("ignored a push message that is not a JSON object (%d bytes)", len(raw))
            return
        kind = message.get("type")
        if kind == "reset":
            await self._reset(message.get("epoch"))
        elif kind == "hello" and isinstance(message.get("epoch"), str):
            await self._hello(message["epoch"])
        elif isinstance(message.get("offset"), int) and isinstance(message.get("event"), str):
            await self._deliver(ws, message)
        elif kind in ("subscribed", "unsubscribed") and isinstance(message.get("topic"), str):
            (self.subscribed.add if kind == "subscribed" else self.subscribed.discard)(message["topic"])
        elif kind == "error":
            log.warning("the server refused a message: %s", message.get("message"))
        elif kind != "pong":
            log.debug("ignored a push message of type %r", kind)

    async def _hello(self, epoch: str) -> None:
        """The connection's first frame names the stream's epoch: kept, so a reconnect before any
        message still names it; another epoch than the one known means the history was lost."""
        if self.epoch is not None and epoch != self.epoch:
            await self._reset(epoch)
        self.epoch = epoch

    async def _reset(self, epoch: str | None) -> None:
        """The server lost part of the user's history: start over in ``epoch`` and tell the app."""
        self.epoch = epoch
        self._marks.pop(None, None)
        self.stats.resets += 1
        if self._on_reset is not None:
            await _call(self._on_reset)

    async def _deliver(self, ws: ClientConnection, message: dict[str, Any]) -> None:
        topic, offset, epoch = message.get("topic"), message["offset"], message.get("epoch")
        if topic is None and epoch != self.epoch:
            if self.epoch is not None:  # another epoch without a reset message: the history was lost too
                await self._reset(epoch)
            self.epoch = epoch
        mark_epoch, mark = self._marks.get(topic, (epoch, 0))
        if mark_epoch == epoch and offset <= mark:
            self.stats.duplicates += 1
        else:
            await _call(self._on_event, PushEvent(message["event"], message.get("data"), offset, epoch, topic))
            self._marks[topic] = (epoch, offset)
            self.stats.events += 1
        if topic is None:
            await ws.send(orjson.dumps({"type": "ack", "offset": offset}).decode())
            self.stats.acks += 1

    async def _send_if_open(self, message: dict[str, str]) -> None:
        if self._ws is not None:
            try:
                await self._ws.send(orjson.dumps(message).decode())
            except ConnectionClosed:
                pass  # sent again by the next connection


class _NoToken(logging.Filter):
    """Redact the subprotocol header (it carries the JWT) from the websockets library's debug log."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 2 and str(args[0]).lower() == "sec-websocket-protocol":
            first, comma, _token = str(args[1]).partition(",")
            record.args = (args[0], first + (", <redacted>" if comma else ""))
        return True


_WIRE_LOG.addFilter(_NoToken())
