"""The region's send rate on a real Redis (docs/architecture.md section 9: flow control), shared
by every node of the region, and a send burst over it on a real production server: 429 busy with
Retry-After, no money moved, each limit in /metrics."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from hongbao.bench.services.redis_servers import RedisTarget
from hongbao.core.adapters.redis.client import Pipelines
from hongbao.core.adapters.redis.flow import RedisSendRate
from hongbao.core.adapters.redis.state import REDIS_DOWN
from hongbao.core.breaker import Breaker, BreakerOpen
from redis.exceptions import ConnectionError

from tests.integration.mariadb import MariaDb
from tests.integration.production import start_production
from tests.server.conftest import stop_server
from tests.server.flows import balance, eventually, group, ok, topup


async def test_the_regions_nodes_share_one_send_rate(redis_target: RedisTarget) -> None:
    """Two nodes of region 1 take 5 sends between them (the burst), then wait ~100 s (0.01/s);
    region 2 has its own; a node whose Redis is down lets its sends through, counted."""
    redis_target.flush()
    counts: dict[str, int] = {}
    async with redis_target.connect() as client:
        pipes = Pipelines(client)
        north = [RedisSendRate(pipes, Breaker("redis", REDIS_DOWN, counts), counts, 1, 0.01, 5) for _ in range(2)]
        waits = [await north[i % 2].take() for i in range(7)]
        assert waits[:5] == [0.0] * 5 and all(95 < wait <= 100 for wait in waits[5:]), waits
        assert await RedisSendRate(pipes, Breaker("redis", REDIS_DOWN, counts), counts, 2, 0.01, 5).take() == 0.0

        breaker = Breaker("redis", REDIS_DOWN, counts)

        async def down() -> None:
            raise ConnectionError("down")

        for _ in range(2):
            with pytest.raises(BreakerOpen):
                await breaker.call(down)
        assert await RedisSendRate(pipes, breaker, counts, 1, 0.01, 5).take() == 0.0
        assert counts["redis_fallback_flow"] == 1


def test_a_send_burst_over_the_regions_rate_is_busy_and_moves_no_money(
    mariadb: MariaDb, redis_standalone: RedisTarget, tmp_path: Path
) -> None:
    """Region burst 4: of 7 sends, 4 are pre-orders and 3 get 429 busy with Retry-After; the
    sender's balance is untouched until a pay, and /metrics counts the refusals and shows every
    limit."""
    redis_standalone.flush()
    config = "region_send_rate_per_s = 0.01\nregion_send_burst = 4\nsend_rate_per_s = 50.0\n"
    server = start_production(tmp_path / "srv", mariadb, redis_standalone.url, extra_config=config)
    try:
        gid = group(server, "S", ["B"])
        topup(server, "S", 1000)
        with server.client("S") as client:
            body = {"count": 1, "total_fen": 100, "group_id": gid}
            answers = [client.post("/v1/packets", json=body) for _ in range(7)]
            assert [a.status_code for a in answers] == [201] * 4 + [429] * 3
            assert all(int(a.headers["retry-after"]) >= 90 and a.json()["error"]["code"] == "busy" for a in answers[4:])
            assert balance(server, "S") == 1000
            ok(client.post(f"/v1/packets/{answers[0].json()['order_id']}/pay"))
        assert balance(server, "S") == 900

        def counted() -> str:
            text = httpx.get(f"{server.url}/metrics", timeout=10).text
            assert re.search(r"^hongbao_send_rejections_total 3", text, re.MULTILINE), text
            return text

        text = eventually(counted)  # the workers' counters reach the node once a second
        limits = dict(re.findall(r'^hongbao_flow_limit\{limit="(\w+)"\} (\S+)', text, re.MULTILINE))
        assert limits == {
            "send_rate_per_s": "50.0",
            "send_burst": "2000.0",
            "region_send_rate_per_s": "0.01",
            "region_send_burst": "4.0",
            "grab_ok_per_share": "0.0",
            "max_in_db": "2.0",
        }
    finally:
        assert stop_server(server) == 0
