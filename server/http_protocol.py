"""HTTP/1.1 keep-alive on an asyncio protocol, parsed and encoded by the native core.

Per connection: requests are answered in order (pipelining), the read timeout depends on what
the parser waits for (keep-alive idle, request head, body: a slow client cannot hold a
connection by trickling bytes, since the head timer is not reset by more bytes), and a worker
refuses connections past ``max_connections`` with 503. Limits answer 413 / 431 / 408 and close.

Answers start eagerly: a connection's serving coroutine runs at once inside ``data_received`` and
only becomes a Task if it has to wait (a database call), so an answer that needs no I/O costs no
Task and no extra turn of the loop (what Python 3.12's eager tasks do, kept here for 3.11). A
handler that waits for one reply and only computes after it hands back a Soon
(hongbao.core.soon) instead: the connection waits on its callback, with no coroutine at all.
Answers are written together once per turn of the loop (``Connections.flush``), in order per
connection: a burst of answers wakes the client once, not once per answer, which on a busy
machine costs more than building the answer.

A HEAD is answered as its GET is (server/router.py), and the answer goes out without its body:
the next pipelined answer follows right after its head (RFC 9110 section 9.3.2).

A WebSocket upgrade request is checked by the app's ``ws_gate`` (server/ws_handshake.py) when its
turn comes (answers to earlier pipelined requests are written first); on success the 101 is
written and the transport is handed to a ``WsConnection`` (server/ws_connection.py) with the bytes
that followed the request head. WebSocket connections count against ``max_connections`` too.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, Literal, cast

import hongbao_native
from hongbao.core.soon import Soon
from hongbao.server.access_log import access
from hongbao.server.app import App
from hongbao.server.auth import Identity
from hongbao.server.responses import Response, error_response
from hongbao.server.ws_connection import WsRegistry, take_over
from hongbao.server.ws_handshake import WS_PATH
from hongbao_native import HttpParseError, RequestParser

log = logging.getLogger("hongbao.http")
#: What a connection's read deadline waits for: the parser's states ("idle": the next request,
#: "head", "body"; "upgraded" and "failed" have no deadline), "busy" (a request is being answered:
#: none), "lingering" (a refused connection draining before its close), "" (not armed yet).
TimerState = Literal["", "idle", "head", "body", "upgraded", "failed", "busy", "lingering"]
MAX_PIPELINED = 32
_PARSE_CODES = {
    400: "invalid_request",
    413: "payload_too_large",
    431: "headers_too_large",
    501: "not_implemented",
    505: "http_version_not_supported",
}
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
SWEEP_S = 0.1  # read deadlines are enforced within this many seconds
#: After answering a malformed request: how long its connection keeps reading (and dropping) what
#: the client still sends, half-closed, so its answer is not lost to a reset (RFC 9112 section 9.6).
LINGER_S = 2.0


def start_eagerly(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
    """Run ``coro`` now up to its first suspension; None if it finished, else the Task that drives
    the rest (in the same context, as a Task started with ``coro`` would have)."""
    context = contextvars.copy_context()
    try:
        first = context.run(coro.send, None)
    except StopIteration:
        return None
    return loop.create_task(_drive(_Rest(coro, first)), context=context)


async def _drive(rest: _Rest) -> None:
    await rest


class _Rest:
    """Awaitable: the rest of a coroutine that already suspended once, yielding ``first`` (the
    future it waits for): hands each suspension to the Task and each resumption (or a thrown
    exception, such as a cancellation) back to the coroutine."""

    __slots__ = ("coro", "first")

    def __init__(self, coro: Coroutine[Any, Any, None], first: Any) -> None:
        self.coro, self.first = coro, first

    def __await__(self) -> Generator[Any, Any, None]:
        coro, value = self.coro, self.first
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # thrown into the Task: on to the coroutine
                try:
                    value = coro.throw(exc)
                except StopIteration:
                    return
                continue
            try:
                value = coro.send(sent)
            except StopIteration:
                return


def _head_only(wire: bytes, response: Response) -> bytes:
    """The encoded ``response`` (``wire``) as the answer to a HEAD: its status line and header
    fields, Content-Length of the body included, without the body (RFC 9110 section 9.3.2)."""
    return wire[: len(wire) - len(response.body)]


def _closing(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``headers`` (lower-case names) with ``close`` among the Connection options: one Connection
    field, its options a comma-separated list (RFC 9110 section 7.6.1), ``close`` added to the
    options already there (a 426's ``upgrade``) or the field added with ``close`` alone."""
    out = [(name, f"{value}, close") if name == "connection" else (name, value) for name, value in headers]
    return out if any(name == "connection" for name, _ in headers) else [*out, ("connection", "close")]


class Connections:
    """This worker's open HTTP connections (``open``) and WebSocket connections (``ws``), together
    against the configured ``limit``."""

    __slots__ = ("open", "limit", "unsent", "ws")

    def __init__(self, limit: int, ws: WsRegistry) -> None:
        self.open: set[HttpProtocol] = set()
        self.limit = limit
        self.ws = ws
        self.unsent: list[HttpProtocol] = []  # connections with answers waiting for this turn's flush

    def flush(self) -> None:
        """Write every waiting answer (one write per connection); scheduled once per turn."""
        unsent, self.unsent = self.unsent, []
        for conn in unsent:
            conn.flush()

    def sweep(self, now: float) -> None:
        """Enforce read deadlines: every connection whose deadline (loop time) has passed times out."""
        for conn in [c for c in self.open if c.deadline and c.deadline <= now]:
            conn.timed_out(conn.timer_state)

    async def sweep_forever(self, interval_s: float = SWEEP_S) -> None:
        """Sweep every ``interval_s`` seconds until cancelled (one task per worker)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval_s)
            self.sweep(loop.time())

    def close_idle(self) -> None:
        """Close every connection that is not answering a request, and start closing every
        WebSocket with 1001 going away (graceful shutdown; RFC 6455 section 7.4.1)."""
        for conn in list(self.open):
            if conn.task is None and conn.transport is not None:
                conn.flush()
                conn.transport.close()
        self.ws.close_all(1001, "server shutting down")

    def count(self) -> int:
        """Open connections of both kinds."""
        return len(self.open) + len(self.ws.open)


class HttpProtocol(asyncio.Protocol):
    """One client connection: parse, dispatch to ``app``, write answers in order."""

    __slots__ = (
        "app",
        "conns",
        "loop",
        "timeouts",
        "transport",
        "parser",
        "pending",
        "task",
        "deadline",
        "timer_state",
        "paused",
        "out",
    )

    def __init__(self, app: App, conns: Connections) -> None:
        s = app.settings
        self.app, self.conns = app, conns
        self.loop = asyncio.get_running_loop()  # protocols are made by the loop's server, inside the loop
        self.timeouts: dict[TimerState, float] = {
            "idle": s.keepalive_timeout_s,
            "head": s.header_timeout_s,
            "body": s.body_timeout_s,
        }
        self.parser = RequestParser(s.max_header_bytes, s.max_headers, s.max_body_bytes)
        self.pending: deque[hongbao_native.Request] = deque()
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | Soon[Any] | None = None  # what answers the request in hand
        self.deadline = 0.0  # loop.time() at which the current read timeout fires; 0: none
        self.timer_state: TimerState = ""
        self.paused = False
        self.out: list[bytes] = []  # answers not written yet (see Connections.flush)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        if self.conns.count() >= self.conns.limit:
            self._finish(error_response(503, "busy", "too many connections to this worker", [("retry-after", "1")]))
            return
        self.conns.open.add(self)
        self._arm_timer(self.parser.state)

    def connection_lost(self, exc: Exception | None) -> None:
        self.conns.open.discard(self)
        self.deadline = 0.0

    def data_received(self, data: bytes) -> None:
        parser = self.parser
        try:
            requests = parser.feed(data)
        except HttpParseError as exc:
            self._refuse(exc)
            return
        if parser.take_continue():
            self.send(CONTINUE)
        if requests:
            pending = self.pending
            pending.extend(requests)
            if self.task is None:
                self._serve_now()
            if len(pending) >= MAX_PIPELINED and self.transport is not None and not self.paused:
                self.transport.pause_reading()
                self.paused = True
        state: TimerState = "busy" if self.task is not None else parser.state
        if state != self.timer_state:  # the head and body deadlines run from the first byte, not the latest one
            self._arm_timer(state)

    def _arm_timer(self, state: TimerState) -> None:
        """Set the read deadline for ``state`` (what the parser waits for, or "busy": none) unless
        it is set for it already; the worker's sweep enforces it (Connections.sweep), so a request
        costs an assignment, not a timer. "failed" (a malformed request behind the ones just
        answered) answers its error and closes."""
        if state == self.timer_state:
            return
        if state == "failed":  # the requests pipelined ahead of a malformed one are answered: now its error
            try:
                self.parser.feed(b"")
            except HttpParseError as exc:
                self._refuse(exc)
            return
        self._cancel_timer(state)
        timeout = self.timeouts.get(state)
        if timeout is not None:
            self.deadline = self.loop.time() + timeout

    def _refuse(self, exc: HttpParseError) -> None:
        """Answer the parse error ``exc`` (its status: 400, 413, 431, 501 or 505) and close in
        stages (RFC 9112 section 9.6): half-close after the answer, then drop what the client
        still sends (a body over the limit, say) until it closes or LINGER_S pass. Closing with
        unread input at once would send a reset, which can destroy the answer before the client
        reads it."""
        transport = self.transport
        if transport is None or transport.is_closing() or self.timer_state == "lingering":
            return  # the parser stays failed: every later read lands here and is dropped
        status = int(getattr(exc, "status", 400))
        response = error_response(status, _PARSE_CODES.get(status, "invalid_request"), str(exc))
        if not transport.can_write_eof():
            self._finish(response)
            return
        self.flush()
        transport.write(hongbao_native.encode_response(response.status, _closing(response.headers), response.body))
        transport.write_eof()
        self._cancel_timer("lingering")
        self.deadline = self.loop.time() + LINGER_S

    def _cancel_timer(self, state: TimerState) -> None:
        self.deadline = 0.0
        self.timer_state = state

    def timed_out(self, state: TimerState) -> None:
        """The read deadline of ``state`` passed: close an idle (or lingering) connection, answer
        408 otherwise."""
        self.deadline = 0.0
        if state in ("idle", "lingering"):
            if self.transport is not None:
                self.flush()
                self.transport.close()
            return
        self._finish(error_response(408, "request_timeout", f"the request {state} took too long to arrive"))

    def send(self, data: bytes) -> None:
        """Queue ``data`` to be written at the end of this turn of the loop, after what is queued
        (``_reply`` does the same inline)."""
        if not self.out:
            if not self.conns.unsent:
                self.loop.call_soon(self.conns.flush)
            self.conns.unsent.append(self)
        self.out.append(data)

    def flush(self) -> None:
        """Write what is queued now (unless the connection is closing)."""
        out = self.out
        if out:
            self.out = []
            transport = self.transport
            if transport is not None and not transport.is_closing():
                transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _finish(self, response: Response, request: hongbao_native.Request | None = None) -> None:
        """Answer once more (to ``request``, if the answer is to one) and close: used for errors that
        end the connection and for requests that asked to close."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self.flush()
        wire = hongbao_native.encode_response(response.status, _closing(response.headers), response.body)
        transport.write(_head_only(wire, response) if request is not None and request.method == "HEAD" else wire)
        transport.close()

    def _upgrade(self, request: hongbao_native.Request) -> None:
        """Answer a WebSocket upgrade: the gate's refusal (then close), or the 101 and the hand-over;
        either is one access line when the access log is on."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        started = time.perf_counter()
        accepted = self.app.ws_gate.accept(request)
        events = self.app.metrics.events
        if isinstance(accepted, Response):
            if accepted.status == 503:
                events["ws_admission_rejections"] += 1
            if self.app.access_log:
                self._access(request, accepted.status, started, None)
            self._finish(accepted, request)
            return
        events["ws_handshakes"] += 1
        if self.app.access_log:
            self._access(request, 101, started, accepted.identity)
        self.flush()
        transport.write(accepted.response)
        self.conns.open.discard(self)
        self.transport, self.deadline = None, 0.0
        take_over(
            transport,
            accepted.identity,
            accepted.sid,
            self.app.push,
            self.conns.ws,
            accepted.cursor,
            self.parser.take_buffered(),
        )
        if self.paused:
            transport.resume_reading()

    @staticmethod
    def _access(request: hongbao_native.Request, status: int, started: float, identity: Identity | None) -> None:
        """The access line of an upgrade ``request`` answered ``status``, checked since ``started``
        (time.perf_counter()), by ``identity`` when it was accepted."""
        route = WS_PATH if request.path == WS_PATH else "unmatched"
        access(request, route, status, time.perf_counter() - started, identity)

    def _serve_now(self, settled: tuple[hongbao_native.Request, Soon[Any]] | None = None) -> None:
        """Answer the pending requests that need no I/O right here, with no coroutine at all
        (first the request whose Soon has ``settled``, when given); from the first one that must
        wait (a Soon, a coroutine, an upgrade) on, its callback or the serving coroutine takes over."""
        pending = self.pending
        try:
            if settled is not None and not self._answer(settled[0], settled[1].result()):
                return
            while pending and not pending[0].websocket:
                request = pending.popleft()
                result = self.app.dispatch(request)
                if not (self._reply(request, result) if type(result) is Response else self._answer(request, result)):
                    return
        except Exception:
            log.exception("connection handler failed")
            self._finish(error_response(500, "internal", "internal error"))
            return
        if pending:
            self._start_serving(self._serve())

    def _answer(self, request: hongbao_native.Request, result: Any) -> bool:
        """Answer ``request`` with ``result`` (App.dispatch's, or what its Soon settled to): reply
        now, or hand it to the Soon's callback or to the serving coroutine; True when the next
        pending request may be answered here."""
        if isinstance(result, Soon):
            self._cancel_timer("busy")
            self.task = result
            result.add_done_callback(functools.partial(self._settled, request))
            return False
        if not isinstance(result, Response):
            self._start_serving(self._serve(request, result))
            return False
        return self._reply(request, result)

    def _settled(self, request: hongbao_native.Request, soon: Soon[Response | Coroutine[Any, Any, Response]]) -> None:
        """``request``'s Soon (App.dispatch) is done: answer it (or await the coroutine it fell
        back to), then go on with the requests pipelined behind it."""
        self.task = None
        self._serve_now((request, soon))
        if self.task is None and self.transport is not None and not self.transport.is_closing():
            self._arm_timer(self.parser.state)

    def _start_serving(self, serve: Coroutine[Any, Any, None]) -> None:
        self._cancel_timer("busy")  # no read timeout while answering; idle starts again after
        self.task = start_eagerly(self.loop, serve)

    def _reply(self, request: hongbao_native.Request, response: Response) -> bool:
        """Queue ``response`` to ``request`` (closing after it when the request asked to);
        False once the connection is closing."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        if not request.keep_alive:
            self._finish(response, request)
            return False
        wire = response.wire  # a constant answer's bytes, encoded once (responses.prebuilt)
        if not wire or request.version == "1.0":
            headers = response.headers
            if request.version == "1.0":  # HTTP/1.0 keeps the connection only when told so (RFC 9112 9.3)
                headers = [*headers, ("connection", "keep-alive")]
            wire = hongbao_native.encode_response(response.status, headers, response.body)
        if request.method == "HEAD":
            wire = _head_only(wire, response)
        out = self.out
        if not out:  # send() inline, on the path of every answer: the connection's first of the turn
            unsent = self.conns.unsent
            if not unsent:
                self.loop.call_soon(self.conns.flush)
            unsent.append(self)
        out.append(wire)
        if self.paused and len(self.pending) < MAX_PIPELINED // 2:
            transport.resume_reading()
            self.paused = False
        return True

    async def _serve(
        self, request: hongbao_native.Request | None = None, answer: Awaitable[Response] | None = None
    ) -> None:
        """Answer pending requests in order, awaiting the handlers that need I/O; ``request`` and
        its ``answer`` in the making come first when ``_serve_now`` handed them over."""
        try:
            if request is not None and answer is not None and not self._reply(request, await answer):
                return
            while self.pending:
                request = self.pending.popleft()
                if request.websocket:
                    self._upgrade(request)
                    return
                result = self.app.dispatch(request)
                if isinstance(result, Soon):
                    result = await result
                response = result if isinstance(result, Response) else await result
                if not self._reply(request, response):
                    return
        except Exception:
            log.exception("connection handler failed")
            self._finish(error_response(500, "internal", "internal error"))
        finally:
            self.task = None
            if self.transport is not None and not self.transport.is_closing():
                self._arm_timer(self.parser.state)
