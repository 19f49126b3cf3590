"""The push channel with its redis-server stopped and started again for real (docs/architecture.md sections 7
and 10): the push stores sit behind the Redis client's circuit breaker, so while Redis is down a
push answers 503 in milliseconds instead of waiting out connection retries, a new login is refused
before the upgrade (503 + Retry-After), one warning marks the outage instead of one per push, and a
node drops its connections only after ``push_store_failures`` consecutive store failures; once
Redis is back, logins and pushes work again."""

from __future__ import annotations

import asyncio
import re
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hongbao.bench.services import redis_servers
from hongbao.bench.services.redis_servers import RedisTarget
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.integration.redis_nodes import RedisNodes, admin, connect, eventually, logged_in, push, receive
from tests.server.conftest import Server

PUSHES = 20
_WARNING = re.compile(r" (WARNING|ERROR|CRITICAL) ")


class PrivateRedis:
    """A redis-server of one test alone, stopped and started again on its port and directory."""

    def __init__(self, directory: Path) -> None:
        (self.port,) = redis_servers.free_ports(1)
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = redis_servers.start_on(directory, self.port)
        self.target = RedisTarget(f"redis://127.0.0.1:{self.port}", False, (self.port,), (self.process.pid,))

    def stop(self) -> None:
        """Stop it (its keys are not saved: it comes back empty)."""
        if self.process is not None:
            redis_servers.stop(self.process)
            self.process = None

    def start(self) -> None:
        """Start it again on the same port."""
        self.process = redis_servers.start_on(self.directory, self.port)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A PrivateRedis in ``tmp_path/redis``, stopped at the end."""
    (tmp_path / "redis").mkdir()
    redis = PrivateRedis(tmp_path / "redis")
    yield redis
    redis.stop()


def _counter(server: Server, name: str) -> float:
    """The value of counter ``hongbao_<name>_total`` in the server's /metrics."""
    text = httpx.get(f"{server.url}/metrics", timeout=5).text
    match = re.search(rf"^hongbao_{name}_total (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def _ready(server: Server) -> bool:
    """/readyz answers ready (200 with no dependency degraded)."""
    answer = httpx.get(f"{server.url}/readyz", timeout=5)
    return answer.status_code == 200 and answer.json()["status"] == "ready"


def _warnings(server: Server, since: int) -> list[str]:
    """Lines at WARNING or above written to the server log after byte ``since``."""
    return [line for line in server.log()[since:].splitlines() if _WARNING.search(line)]


def test_push_while_redis_is_down(tmp_path: Path, private_redis: PrivateRedis) -> None:
    """Redis stopped: pushes answer 503 in < 50 ms, logins 503 + Retry-After at once, one warning
    per breaker opening, A keeps u1 (failures tolerated) while B drops u2 after 3 (1011); restarted:
    logins and pushes work."""
    nodes = RedisNodes(tmp_path, private_redis.target)
    try:
        a = nodes.start("a", extra_config="push_store_failures = 1000\n")[0]
        b = nodes.start("b")[0]

        async def scenario() -> None:
            async with admin(a) as pusher:
                u1, u2 = await logged_in(a, "u1"), await logged_in(b, "u2")
                assert nodes.session_node("u2") is not None and nodes.session_node("u1") is not None
                assert (await push(pusher, user_id="u1", event="hello", data=0))["result"] == "delivered_to_socket"
                assert [m["data"] for m in await receive(u1, 1)] == [0]

                log_from = len(a.log())
                await asyncio.to_thread(private_redis.stop)
                await eventually(lambda: _counter(a, "redis_breaker_opens") >= 1, 10, "A's breaker opened (heartbeats)")
                costs = []
                for i in range(PUSHES):
                    started = time.perf_counter()
                    answer = await pusher.post("/v1/admin/push", json={"user_id": "u1", "event": "hello", "data": i})
                    costs.append(time.perf_counter() - started)
                    assert answer.status_code == 503 and answer.json()["error"]["code"] == "degraded"
                    assert answer.headers["retry-after"] == "1"
                assert statistics.median(costs) < 0.05 and max(costs) < 0.25, costs  # ~0.3-1 s each without the breaker
                started = time.perf_counter()
                with pytest.raises(InvalidStatus) as refused:
                    await connect(a, "u3")
                assert time.perf_counter() - started < 0.25
                assert (
                    refused.value.response.status_code == 503
                    and int(refused.value.response.headers["retry-after"]) >= 1
                )
                preflight = await pusher.get("/v1/ws/preflight")
                assert preflight.status_code == 503
                ready = await pusher.get("/readyz")  # the node serves: degraded, not out of the balancer
                assert ready.status_code == 200 and ready.json() == {"status": "degraded", "degraded": ["redis"]}

                with pytest.raises(ConnectionClosed) as dropped:  # B: three consecutive failures, then 1011
                    await asyncio.wait_for(u2.recv(), 15)
                assert dropped.value.rcvd is not None and dropped.value.rcvd.code == 1011
                assert not u1.close_code  # A tolerates its failures (push_store_failures = 1000)
                await asyncio.sleep(1.5)  # a few more heartbeats and flushes of A while down
                opens = _counter(a, "redis_breaker_opens")
                assert _counter(a, "redis_fallback_push") >= PUSHES
                warnings = _warnings(a, log_from)
                assert len(warnings) <= opens, warnings  # the breaker's own line, not one per push or per tick

                await asyncio.to_thread(private_redis.start)
                await eventually(
                    lambda: _ready(a) and _ready(b) and len(nodes.keys("node:*")) == 2,
                    15,
                    "both nodes ready and alive again (Redis came back empty)",
                )
                async with await logged_in(b, "u2") as again:
                    assert nodes.session_node("u2") is not None
                    pushed = await push(pusher, user_id="u2", event="back", data=1)
                    assert pushed["result"] == "delivered_to_socket"
                    assert [(m["event"], m["data"]) for m in await receive(again, 1)] == [("back", 1)]
                pushed = await push(pusher, user_id="u1", event="back", data=2)
                assert pushed["result"] == "delivered_to_socket"
                events = [
                    m for m in await receive(u1, 2) if m["type"] == "event"
                ]  # a reset first: Redis came back empty
                assert [(m["event"], m["data"]) for m in events][-1:] == [("back", 2)]
                await u1.close()

        asyncio.run(scenario())
    finally:
        nodes.finish()
