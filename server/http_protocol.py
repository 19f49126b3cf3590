"""HTTP/1.1 keep-alive on an asyncio protocol, parsed and encoded by the native core.

Per connection: requests are answered in order (pipelining), the read timeout depends on what
the parser waits for (keep-alive idle, request head, body: a slow client cannot hold a
connection by trickling bytes, since the head timer is not reset by more bytes), and a worker
refuses connections past ``max_connections`` with 503. Limits answer 413 / 431 / 408 and close.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import cast

import hongbao_native
from hongbao_native import HttpParseError, RequestParser

from hongbao.server.app import App
from hongbao.server.responses import Response, error_response

log = logging.getLogger("hongbao.http")
MAX_PIPELINED = 32
_PARSE_CODES = {400: "invalid_request", 413: "payload_too_large", 431: "headers_too_large",
                501: "not_implemented", 505: "http_version_not_supported"}
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Connections:
    """This worker's open connections (``open``) against the configured ``limit``."""

    __slots__ = ("open", "limit")

    def __init__(self, limit: int) -> None:
        self.open: set[HttpProtocol] = set()
        self.limit = limit

    def close_idle(self) -> None:
        """Close every connection that is not answering a request (graceful shutdown)."""
        for conn in list(self.open):
            if conn.task is None and conn.transport is not None:
                conn.transport.close()


class HttpProtocol(asyncio.Protocol):
    """One client connection: parse, dispatch to ``app``, write answers in order."""

    __slots__ = ("app", "conns", "transport", "parser", "pending", "task", "timer", "timer_state", "paused")

    def __init__(self, app: App, conns: Connections) -> None:
        s = app.settings
        self.app, self.conns = app, conns
        self.parser = RequestParser(s.max_header_bytes, s.max_headers, s.max_body_bytes)
        self.pending: deque[hongbao_native.Request] = deque()
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.timer_state = ""
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        if len(self.conns.open) >= self.conns.limit:
            self._finish(error_response(503, "busy", "too many connections to this worker", [("retry-after", "1")]))
            return
        self.conns.open.add(self)
        self._arm_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.conns.open.discard(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def data_received(self, data: bytes) -> None:
        try:
            requests = self.parser.feed(data)
        except HttpParseError as exc:
            status = int(getattr(exc, "status", 400))
            self._finish(error_response(status, _PARSE_CODES.get(status, "invalid_request"), str(exc)))
            return
        if self.parser.take_continue() and self.transport is not None:
            self.transport.write(CONTINUE)
        if requests:
            self.pending.extend(requests)
            if self.task is None:
                self.task = asyncio.get_running_loop().create_task(self._serve())
            if len(self.pending) >= MAX_PIPELINED and self.transport is not None and not self.paused:
                self.transport.pause_reading()
                self.paused = True
        self._arm_timer()

    def _arm_timer(self) -> None:
        state = "busy" if self.task is not None else self.parser.state
        if state == self.timer_state and self.timer is not None:
            return  # the head and body timers run from the first byte, not the latest one
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.timer_state = state
        s = self.app.settings
        timeout = {"idle": s.keepalive_timeout_s, "head": s.header_timeout_s, "body": s.body_timeout_s}.get(state)
        if timeout is not None:
            self.timer = asyncio.get_running_loop().call_later(timeout, self._timed_out, state)

    def _timed_out(self, state: str) -> None:
        self.timer = None
        if state == "idle":
            if self.transport is not None:
                self.transport.close()
            return
        self._finish(error_response(408, "request_timeout", f"the request {state} took too long to arrive"))

    def _finish(self, response: Response) -> None:
        """Answer once more and close: used for errors that end the connection."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        headers = [*response.headers, ("connection", "close")]
        transport.write(hongbao_native.encode_response(response.status, headers, response.body))
        transport.close()

    async def _serve(self) -> None:
        try:
            while self.pending:
                request = self.pending.popleft()
                if request.websocket:
                    response = error_response(501, "not_implemented", "WebSocket push is not available on this server yet")
                    self._finish(response)
                    return
                response = await self.app.handle(request.method, request.path, request.query, request.headers, request.body)
                transport = self.transport
                if transport is None or transport.is_closing():
                    return
                if not request.keep_alive:
                    self._finish(response)
                    return
                transport.write(hongbao_native.encode_response(response.status, response.headers, response.body))
                if self.paused and len(self.pending) < MAX_PIPELINED // 2:
                    transport.resume_reading()
                    self.paused = False
        except Exception:
            log.exception("connection handler failed")
            self._finish(error_response(500, "internal", "internal error"))
        finally:
            self.task = None
            if self.transport is not None and not self.transport.is_closing():
                self._arm_timer()
