"""A fault-injecting TCP proxy on loopback, in front of a real server (as asyncpg's
tests/test_adversity.py and redis-py's test_cwe_404.py do): ``drop()`` resets every open link at
once (a lost connection), ``freeze()`` stops forwarding in both directions without closing (a
half-open link), ``thaw()`` resumes, ``delay_s`` holds every chunk that long before forwarding it
(a slow link), and while ``refusing`` is set new links are reset at once (the server is
unreachable). ``ThreadProxy`` runs one on a loop of its own thread, for sync code (the browser
tests; a proxy in front of a server subprocess's Redis or MariaDB); ``Slammer`` accepts and closes
every connection from a process of its own (a worker that dies right after accept())."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Proxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_port`` on loopback; ``links`` counts accepted
    connections, ``requests`` the chunks forwarded from clients to the target (a client that
    waits for each answer sends one per round trip)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.links = 0
        self.requests = 0
        self.refusing = False
        self.delay_s = 0.0
        self._open: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None

    async def start(self, port: int = 0) -> int:
        """Listen on loopback ``port`` (0: a free one) and return it."""
        self._server = await asyncio.start_server(self._link, "127.0.0.1", port)
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
            await asyncio.gather(self._pump(reader, up_writer, True), self._pump(up_reader, writer, False))
        finally:
            self._open.discard(pair)
            writer.transport.abort()
            up_writer.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up: bool) -> None:
        # uvloop raises RuntimeError on a write to a transport that drop() aborted
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            while data := await reader.read(65536):
                self.requests += up
                await self._flowing.wait()
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                writer.write(data)
                await writer.drain()
        writer.transport.abort()


class ThreadProxy:
    """A ``Proxy`` on an event loop of its own daemon thread, driven from sync code; each method
    runs on that loop and returns once it has (at most 10 s)."""

    def __init__(self, target_port: int) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="proxy", daemon=True)
        self._thread.start()
        self.proxy = self._run(self._make(target_port))
        self.url = ""

    @staticmethod
    async def _make(target_port: int) -> Proxy:
        return Proxy(target_port)  # made on its own loop (its Event belongs there)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _call(self, name: str, *args: Any) -> Any:
        return getattr(self.proxy, name)(*args)

    def start(self, port: int = 0) -> int:
        """Listen on loopback ``port`` (0: a free one) and return it; ``url`` is then its http:// base."""
        port = self._run(self.proxy.start(port))
        self.url = f"http://127.0.0.1:{port}"
        return port

    def refuse(self, refusing: bool) -> None:
        """Reset new links at once (True), or forward them again (False)."""
        self.proxy.refusing = refusing  # read by each new link, on the proxy's loop

    def slow(self, delay_s: float) -> None:
        """Hold every chunk ``delay_s`` seconds before forwarding it (0: at once again)."""
        self.proxy.delay_s = delay_s  # read by each chunk, on the proxy's loop

    def drop(self) -> None:
        """Reset every open link."""
        self._run(self._call("drop"))

    def freeze(self) -> None:
        """Stop forwarding bytes, links open (new ones too)."""
        self._run(self._call("freeze"))

    def thaw(self) -> None:
        """Forward again."""
        self._run(self._call("thaw"))

    def close(self) -> None:
        """Stop listening, reset every link, end the thread."""
        self._run(self.proxy.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> ThreadProxy:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class Slammer:
    """Listens on a loopback port and closes every connection it accepts before reading a byte
    (FIN), in a process of its own: like a worker killed right after accept(), the close reaches
    the client at once, while the client's event loop may not have written its request yet (a
    thread would wait for the GIL, and close later)."""

    _SCRIPT = (
        "import socket, sys\n"
        "sock = socket.create_server(('127.0.0.1', int(sys.argv[1])), backlog=64)\n"
        "print(sock.getsockname()[1], flush=True)\n"
        "while True:\n"
        "    sock.accept()[0].close()\n"
    )

    def __init__(self, port: int = 0) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", self._SCRIPT, str(port)], stdout=subprocess.PIPE, text=True
        )
        assert self._process.stdout is not None
        self.port = int(self._process.stdout.readline())

    def close(self) -> None:
        """Stop listening (the port is free again once this returns)."""
        self._process.kill()
        self._process.wait(10)
