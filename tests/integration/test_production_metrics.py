"""The gauges of a production node (`hongbao serve --backend production`, two workers, the session's
MariaDB and a redis-server of the test's own, stopped and started again for real): the users online
are the SCARD of Redis' 16 ``online:{n}`` sets, every breaker (Redis, each shard database) reads 0,
Redis' reads 1 within seconds of its stop (the online count is then left out), and 0 once it is back."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import httpx
from hongbao.bench.services import redis_servers
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect
from websockets.typing import Subprotocol

from tests.integration.mariadb import MariaDb
from tests.integration.production import SERVE_LAYOUT, start_production
from tests.server.conftest import Server, stop_server
from tests.server.flows import eventually

USERS = ["pm-u1", "pm-u2", "pm-u3"]


def _gauges(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The server's gauges: (name, sorted labels) -> value."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        if family.type == "gauge"
        for s in family.samples
    }


def _breakers(server: Server) -> dict[str, float]:
    """dependency -> hongbao_breaker_open."""
    return {
        dict(labels)["dependency"]: v for (name, labels), v in _gauges(server).items() if name == "hongbao_breaker_open"
    }


def test_online_users_and_breakers_follow_redis(mariadb: MariaDb, tmp_path: Path) -> None:
    """Three users online: online_users is 3, the SCARD sum of the online sets; breakers read 0
    for redis and each shard; Redis stopped: its breaker reads 1 and online_users is left out;
    Redis back: 0 again."""
    (port,) = redis_servers.free_ports(1)
    process = redis_servers.start_on(tmp_path / "redis", port)
    url = f"redis://127.0.0.1:{port}"
    server = start_production(tmp_path / "srv", mariadb, url, workers=2)
    shards = {f"mysql/{SERVE_LAYOUT.db_name(db)}": 0.0 for db in range(SERVE_LAYOUT.n_dbs)}
    try:
        with ExitStack() as stack:
            for uid in USERS:
                subprotocols = [Subprotocol("bearer"), Subprotocol(server.token(uid))]
                stack.enter_context(
                    connect(server.url.replace("http://", "ws://") + "/v1/ws", subprotocols=subprotocols)
                )
            redis = redis_servers.RedisTarget(url, False, (port,), (process.pid,)).sync_client()

            def online() -> None:
                gauges = _gauges(server)
                scard = sum(int(redis.scard(f"online:{{{n}}}")) for n in range(16))
                assert gauges[("hongbao_online_users", ())] == scard == len(USERS)

            eventually(online)
        assert _breakers(server) == {"redis": 0.0, **shards}
        redis_servers.stop(process)

        def tripped() -> None:
            assert _breakers(server) == {"redis": 1.0, **shards}
            assert ("hongbao_online_users", ()) not in _gauges(server)

        eventually(tripped, timeout_s=15)
        process = redis_servers.start_on(tmp_path / "redis", port)

        def closed() -> None:
            assert _breakers(server) == {"redis": 0.0, **shards}

        eventually(closed, timeout_s=15)
    finally:
        stop_server(server)
        redis_servers.stop(process)
