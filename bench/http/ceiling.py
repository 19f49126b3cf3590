"""The ceiling for Python HTTP on this machine: a minimal uvloop ``asyncio.Protocol`` server that
answers every request with the same fixed 200 JSON response (keep-alive, naive pipelining).

It parses nothing: each ``\\r\\n\\r\\n`` ends a request (bodies are not expected; the benchmark
only sends GETs here), so it costs one ``bytes.count`` and one ``write`` per read. The response has
the same status line, headers and body as hongbao's ``GET /healthz``, so both send the same bytes.

With ``--redis-url URL`` it is instead the naive handler of the grab benchmark: each request
is answered after ONE redis-py round trip of its own (``HMGET`` of a grab-state-shaped key through
``redis.asyncio`` with hiredis, a task per request, no pipelining across requests), i.e. what any
handler that pays one redis-py call per request can reach on this machine at best.

Usage: ``python -m hongbao.bench.http.ceiling --port N [--host 127.0.0.1] [--workers 1] [--redis-url URL]``
(or ``python bench/http/ceiling.py ...`` from the checkout). ``--workers N`` forks N processes that
share the port with SO_REUSEPORT, as ``hongbao serve --workers N`` does. Stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

import uvloop
from redis.asyncio import Redis

BODY = b'{"status":"ok"}'
RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
END = b"\r\n\r\n"
REDIS_KEY = "grab:{ceiling}"
REDIS_FIELDS = ("k", "c", "n", "s", "g", "r", "e", "p", "u:ceiling")


class FixedResponse(asyncio.Protocol):
    """One connection: answer each complete request head with ``RESPONSE``."""

    __slots__ = ("transport", "buffer")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports do not subclass asyncio's

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        count = buffer.count(END)
        if count:
            assert self.transport is not None
            self.transport.write(RESPONSE * count if count > 1 else RESPONSE)
            buffer = buffer[buffer.rfind(END) + len(END) :]
        self.buffer = buffer


class RedisRoundTrip(FixedResponse):
    """One connection: answer each complete request head with ``RESPONSE`` once its own redis-py
    HMGET has returned (``client``: the process's pool)."""

    __slots__ = ("client", "tasks")

    def __init__(self, client: Redis) -> None:
        super().__init__()
        self.client = client
        self.tasks: set[asyncio.Task[None]] = set()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        for _ in range(buffer.count(END)):
            task = asyncio.get_running_loop().create_task(self._answer())
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        self.buffer = buffer[buffer.rfind(END) + len(END) :] if END in buffer else buffer

    async def _answer(self) -> None:
        await self.client.hmget(REDIS_KEY, REDIS_FIELDS)
        assert self.transport is not None
        if not self.transport.is_closing():
            self.transport.write(RESPONSE)


async def _serve(host: str, port: int, redis_url: str = "") -> None:
    loop = asyncio.get_running_loop()
    if redis_url:
        client = Redis.from_url(redis_url, max_connections=256)
        await client.hset(
            REDIS_KEY, mapping={"k": "lucky", "c": 100, "n": 99, "s": "active", "g": "g", "r": "", "e": 2**42}
        )
        server = await loop.create_server(lambda: RedisRoundTrip(client), host, port, reuse_port=True, backlog=4096)
    else:
        server = await loop.create_server(FixedResponse, host, port, reuse_port=True, backlog=4096)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def serve(host: str, port: int, workers: int = 1, redis_url: str = "") -> int:
    """Serve until SIGTERM/SIGINT with ``workers`` processes (each request after one redis-py
    round trip to ``redis_url`` when given); returns the exit status."""
    if workers == 1:
        uvloop.run(_serve(host, port, redis_url))
        return 0
    children = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                uvloop.run(_serve(host, port, redis_url))
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        children.append(pid)

    def forward(sig: int, _frame: object) -> None:
        for child in children:
            try:
                os.kill(child, sig)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status = 0
    for child in children:
        while True:
            try:
                _, code = os.waitpid(child, 0)
                break
            except InterruptedError:
                continue
        status = status or int(code != 0)
    return status


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse the flags and serve."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--host", default="127.0.0.1")
    args.add_argument("--port", type=int, required=True)
    args.add_argument("--workers", type=int, default=1)
    args.add_argument("--redis-url", default="", help="answer each request after one redis-py round trip to this Redis")
    opts = args.parse_args(argv)
    if opts.workers < 1:
        print("ceiling: --workers must be at least 1", file=sys.stderr)
        return 2
    return serve(opts.host, opts.port, opts.workers, opts.redis_url)


if __name__ == "__main__":
    sys.exit(main())
