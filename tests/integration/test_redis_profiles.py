"""The non-critical store of the production backend on Redis (core/adapters/redis/profiles.py,
docs/architecture.md sections 5 and 10): greetings and profiles are Redis keys, one slot each (a
standalone Redis and the 3-master cluster), with no MySQL table behind them; and with the
redis-server stopped for real, details still answer with the default nickname and avatar (the
services, then `hongbao serve --backend production` over HTTP: 200), a profile read answers the
defaults and a profile write 503 ``degraded``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from hongbao.bench.services import redis_servers
from hongbao.core import errors
from hongbao.core.adapters.mysql.audit import audit_mysql
from hongbao.core.adapters.redis.client import Pipelines
from hongbao.core.adapters.redis.profiles import GREETING_MARGIN_MS
from hongbao.core.clock import ManualClock
from hongbao.core.services.profiles import PROFILE_MEMORY_TTL_MS
from hongbao.core.view_cache import MEMORY_TTL_MS

from tests.core import test_service as suite
from tests.core.conftest import admission, clock  # noqa: F401  (fixtures)
from tests.core.test_reads import _names
from tests.integration.conftest import RedisTarget
from tests.integration.mariadb import MariaDb
from tests.integration.private_redis import PrivateRedis, private_redis  # noqa: F401  (fixture)
from tests.integration.production import SERVE_LAYOUT, start_production
from tests.integration.test_redis_money import Open, open_on  # noqa: F401  (fixture)
from tests.server.conftest import stop_server
from tests.server.flows import group, move_clock, ok, paid_packet


async def test_greetings_and_profiles_take_the_lean_path(
    open_on: Open, redis_target: RedisTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command of the profile store (a greeting at each pay, profiles at each details read)
    is a lean command: the store works with redis-py's pipeline path refused."""
    backend, _ = await open_on(redis_target.url, redis_target.cluster)
    store = backend.services.ports.profiles

    async def refused(*_: object, **__: object) -> None:
        raise AssertionError("redis-py's pipeline path")

    monkeypatch.setattr(Pipelines, "run", refused)
    await store.set_greeting("o1", "恭喜发财")
    await store.set_profile("S", "Sender", "https://x.test/s.png")
    assert await store.greeting("o1") == "恭喜发财" and await store.greeting("o2") is None
    assert await store.profiles(["S", "nobody", "S"]) == {"S": ("Sender", "https://x.test/s.png")}


async def test_greetings_and_profiles_are_redis_keys(open_on: Open, redis_target: RedisTarget) -> None:
    """A pay keeps its greeting at ``greeting:{order_id}`` for the expiry and a day; a profile is the
    hash ``profile:{user_id}`` without a TTL; MySQL has no greeting or profile table."""
    backend, _ = await open_on(redis_target.url, redis_target.cluster)
    svc = backend.services
    await suite._group(svc, "g", ["S", "A"])
    await svc.profiles.set("S", "Sender", "https://x.test/s.png")
    order_id = await suite._paid(svc, "S", {"count": 1, "total_fen": 10, "group_id": "g", "greeting": "红包"})
    keys = redis_target.sync_keys()
    assert keys.get(f"greeting:{{{order_id}}}") == "红包".encode()
    ttl_ms = keys.pttl(f"greeting:{{{order_id}}}")
    assert svc.limits.expiry_ms < ttl_ms <= svc.limits.expiry_ms + GREETING_MARGIN_MS
    assert keys.hgetall("profile:{S}") == {b"n": b"Sender", b"a": b"https://x.test/s.png"}
    assert keys.pttl("profile:{S}") == -1
    assert backend.shards is not None
    tables = await backend.shards.fetchall(
        0,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name IN (%s, %s)",
        ("t_packet_note", "t_profile"),
    )
    assert list(tables) == []
    assert (await svc.reading.details("A", order_id))["greeting"] == "红包"


async def test_redis_down_at_details_shows_the_defaults(
    open_on: Open, private_redis: PrivateRedis, clock: ManualClock
) -> None:
    """Redis stopped: details of a packet answer from the database with every nickname the user id,
    every avatar "" and no greeting; a profile reads as the defaults and cannot be written
    (Degraded); the skipped calls are counted."""
    backend, counts = await open_on(private_redis.url, False)
    svc = backend.services
    await suite._group(svc, "g", ["S", "A"])
    await svc.profiles.set("A", "Ann", "https://x.test/a.png")
    order_id = await suite._paid(svc, "S", {"count": 2, "total_fen": 20, "group_id": "g", "greeting": "hi"})
    await svc.opening.open("A", order_id)
    assert await _names(svc, "S", order_id) == [("S", "S", ""), ("A", "Ann", "https://x.test/a.png")]
    await private_redis.stop()
    clock.advance_ms(max(PROFILE_MEMORY_TTL_MS, MEMORY_TTL_MS))  # past both memory levels

    details = await svc.reading.details("S", order_id)
    assert details["greeting"] == "" and details["opened_count"] == 1
    assert await _names(svc, "S", order_id) == [("S", "S", ""), ("A", "A", "")]
    assert await svc.profiles.get("A") == {"user_id": "A", "nickname": "A", "avatar_url": ""}
    with pytest.raises(errors.Degraded):
        await svc.profiles.set("A", "Ann2", "")
    assert counts["redis_fallback_profiles"] >= 3


def test_details_over_http_while_redis_is_down(mariadb: MariaDb, tmp_path: Path) -> None:
    """`hongbao serve --backend production` with its redis-server stopped: GET details is 200 with
    the default nickname and avatar, GET /v1/me/profile 200 with the defaults, PUT 503 degraded; the
    server stops cleanly and the shards pass the audit."""
    (tmp_path / "redis").mkdir()
    (port,) = redis_servers.free_ports(1)
    process = redis_servers.start_on(tmp_path / "redis", port)
    try:
        server = start_production(tmp_path / "srv", mariadb, f"redis://127.0.0.1:{port}", workers=1)
        try:
            gid = group(server, "S", ["A"])
            order_id = paid_packet(server, "S", {"count": 2, "total_fen": 20, "group_id": gid, "greeting": "hi"}, 20)
            with server.client("A") as a:
                ok(a.put("/v1/me/profile", json={"nickname": "Ann", "avatar_url": "https://x.test/a.png"}))
                ok(a.post(f"/v1/packets/{order_id}/open"))
                assert ok(a.get(f"/v1/packets/{order_id}"))["receipts"][0]["nickname"] == "Ann"
                redis_servers.stop(process)
                move_clock(server, int(time.time() * 1000) + 2 * PROFILE_MEMORY_TTL_MS)  # past both memory levels
                details = ok(a.get(f"/v1/packets/{order_id}"))
                assert details["sender"] == {"user_id": "S", "nickname": "S", "avatar_url": ""}
                assert [(r["user_id"], r["nickname"], r["avatar_url"]) for r in details["receipts"]] == [("A", "A", "")]
                assert ok(a.get("/v1/me/profile")) == {"user_id": "A", "nickname": "A", "avatar_url": ""}
                refused = a.put("/v1/me/profile", json={"nickname": "Ann2"})
                assert (refused.status_code, refused.json()["error"]["code"]) == (503, "degraded")
                assert int(refused.headers["retry-after"]) >= 1
        finally:
            status = stop_server(server)
            assert status == 0 and "Traceback" not in server.log(), server.log()
        report = asyncio.run(audit_mysql(mariadb.dsn, SERVE_LAYOUT, drained=False))
        assert report.ok, report.lines()
    finally:
        redis_servers.stop(process)
