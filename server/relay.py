"""Requests for a packet another node owns, relayed to that node (docs/architecture.md section 9).

The relay sends the request as it came (method, target, headers but the hop-by-hop ones, body)
to the owner's public listener with the internal secret in ``x-hongbao-internal`` (as the push
forwards carry it), so the owner serves it whoever it thinks owns the packet (no second hop, no
loop), and answers with the owner's status, headers and body. The owner checks the caller's
token itself. The client is aiohttp's, as for the push forwards (server/push_internal.py): a
keep-alive pool per owner, its parser in C.
"""

from __future__ import annotations

import asyncio
import hmac
import logging

import aiohttp
from hongbao.server.push_internal import SECRET_HEADER
from hongbao.server.responses import Response
from hongbao_native import Request

log = logging.getLogger("hongbao.fleet")
#: Headers that belong to one connection (RFC 9110 section 7.6.1) or that the sender sets itself.
_NOT_RELAYED = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "date",
        "server",
        SECRET_HEADER,
    }
)


class Relay:
    """Relays requests to other nodes with ``secret``; each waits at most ``timeout_s``."""

    __slots__ = ("_secret", "_timeout", "_session")

    def __init__(self, secret: str, timeout_s: float) -> None:
        self._secret, self._timeout = secret, aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def relayed(self, request: Request) -> bool:
        """Whether ``request`` comes from another node of ours (it carries the internal secret)."""
        given = request.header(SECRET_HEADER)
        return given is not None and hmac.compare_digest(given.encode(), self._secret.encode())

    def send(self, url: str, request: Request) -> asyncio.Task[Response | None]:
        """``request`` answered by the node at ``url`` (http://host:port), or None when that node
        did not answer in time (refused, reset, timed out): the caller skips it. A task: aiohttp's
        timeouts need one, and the server drives its handlers' coroutines without."""
        return asyncio.get_running_loop().create_task(self._send(url, request))

    async def _send(self, url: str, request: Request) -> Response | None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout, auto_decompress=False)
        headers = [(name, value) for name, value in request.headers if name not in _NOT_RELAYED]
        headers.append((SECRET_HEADER, self._secret))
        try:
            async with self._session.request(
                request.method, url + request.target, headers=headers, data=request.body or None
            ) as answer:
                body = await answer.read()
                kept = [(k.lower(), v) for k, v in answer.headers.items() if k.lower() not in _NOT_RELAYED]
                return Response(answer.status, body, kept)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.info("relay to %s failed: %s", url, type(exc).__name__)
            return None

    async def close(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()
