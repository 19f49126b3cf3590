"""A fault-injecting TCP proxy on loopback, in front of a real server (as asyncpg's
tests/test_adversity.py and redis-py's test_cwe_404.py do): ``drop()`` resets every open link at
once (a lost connection), ``freeze()`` stops forwarding in both directions without closing (a
half-open link), ``thaw()`` resumes, and while ``refusing`` is set new links are reset at once
(the server is unreachable)."""

from __future__ import annotations

import asyncio
import contextlib


class Proxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_port`` on loopback; ``links`` counts accepted connections."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.links = 0
        self.refusing = False
        self._open: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        """Listen on a free loopback port and return it."""
        self._server = await asyncio.start_server(self._link, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening and reset every link."""
        self.drop()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def drop(self) -> None:
        """Reset (RST) every open link, both sides."""
        for client, upstream in list(self._open):
            client.transport.abort()
            upstream.transport.abort()
        self._open.clear()

    def freeze(self) -> None:
        """Stop forwarding bytes in both directions; the links stay open."""
        self._flowing.clear()

    def thaw(self) -> None:
        """Forward again."""
        self._flowing.set()

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.transport.abort()
            return
        self.links += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        pair = (writer, up_writer)
        self._open.add(pair)
        try:
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        finally:
            self._open.discard(pair)
            writer.transport.abort()
            up_writer.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # uvloop raises RuntimeError on a write to a transport that drop() aborted
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        writer.transport.abort()
