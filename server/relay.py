"""Requests relayed to another node (docs/architecture.md section 9): a packet's to the node of
its region that owns it, and an order of another region (or a send the traffic switch moves) to
that region's entry.

The relay sends the request as it came (method, target, headers but the hop-by-hop ones, body)
to the other node's public listener with the internal secret (as the push forwards carry it):
in ``x-hongbao-internal`` to an owner, which serves it whoever it thinks owns the packet (no
second hop, no loop); in ``x-hongbao-region-hop`` to a region's entry, which routes it to the
owner in its region but never to another region again. It answers with the other node's status,
headers and body; that node checks the caller's token itself. The client is aiohttp's, as for
the push forwards (server/push_internal.py): a keep-alive pool per node, its parser in C.
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
HOP_HEADER = "x-hongbao-region-hop"
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
        HOP_HEADER,
    }
)


class Relay:
    """Relays requests to other nodes with ``secret``; each waits at most ``timeout_s``."""

    __slots__ = ("_secret", "_timeout", "_session")

    def __init__(self, secret: str, timeout_s: float) -> None:
        self._secret, self._timeout = secret, aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def relayed(self, request: Request) -> bool:
        """Whether ``request`` was relayed here by a node of this region (serve it here)."""
        return self._carries(request, SECRET_HEADER)

    def hopped(self, request: Request) -> bool:
        """Whether ``request`` was relayed here from another region (never relay it to a region again)."""
        return self._carries(request, HOP_HEADER)

    def _carries(self, request: Request, header: str) -> bool:
        given = request.header(header)
        return given is not None and hmac.compare_digest(given.encode(), self._secret.encode())

    def send(self, url: str, request: Request, *, hop: bool = False) -> asyncio.Task[Response | None]:
        """``request`` answered by the node at ``url`` (http://host:port; ``hop``: another
        region's entry), or None when that node did not answer in time (refused, reset, timed
        out). A task: aiohttp's timeouts need one, and the server drives its handlers'
        coroutines without."""
        return asyncio.get_running_loop().create_task(self._send(url, request, HOP_HEADER if hop else SECRET_HEADER))

    async def _send(self, url: str, request: Request, header: str) -> Response | None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout, auto_decompress=False)
        headers = [(name, value) for name, value in request.headers if name not in _NOT_RELAYED]
        headers.append((header, self._secret))
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
