"""A fault-injecting TCP proxy on loopback, in front of a real server (as asyncpg's
tests/test_adversity.py and redis-py's test_cwe_404.py do): ``drop()`` resets every open link at
once (a lost connection), ``freeze()`` stops forwarding in both directions without closing (a
half-open link), ``thaw()`` resumes, ``delay_s`` holds every chunk that long before forwarding it
(a slow link), and while ``refusing`` is set new links are reset at once (the server is
unreachable). :class:`ProxyThread` runs one on a loop of its own, for tests that drive a server
subprocess from synchronous code (a proxy in front of its Redis or its MariaDB)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any


class Proxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_port`` on loopback; ``links`` counts accepted connections."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.links = 0
        self.refusing = False
        self.delay_s = 0.0
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
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                writer.write(data)
                await writer.drain()
        writer.transport.abort()


class ProxyThread:
    """A :class:`Proxy` to ``target_port`` on an event loop in a thread of its own: ``port`` is
    where to connect; ``call(method, *args)`` runs one of the proxy's methods (drop, freeze,
    thaw) on that loop and waits for it; ``set(name, value)`` sets ``refusing`` or ``delay_s``.
    A context manager: stopped (every link reset) on exit."""

    def __init__(self, target_port: int) -> None:
        self.proxy = Proxy(target_port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="proxy", daemon=True)
        self._thread.start()
        self.port: int = self._run(self.proxy.start)

    def _run(self, make: Callable[[], Any]) -> Any:
        async def call() -> Any:
            result = make()
            return await result if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=10)

    def call(self, method: str, *args: Any) -> Any:
        """Run ``self.proxy.<method>(*args)`` on the proxy's loop; its result."""
        return self._run(lambda: getattr(self.proxy, method)(*args))

    def set(self, name: str, value: object) -> None:
        """Set attribute ``name`` (``refusing``, ``delay_s``) of the proxy, on its loop."""
        self._run(lambda: setattr(self.proxy, name, value))

    def close(self) -> None:
        """Reset every link, stop listening, stop the loop."""
        self._run(self.proxy.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> ProxyThread:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
