"""`hongbao serve --backend production` end to end: two workers on a real MariaDB (money) and a real
redis-server (queues), driven over HTTP; the money audit of docs/architecture.md section 11 over the shards."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hongbao.core.adapters.mysql.audit import audit_mysql
from hongbao.server.cli import main as cli_main

from tests.integration.conftest import RedisTarget
from tests.integration.mariadb import MariaDb
from tests.integration.production import SERVE_LAYOUT, start_production
from tests.server.conftest import stop_server
from tests.server.crowd import Crowd, balances, details_of, fan_out
from tests.server.flows import balance, eventually, group, move_clock, ms, ok, paid_packet

DAY_MS = 24 * 3600 * 1000


def test_production_backend_over_http(mariadb: MariaDb, redis_standalone: RedisTarget, tmp_path: Path) -> None:
    """Send, pay, 60 members open a 50-share packet on 2 workers, credits and a refund arrive, the
    shards audit clean."""
    redis_standalone.flush()
    server = start_production(tmp_path / "prod", mariadb, redis_standalone.url)
    try:
        members = [f"m{i:02}" for i in range(60)]
        gid = group(server, "S", members)
        lucky = paid_packet(server, "S", {"count": 50, "total_fen": 5000, "group_id": gid}, fund_fen=6000)
        left = paid_packet(server, "S", {"kind": "equal", "count": 4, "per_share_fen": 25, "group_id": gid})
        assert balance(server, "S") == 6000 - 5000 - 100

        async def storm() -> tuple[dict[str, int], dict[str, object]]:
            async with Crowd(server, 60) as crowd:
                opened = await fan_out(server, crowd, "POST", f"/v1/packets/{lucky}/open", members)
                won = {u: ok(r)["amount_fen"] for u, r in zip(members, opened, strict=True) if r.status_code == 200}
                assert sorted({r.status_code for r in opened}) == [200, 410] and len(won) == 50
                await fan_out(server, crowd, "POST", f"/v1/packets/{left}/open", members[:1])
                return won, await details_of(server, crowd, lucky, "S")

        won, details = asyncio.run(storm())
        assert sum(won.values()) == 5000 and details["status"] == "finished"
        assert {r["user_id"]: r["amount_fen"] for r in details["receipts"]} == won  # type: ignore[attr-defined]

        async def credited() -> dict[str, int]:
            async with Crowd(server, 20) as crowd:
                return await balances(server, crowd, [*members, "S"])

        def all_credited() -> None:
            got = asyncio.run(credited())
            assert {u: got[u] for u in members} == {u: won.get(u, 0) + (25 if u == members[0] else 0) for u in members}

        eventually(all_credited, timeout_s=20)
        with server.client("S") as client:
            expires = ok(client.get(f"/v1/packets/{left}"))["expires_at"]
        move_clock(server, ms(expires) + 1)

        def refunded() -> None:
            assert balance(server, "S") == 6000 - 5000 - 100 + 75

        eventually(refunded, timeout_s=20)
    finally:
        status = stop_server(server)
    assert status == 0 and "Traceback" not in server.log(), server.log()
    report = asyncio.run(audit_mysql(mariadb.dsn, SERVE_LAYOUT))
    assert report.ok and report.counts["packets"] == 2 and report.counts["receipts"] == 51, report.lines()


def test_production_needs_its_services(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`hongbao serve --backend production` without a MySQL DSN, or without it and a Redis URL,
    exits 2 (it cannot run) and names exactly the flags missing."""
    for name in ("HONGBAO_MYSQL_DSN", "HONGBAO_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    assert cli_main(["serve", "--backend", "production", "--redis-url", "redis://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "--mysql-dsn" in err and "--redis-url" not in err
    assert cli_main(["serve", "--backend", "production"]) == 2
    err = capsys.readouterr().err
    assert "--mysql-dsn" in err and "--redis-url" in err
