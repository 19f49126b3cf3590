"""A Redis reply's bound that passes while the worker's own loop was stalled is overload, not a
silent Redis: on a machine out of CPU the worker and redis-server both run late. Such a call fails
alone (its fallback) and the Redis breaker stays shut, so one starved moment does not send every
request of the worker to its fallbacks for a second; the same late replies with the loop on time
open it, as a silent server does. A real redis-server answers late (stopped with SIGSTOP, resumed
by a timer thread); the stall is the worker's loop blocked (time.sleep) while a command is out."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from hongbao.bench.services import redis_servers
from hongbao.core.adapters.redis.client import Pipelines, redis_client
from hongbao.core.adapters.redis.state import redis_breaker
from hongbao.core.breaker import Breaker, BreakerOpen
from hongbao.core.loop_lag import LoopLag

BOUND_S = 0.2  # the reply's bound (redis_timeout_ms)
LATE_S = 0.6  # when the server answers


async def _get(breaker: Breaker, pipes: Pipelines) -> object:
    """GET a through the breaker on redis-py's path (its socket timeout is the bound)."""
    return await breaker.call(lambda: pipes.one(lambda pipe: pipe.get("a")))


async def _late_get(breaker: Breaker, pipes: Pipelines, pid: int, stall_s: float) -> object:
    """``_get`` answered LATE_S after it leaves (the server stopped meanwhile), the loop blocked
    ``stall_s`` once the command is out."""
    os.kill(pid, signal.SIGSTOP)
    resume = threading.Timer(LATE_S, os.kill, (pid, signal.SIGCONT))
    resume.start()
    try:
        call = asyncio.ensure_future(_get(breaker, pipes))
        await asyncio.sleep(0.02)  # the command is on its way
        time.sleep(stall_s)
        return await call
    finally:
        resume.join()


async def test_bounds_passed_while_the_loop_stalled_leave_the_breaker_shut(tmp_path: Path) -> None:
    """3 reads answered after 0.6 s (the bound 0.2 s) while the loop stalled 0.5 s: each fails
    alone, the breaker shut, the next read served; 2 such reads with the loop on time: the breaker open."""
    (port,) = redis_servers.free_ports(1)
    process = redis_servers.start_on(tmp_path, port)
    pipes = Pipelines(redis_client(f"redis://127.0.0.1:{port}", cluster=False, socket_timeout_s=BOUND_S))
    lag = LoopLag()
    lag.start()
    counts: dict[str, int] = {}
    breaker = redis_breaker(counts, lag=lag)
    try:
        await pipes.one(lambda pipe: pipe.set("a", "1"))
        for _ in range(3):
            with pytest.raises(BreakerOpen, match="lagged"):
                await _late_get(breaker, pipes, process.pid, 0.5)
        assert not breaker.is_open and not counts
        assert await _get(breaker, pipes) == b"1"
        for _ in range(2):
            with pytest.raises(BreakerOpen, match="is down"):
                await _late_get(breaker, pipes, process.pid, 0.0)
        assert breaker.is_open and counts == {"redis_breaker_opens": 1}
    finally:
        os.kill(process.pid, signal.SIGCONT)
        lag.stop()
        pipes.close()
        await pipes.client.aclose()
        redis_servers.stop(process)
