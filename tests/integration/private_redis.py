"""A redis-server of the test's own (tests/integration/redis_servers.py ``start_on``), which the
test stops and starts again for real (docs/architecture.md section 10 faults); stopped after the test."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from hongbao.bench.services import redis_servers


class PrivateRedis:
    """A standalone redis-server on a free port, files in ``directory``; no persistence, so a
    restart comes back empty."""

    def __init__(self, directory: Path) -> None:
        (self.port,) = redis_servers.free_ports(1)
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>``."""
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start it (again) on the same port, answering PING."""
        self.process = redis_servers.start_on(self.directory, self.port)

    async def stop(self) -> None:
        """Stop it (SIGTERM; a no-op when stopped)."""
        if self.process is not None:
            await asyncio.to_thread(redis_servers.stop, self.process)


@pytest.fixture
def private_redis(tmp_path: Path, loop_cleanups: list[Callable[[], Awaitable[None]]]) -> PrivateRedis:
    """A started PrivateRedis, stopped after the test."""
    server = PrivateRedis(tmp_path)
    server.start()
    loop_cleanups.append(server.stop)
    return server
