""" "Redis down at grab" (docs/architecture.md section 10) on Redis servers of the test's own, stopped and
started again for real: a standalone redis-server, and one master of a 3-master cluster. While it
is down, grab is answered from the DB behind the rate limiter (503 beyond it), cheaply (the
breaker), counted in the fallback counters and /metrics; once it is back (empty), the grab state
is rebuilt from the DB. And a write lost while Redis stayed up is repaired by the next read."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hongbao.bench.services import redis_servers
from hongbao.bench.services.redis_servers import RedisTarget
from hongbao.core import errors
from hongbao.core.adapters.redis.client import Pipelines
from hongbao.core.adapters.redis.grab import RedisGrabState, key
from hongbao.core.adapters.redis.state import REDIS_DOWN
from hongbao.core.breaker import Breaker, BreakerOpen
from hongbao.core.clock import ManualClock
from hongbao.core.packet import Receipt
from hongbao.core.ports import OpenResult
from hongbao.core.services.grabbing import GRAB_CACHE_TTL_MS, GRAB_OK
from hongbao.server.composition import Backend
from redis.exceptions import ConnectionError

from tests.core import test_service as suite
from tests.core.conftest import admission, clock  # noqa: F401  (fixtures of the suite)
from tests.integration.mariadb import MariaDb, make_backend  # noqa: F401  (fixture)
from tests.integration.production import start_production
from tests.server.conftest import stop_server
from tests.server.crowd import eventually_async
from tests.server.flows import eventually, group, ok, paid_packet

Make = Callable[..., Backend]


class OwnRedis:
    """A standalone Redis or a 3-master cluster of the test's own whose nodes can be stopped and
    started again (empty) on the same ports."""

    def __init__(self, root: Path, cluster: bool) -> None:
        self.root, self.cluster = root, cluster
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        if cluster:
            self._context = redis_servers.cluster(root)
            self.target = self._context.__enter__()
        else:
            (port,) = redis_servers.free_ports(1)
            self.processes[port] = redis_servers.start_on(root, port)
            self.target = RedisTarget(f"redis://127.0.0.1:{port}", False, (port,), (self.processes[port].pid,))

    def stop(self, port: int) -> None:
        """Stop the node on ``port``."""
        if port in self.processes:
            redis_servers.stop(self.processes.pop(port))
        else:  # an original cluster node: its process belongs to the cluster context, which reaps it
            os.kill(self.target.pids[self.target.ports.index(port)], signal.SIGTERM)
            while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).returncode == 0:
                time.sleep(0.05)

    def start(self, port: int) -> None:
        """Start the node on ``port`` again, empty (a cluster node rejoins with its slots)."""
        if not self.cluster:
            self.processes[port] = redis_servers.start_on(self.root, port)
            return
        self.processes[port] = redis_servers.cluster_node(self.root, port)
        redis_servers.wait_ready(port, self.processes[port], self.root / str(port))
        redis_servers.wait_cluster_ok(self.target)

    def owner(self, name: str) -> int:
        """The port of the primary that holds key ``name``."""
        if not self.cluster:
            return self.target.ports[0]
        slot = self.target.sync_client().execute_command("CLUSTER", "KEYSLOT", name)
        return next(
            port
            for port in self.target.ports
            if self.target.sync_client(port).execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)
        )

    def close(self) -> None:
        """Stop every node."""
        for process in self.processes.values():
            redis_servers.stop(process)
        if self.cluster:
            self._context.__exit__(None, None, None)


@pytest.fixture(params=["standalone", "cluster"])
def own_redis(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OwnRedis]:
    """A Redis of this test's own (both modes), stopped afterwards."""
    own = OwnRedis(tmp_path / "redis", request.param == "cluster")
    yield own
    own.close()


@pytest.fixture
def service_redis(own_redis: OwnRedis) -> RedisTarget:
    """make_backend's Redis: the test's own."""
    return own_redis.target


async def test_redis_down_at_grab(make_backend: Make, own_redis: OwnRedis, clock: ManualClock) -> None:
    """Redis stopped: grabs answer from the DB (rate-limited, 503 beyond, fast once the breaker is
    open); restarted empty: the grab state is rebuilt."""
    counts: dict[str, int] = {}
    one, two = (
        make_backend(),
        make_backend(counts=counts, grab_db_rate_per_s=25),
    )  # two: 5 DB checks at once, 25 a second
    await suite._group(one.services, "g", ["S", "A", "B", "C"])
    order_id = await suite._paid(one.services, "S", {"count": 3, "total_fen": 300, "group_id": "g"})
    a, _ = await one.services.opening.open("A", order_id)
    # two follows the membership feed and holds the group in memory: the grabs' only Redis calls are
    # then the grab state's, on the master stopped below (a success on another master would reset the breaker)
    for follow in two.follow:
        await follow()
    assert await two.services.ports.groups.is_member("g", "A")
    stopped = own_redis.owner(key(order_id))
    own_redis.stop(stopped)
    clock.advance_ms(GRAB_CACHE_TTL_MS)

    assert await two.services.grabbing.grab("A", order_id) == {
        "status": "opened",
        "amount_fen": a.amount_fen,
    }  # from the DB
    assert await two.services.grabbing.grab("B", order_id) is GRAB_OK
    assert counts["redis_breaker_opens"] == 1 and counts["redis_fallback_grab"] == 2
    started, answers = time.monotonic(), []
    for _ in range(10):
        try:
            answers.append(await two.services.grabbing.grab("C", order_id))
        except errors.Degraded:
            answers.append(None)
    assert time.monotonic() - started < 1.0  # the breaker skips Redis: no connection attempts per grab
    assert answers[:3] == [GRAB_OK] * 3 and None in answers
    assert counts["redis_fallback_grab"] + counts["redis_grab_shed"] == 12 and counts["redis_grab_shed"] >= 1

    b, _ = await one.services.opening.open("B", order_id)  # committed; its Redis write is lost
    own_redis.start(stopped)
    await asyncio.sleep(1.1)  # the breaker's cooldown: the next call is the trial

    async def rebuilt() -> None:
        assert await two.services.grabbing.grab("B", order_id) == {"status": "opened", "amount_fen": b.amount_fen}
        assert own_redis.target.sync_keys().hget(key(order_id), "p") == b"1"

    await eventually_async(rebuilt, timeout_s=20)
    assert await two.services.grabbing.grab("C", order_id) is GRAB_OK


async def test_lost_write_is_repaired_by_the_next_read(redis_standalone: RedisTarget) -> None:
    """A write skipped by an open breaker while Redis kept the key: this worker's next read deletes
    the stale key (rebuilt from the DB)."""
    redis_standalone.flush()
    now = [0.0]
    counts: dict[str, int] = {}
    async with redis_standalone.connect() as client:
        breaker = Breaker("redis", REDIS_DOWN, counts, now=lambda: now[0])
        state = RedisGrabState(Pipelines(client), breaker, counts)
        name = key("o1")
        redis_standalone.sync_client().hset(
            name, mapping={"k": "lucky", "c": 2, "n": 2, "s": "active", "g": "", "r": "", "e": 10**13}
        )

        async def down() -> None:
            raise ConnectionError("down")

        for _ in range(2):
            with pytest.raises(BreakerOpen):
                await breaker.call(down)
        await state.opened("o1", [OpenResult(Receipt("o1", "A", 5, 0))])
        assert counts["redis_grab_lost_writes"] == 1 and redis_standalone.sync_client().hget(name, "n") == b"2"
        now[0] += 2.0  # past the cooldown: the next read is the trial
        assert await state.lookup("o1", "A") is None
        assert not redis_standalone.sync_client().exists(name)


def test_redis_down_at_grab_over_http(mariadb: MariaDb, tmp_path: Path) -> None:
    """`hongbao serve --backend production`: Redis stopped, grab still answers 200 and /metrics counts the DB checks."""
    (port,) = redis_servers.free_ports(1)
    process = redis_servers.start_on(tmp_path / "redis", port)
    server = start_production(tmp_path / "srv", mariadb, f"redis://127.0.0.1:{port}", workers=1)
    try:
        gid = group(server, "S", ["B", "C"])
        order_id = paid_packet(server, "S", {"count": 2, "total_fen": 10, "group_id": gid}, fund_fen=1000)
        with server.client("B") as client:
            ok(client.post(f"/v1/packets/{order_id}/open"))
        redis_servers.stop(process)
        with server.client("C") as client:
            assert ok(client.post(f"/v1/packets/{order_id}/grab")) == {"status": "ok"}
            assert ok(client.post(f"/v1/packets/{order_id}/grab")) == {"status": "ok"}

            def counted() -> None:
                metrics = client.get("/metrics").text
                assert _counter(metrics, "hongbao_redis_fallback_grab_total") >= 1
                assert _counter(metrics, "hongbao_redis_breaker_opens_total") == 1

            eventually(counted)
    finally:
        stop_server(server)
        redis_servers.stop(process)


def _counter(metrics: str, name: str) -> float:
    return next(float(line.split()[1]) for line in metrics.splitlines() if line.startswith(f"{name} "))
