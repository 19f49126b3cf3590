"""The HTTP suite of the embedded backend (tests/server/test_story.py and the money cases of
tests/server/test_money_cases.py), unchanged, against `hongbao serve --backend production`: money
on the real MariaDB, Redis the 3-master Redis Cluster (M-16 over HTTP: no path sends a CROSSSLOT
command), and the whole story on a standalone Redis too (one code path serves both; the other
standalone runs are test_production_serve.py and test_redis_restart.py). Every server must stop
with status 0, no traceback in its log, and shards that pass the money audit of docs/architecture.md section 11.

Left out: the money cases that read the embedded SQLite file itself (M-08, M-09, M-23; M-23 on
the production backend is tests/integration/test_redis_credit.py) and M-18 (the split is the
native draw whatever the storage, and its 10 000 packets take a minute here). Async cases run once,
on uvloop: the client's loop makes no difference to a server subprocess.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import uvloop
from hongbao.bench.services.redis_servers import RedisTarget
from hongbao.core.adapters.mysql.audit import audit_mysql

from tests.integration.mariadb import MariaDb, migrated
from tests.integration.production import SERVE_LAYOUT, production_config
from tests.server import flows, test_money_cases, test_story
from tests.server.conftest import Server, start_server, stop_server

LEFT_OUT = {
    "test_m08_one_user_opens_fifty_times_at_once",
    "test_m09_no_oversell_with_a_thousand_openers",
    "test_m23_every_receipt_is_credited_exactly_once",
    "test_m18_amounts_are_not_predictable",
}
ON_BOTH = {"test_full_story"}


def _once(test: Callable[..., Any]) -> Callable[..., Any]:
    """``test`` itself, or for an async test a plain one that runs it on uvloop."""
    if not inspect.iscoroutinefunction(test):
        return test

    @functools.wraps(test)
    def run(**fixtures: Any) -> None:
        uvloop.run(test(**fixtures))

    return run


globals().update(
    {
        name: _once(test)
        for module in (test_story, test_money_cases)
        for name, test in vars(module).items()
        if name.startswith("test_") and name not in LEFT_OUT
    }
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test on the cluster; those of ON_BOTH on a standalone Redis too."""
    if "prod_redis" in metafunc.fixturenames:
        modes = ["standalone", "cluster"] if metafunc.function.__name__ in ON_BOTH else ["cluster"]
        metafunc.parametrize("prod_redis", modes, indirect=True)


@pytest.fixture
def prod_redis(request: pytest.FixtureRequest) -> RedisTarget:
    """The servers' Redis (the test's parameter: standalone or cluster), emptied first."""
    target: RedisTarget = request.getfixturevalue(f"redis_{request.param}")
    target.flush()
    return target


@pytest.fixture
def make_server(mariadb: MariaDb, prod_redis: RedisTarget, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Production servers on demand (the signature of tests/server/conftest.py's), on shards
    emptied before the test: one per test; it must stop cleanly, and the shards pass the audit."""
    migrated(mariadb, SERVE_LAYOUT)
    started: list[Server] = []

    def make(workers: int = 1, extra_config: str = "", name: str = "srv") -> Server:
        assert not started, "one production server per test: a second would share the first's shards"
        config = production_config(mariadb, prod_redis.url, cluster=prod_redis.cluster, pool_size=2) + extra_config
        started.append(start_server(tmp_path / name, workers, config))
        return started[0]

    yield make
    for server in started:
        status = stop_server(server)
        assert status == 0 and "Traceback" not in server.log(), server.log()
        report = asyncio.run(audit_mysql(mariadb.dsn, SERVE_LAYOUT, drained=False))
        assert report.ok, report.lines()


@pytest.fixture
def server(make_server: Callable[..., Server]) -> Server:
    """One single-worker production server."""
    return make_server()


def test_pipelined_grabs_on_redis_answer_in_order(server: Server) -> None:
    """Grabs answered from the Redis reply without a coroutine, pipelined in one write with answers made at once
    and after other I/O, come back in their order (RFC 9112 section 9.3.2)."""
    group_id = flows.group(server, "S", ["A", "B"])
    order_id = flows.paid_packet(server, "S", {"count": 2, "total_fen": 200, "group_id": group_id}, fund_fen=200)
    opened = flows.ok(server.client("A").post(f"/v1/packets/{order_id}/open"))
    assert flows.ok(server.client("B").post(f"/v1/packets/{order_id}/grab")) == {
        "status": "ok"
    }  # B's membership cached
    auth = {user: f"Authorization: Bearer {server.token(user)}\r\n" for user in ("A", "B")}
    grab = {
        user: f"POST /v1/packets/{order_id}/grab HTTP/1.1\r\nHost: x\r\n{auth[user]}Content-Length: 0\r\n\r\n"
        for user in auth
    }
    healthz, balance = (
        "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        f"GET /v1/balance HTTP/1.1\r\nHost: x\r\n{auth['B']}\r\n",
    )
    answers = flows.pipelined(server, [grab["B"], healthz, grab["B"], balance, grab["A"], grab["B"], healthz])
    assert [status for status, _ in answers] == [200] * 7
    assert answers[0][1] == answers[2][1] == answers[5][1] == b'{"status":"ok"}'
    assert answers[3][1] == b'{"user_id":"B","balance_fen":0}'
    assert orjson.loads(answers[4][1]) == {"status": "opened", "amount_fen": opened["amount_fen"]}
