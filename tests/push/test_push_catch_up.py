"""A session's catch-up read (a message past a gap makes it read the gap from the log) while the
push store blips: a real redis-server stopped (SIGSTOP) for longer than a reply's bound, then
resumed. The hub reads again after a pause instead of closing the session; past its last pause
it closes it (1011) and the client resumes elsewhere."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from hongbao.bench.services import redis_servers
from hongbao.core.adapters.redis.client import Pipelines, redis_client
from hongbao.core.adapters.redis.push_logs import RedisMessageLog
from hongbao.core.adapters.sqlite.db import SqliteDb
from hongbao.core.adapters.sqlite.state import SqliteGroupStore, SqliteQueue
from hongbao.core.push_ports import Stored
from hongbao.server import push_hub
from hongbao.server.composition import push_stores
from hongbao.server.config import Settings
from hongbao.server.metrics import WorkerMetrics
from hongbao.server.push_hub import PushHub
from hongbao.server.push_messages import EventBody, now_ms

from tests.push.conftest import eventually
from tests.push.test_push_order import Socket

BLIP_S = 0.6  # longer than redis_timeout_ms (250): the catch-up read fails and opens the breaker


class Store:
    """A redis-server of one test, the hub on it, and the user logs as another worker writes them."""

    def __init__(self, process: subprocess.Popen[bytes], hub: PushHub, other: RedisMessageLog) -> None:
        self.process, self.hub, self.other = process, hub, other

    def pause(self) -> None:
        """SIGSTOP the server: connections stay open, nothing is answered."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT the server."""
        os.kill(self.process.pid, signal.SIGCONT)

    async def appended_elsewhere(self, uid: str, *events: str) -> list[Stored]:
        """``events`` appended to ``uid``'s log by another worker (their forwards still on their way)."""
        return await self.other.append([(uid, EventBody(event, {})) for event in events], now_ms())


async def _answering(check: Callable[[], Awaitable[None]], timeout_s: float = 10.0) -> None:
    """Wait until ``check`` passes: a fresh redis-server on a loaded machine may miss the first
    reply bound, which opens the breaker until a trial answers (the tests start from a store up)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await check()
        except Exception:
            assert time.monotonic() < deadline, "the store never answered"
            await asyncio.sleep(0.1)


@asynccontextmanager
async def _store(tmp_path: Path) -> AsyncIterator[Store]:
    """A Store on a fresh redis-server, the hub started with its jobs (the heartbeat makes the
    breaker's trials); everything stopped at the end."""
    (port,) = redis_servers.free_ports(1)
    (tmp_path / "redis").mkdir()
    process = redis_servers.start_on(tmp_path / "redis", port)
    url = f"redis://127.0.0.1:{port}"
    settings = Settings(data_dir=tmp_path, internal_secret="test", redis_url=url)
    money = SqliteDb(tmp_path / "hongbao.db")
    stores = push_stores(settings, {}, embedded_queue=SqliteQueue(money))
    hub = PushHub(settings, stores, WorkerMetrics(tmp_path / "metrics"), stores.queue, SqliteGroupStore(money))
    other = Pipelines(redis_client(url, cluster=False))
    found = Store(process, hub, RedisMessageLog(other, settings.push_log_max_messages, settings.push_log_max_age_s))
    await hub.start()
    jobs = [asyncio.ensure_future(job()) for job in hub.jobs()]
    try:
        await _answering(stores.check)
        yield found
    finally:
        found.resume()
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        await hub.stop()
        await stores.aclose()
        other.close()
        await other.client.aclose()
        redis_servers.stop(process)
        money.close()


async def _gap_during_a_blip(store: Store, uid: str, blip_s: float) -> Socket:
    """A session that has sent nothing; offsets 1 and 2 logged elsewhere; the forward of 2 comes
    in first while the server is stopped for ``blip_s``: the session must read 1 from the log."""
    conn = Socket(uid)
    await store.hub.attach(conn, None, None)
    _, second = await store.appended_elsewhere(uid, "packet_received", "opened")
    store.pause()
    assert store.hub.receive(uid, conn.sid, second)
    await asyncio.sleep(blip_s)
    store.resume()
    return conn


async def test_catch_up_rides_out_a_blip(tmp_path: Path) -> None:
    """The read fails while the server is stopped; read again after it resumes, the session gets
    1 then 2, once each, and stays open."""
    async with _store(tmp_path) as store:
        conn = await _gap_during_a_blip(store, "blip", BLIP_S)
        await eventually(lambda: len(conn.events()) == 2, 10)
    assert conn.events() == [(1, "packet_received"), (2, "opened")]
    assert conn.closed is None


async def test_catch_up_gives_up_after_its_last_pause(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store silent past every pause: the session is closed with 1011 (its client resumes from
    its cursor), nothing sent out of order."""
    monkeypatch.setattr(push_hub, "CATCH_UP_PAUSES_S", (0.1,))
    async with _store(tmp_path) as store:
        conn = await _gap_during_a_blip(store, "gone", 2.0)
        await eventually(lambda: conn.closed is not None, 10)
    assert conn.closed == 1011 and conn.events() == []
