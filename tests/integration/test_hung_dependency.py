"""A dependency that hangs instead of failing costs milliseconds, not seconds: every Redis and MySQL
call on the request path is bounded (``redis_timeout_ms``, ``mysql_timeout_ms``), so the breaker
opens within a fraction of a second and users get the degraded path or 503 + Retry-After within
about a second. Faults: the redis-server process frozen (SIGSTOP), and a fault-injecting proxy
(tests/e2e/proxy.py) in front of Redis or MariaDB for a slow, frozen or cut link."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from hongbao.core.adapters.mysql.db import BREAKER_S, CONNECT_TIMEOUT_S, MysqlShards
from hongbao.core.errors import Degraded

from tests.e2e.proxy import ThreadProxy
from tests.integration.mariadb import SERVICE_LAYOUT, MariaDb, migrated
from tests.integration.production import audit_cli, start_production
from tests.integration.test_redis_push_down import PrivateRedis, private_redis  # noqa: F401  (fixture)
from tests.server.conftest import Server, stop_server
from tests.server.flows import group, ok, paid_packet, topup

BOUND_S = 1.5  # "within about a second", with room for a loaded CI machine


def _timed(call: Callable[[], httpx.Response]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


@pytest.fixture
def redis_proxy(private_redis: PrivateRedis) -> Iterator[ThreadProxy]:
    """A proxy in front of the test's own redis-server, listening."""
    with ThreadProxy(private_redis.port) as proxy:
        proxy.start()
        yield proxy


@pytest.fixture
def mysql_proxy(mariadb: MariaDb) -> Iterator[ThreadProxy]:
    """A proxy in front of the session's MariaDB, listening."""
    with ThreadProxy(mariadb.port) as proxy:
        proxy.start()
        yield proxy


def _requests(server: Server, order_id: str) -> dict[str, Callable[[], httpx.Response]]:
    """One call of each kind a user makes, as B (a member of the packet's group)."""
    client = server.client("B")
    return {
        "received": lambda: client.get("/v1/me/received"),
        "send": lambda: client.post("/v1/packets", json={"count": 1, "total_fen": 10, "group_id": _GROUP[0]}),
        "grab": lambda: client.post(f"/v1/packets/{order_id}/grab"),
        "details": lambda: client.get(f"/v1/packets/{order_id}"),
        "balance": lambda: client.get("/v1/balance"),
    }


_GROUP: list[str] = []


def _prepared(server: Server) -> str:
    _GROUP[:] = [group(server, "S", ["B", "C"])]
    topup(server, "B", 1000)
    return paid_packet(server, "S", {"count": 2, "total_fen": 200, "group_id": _GROUP[0]}, fund_fen=1000)


def _degraded_fast(server: Server, order_id: str) -> dict[str, tuple[int, float]]:
    """Each request once (the first after the fault): (status, seconds); each answered within BOUND_S
    with its fallback (2xx) or 503 + Retry-After."""
    seen = {}
    for name, call in _requests(server, order_id).items():
        response, took = _timed(call)
        seen[name] = (response.status_code, round(took, 3))
        assert took < BOUND_S, seen
        assert response.status_code < 300 or (response.status_code == 503 and response.headers["retry-after"]), seen
    return seen


def test_frozen_redis_costs_milliseconds(mariadb: MariaDb, private_redis: PrivateRedis, tmp_path: Path) -> None:
    """redis-server SIGSTOPped: the first list read, send, grab, details and balance each answer
    within about a second through their database fallbacks (were 15 s and 2.5-3 s with redis-py's
    5 s timeout and retries); /readyz says Redis is degraded; after SIGCONT all is well."""
    server = start_production(tmp_path / "srv", mariadb, private_redis.target.url)
    try:
        order_id = _prepared(server)
        assert private_redis.process is not None
        private_redis.process.send_signal(19)  # SIGSTOP
        try:
            seen = _degraded_fast(server, order_id)
            assert seen["send"][0] == 201 and seen["received"][0] == 200 and seen["grab"][0] == 200, seen
            ready = httpx.get(f"{server.url}/readyz", timeout=5)
            assert ready.status_code == 200 and ready.json()["degraded"] == ["redis"], ready.text
        finally:
            private_redis.process.send_signal(18)  # SIGCONT
        with server.client("C") as client:
            assert ok(client.post(f"/v1/packets/{order_id}/open"))["amount_fen"] >= 1
    finally:
        assert stop_server(server) == 0
    assert audit_cli(server).endswith("audit: 0 violations\n")


def test_slow_redis_link_costs_milliseconds(mariadb: MariaDb, redis_proxy: ThreadProxy, tmp_path: Path) -> None:
    """Every reply of Redis held 2 s by the link: the requests take their fallbacks within about a second."""
    server = start_production(tmp_path / "srv", mariadb, redis_proxy.url.replace("http://", "redis://"))
    try:
        order_id = _prepared(server)
        redis_proxy.slow(2.0)
        try:
            seen = _degraded_fast(server, order_id)
            assert seen["send"][0] == 201 and seen["received"][0] == 200, seen
        finally:
            redis_proxy.slow(0.0)
    finally:
        assert stop_server(server) == 0


def test_frozen_mysql_link_answers_503_fast(
    mariadb: MariaDb,
    private_redis: PrivateRedis,
    mysql_proxy: ThreadProxy,
    tmp_path: Path,
) -> None:
    """The link to MariaDB frozen (half-open: no reset, no reply): the money routes answer 503
    degraded with Retry-After within about a second, /readyz 503 (no database answers); thawed,
    they work again."""
    server = start_production(
        tmp_path / "srv", mariadb, private_redis.target.url, mysql_port=int(mysql_proxy.url.rsplit(":", 1)[1])
    )
    try:
        _prepared(server)
        mysql_proxy.freeze()
        try:
            with server.client("B") as client:
                for _ in range(5):
                    response, took = _timed(lambda: client.get("/v1/balance"))
                    assert response.status_code == 503 and response.headers["retry-after"] == "1", response.text
                    assert took < BOUND_S, took
            ready, took = _timed(lambda: httpx.get(f"{server.url}/readyz", timeout=5))
            assert ready.status_code == 503 and took < BOUND_S, (ready.text, took)
        finally:
            mysql_proxy.thaw()
            mysql_proxy.drop()  # the connections the bound gave up on
        # Each worker's breaker closes on its own (a dial that hung when the link froze may trip one
        # up to a second after the thaw): a client retries the keyed top-up on 503 as told, until done.
        deadline = time.monotonic() + 10
        with server.client("admin", admin=True) as admin:
            for _ in range(2):  # the second, with the same key, changes nothing
                while True:
                    done = admin.post(
                        "/v1/admin/accounts/B/topup", json={"amount_fen": 5}, headers={"idempotency-key": "t"}
                    )
                    if done.status_code != 503:
                        break
                    assert time.monotonic() < deadline, server.log()
                    time.sleep(0.1)
                assert done.status_code == 200 and done.json()["balance_fen"] == 1005, done.text
    finally:
        assert stop_server(server) == 0


def test_the_first_statement_over_a_frozen_link_is_bounded(mariadb: MariaDb, mysql_proxy: ThreadProxy) -> None:
    """A worker that has not used a database yet (its pool not made), the link frozen: the first
    statement answers Degraded within the connect bound, not when the link thaws; thawed, it works."""
    migrated(mariadb, SERVICE_LAYOUT)
    port = int(mysql_proxy.url.rsplit(":", 1)[1])

    async def scenario() -> None:
        shards = MysqlShards(mariadb.dsn.rsplit(":", 1)[0] + f":{port}", SERVICE_LAYOUT, pool_size=2)
        mysql_proxy.freeze()
        try:
            started = time.monotonic()
            with pytest.raises(Degraded):
                await shards.fetchone(0, "SELECT 1", ())
            assert time.monotonic() - started < BOUND_S + CONNECT_TIMEOUT_S
        finally:
            mysql_proxy.thaw()
            mysql_proxy.drop()
        await asyncio.sleep(BREAKER_S)
        assert await shards.fetchone(0, "SELECT 1", ()) == (1,)
        await shards.close()

    asyncio.run(scenario())


def test_cut_mysql_links_during_pays_and_opens_lose_no_money(
    mariadb: MariaDb,
    private_redis: PrivateRedis,
    mysql_proxy: ThreadProxy,
    tmp_path: Path,
) -> None:
    """Every link to MariaDB reset again and again while a sender pays and members open: answers are
    2xx, 503, or 404/410 for a pay or an open that lost its race (never a 500), and once the
    reconciler has run the audit is clean."""
    server = start_production(
        tmp_path / "srv",
        mariadb,
        private_redis.target.url,
        mysql_port=int(mysql_proxy.url.rsplit(":", 1)[1]),
        extra_config="reconcile_window_ms = 500\n",
    )
    members = [f"m{i}" for i in range(8)]
    try:
        gid = group(server, "S", members)
        topup(server, "S", 1_000_000)
        statuses: list[int] = []
        paid: list[str] = []
        cut_over = threading.Event()

        def storm(user: str) -> None:
            with server.client(user) as client:
                i = 0
                while not cut_over.is_set():
                    i += 1
                    if user == "S":
                        sent = client.post("/v1/packets", json={"count": 4, "total_fen": 400, "group_id": gid})
                        statuses.append(sent.status_code)
                        if sent.status_code == 201:
                            order_id = sent.json()["order_id"]
                            payment = client.post(f"/v1/packets/{order_id}/pay")
                            statuses.append(payment.status_code)
                            if payment.status_code == 200:
                                paid.append(order_id)
                        time.sleep(0.01)
                    elif paid:
                        opened = client.post(f"/v1/packets/{paid[i % len(paid)]}/open")
                        statuses.append(opened.status_code)
                    else:
                        time.sleep(0.02)

        def cutter() -> None:
            # At least ten cuts while everyone keeps sending and opening (a fixed number of requests
            # could all finish before the first cut), then on until a cut was answered 503, up to 20 s.
            deadline = time.monotonic() + 20
            try:
                for cuts in itertools.count(1):
                    time.sleep(0.15)
                    mysql_proxy.drop()
                    if cuts >= 10 and (503 in statuses or time.monotonic() > deadline):
                        return
            finally:
                cut_over.set()

        with ThreadPoolExecutor(len(members) + 2) as pool:
            futures: list[Any] = [pool.submit(storm, u) for u in ["S", *members]]
            futures.append(pool.submit(cutter))
            for future in futures:
                future.result()
        assert set(statuses) <= {200, 201, 404, 410, 503} and 503 in statuses, sorted(set(statuses))
        time.sleep(1.5)  # the reconciler's window, then a run
    finally:
        assert stop_server(server) == 0
    assert audit_cli(server).endswith("audit: 0 violations\n")
