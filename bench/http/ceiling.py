"""The ceiling for Python HTTP on this machine: a minimal uvloop ``asyncio.Protocol`` server that
answers every request with the same fixed 200 JSON response (keep-alive, naive pipelining).

It parses nothing: each ``\\r\\n\\r\\n`` ends a request (bodies are not expected; the benchmark
only sends GETs here), so it costs one ``bytes.count`` and one ``write`` per read. The response has
the same status line, headers and body as hongbao's ``GET /healthz``, so both send the same bytes.

Usage: ``python -m hongbao.bench.http.ceiling --port N [--host 127.0.0.1] [--workers 1]``
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

BODY = b'{"status":"ok"}'
RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
END = b"\r\n\r\n"


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
            buffer = buffer[buffer.rfind(END) + len(END):]
        self.buffer = buffer


async def _serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(FixedResponse, host, port, reuse_port=True, backlog=4096)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def serve(host: str, port: int, workers: int = 1) -> int:
    """Serve until SIGTERM/SIGINT with ``workers`` processes; returns the exit status."""
    if workers == 1:
        uvloop.run(_serve(host, port))
        return 0
    children = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                uvloop.run(_serve(host, port))
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
    opts = args.parse_args(argv)
    if opts.workers < 1:
        print("ceiling: --workers must be at least 1", file=sys.stderr)
        return 2
    return serve(opts.host, opts.port, opts.workers)


if __name__ == "__main__":
    sys.exit(main())
