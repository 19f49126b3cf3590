"""What the push benchmark's two server scripts share: the command line (``--host``, ``--port``)
and serving until SIGTERM or SIGINT, on uvloop."""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any

import uvloop


async def until_stopped() -> None:
    """Return once SIGTERM or SIGINT arrives."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def run_script(doc: str, main: Callable[[str, int], Coroutine[Any, Any, None]]) -> None:
    """Parse ``--host`` (default 127.0.0.1) and ``--port`` (required) and run ``main(host, port)``
    on uvloop; ``doc``'s first line describes the command."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvloop.run(main(args.host, args.port))
