"""`hongbao migrate` on a real MariaDB: N x M x 31 day tables, idempotent reruns that keep the data,
refusals (another layout, a newer schema), the cold move, and the money audit over the shards."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncmy
import pytest
from hongbao.core.adapters.mysql.audit import audit_mysql
from hongbao.core.adapters.mysql.cold import DAY_MS, move_cold
from hongbao.core.adapters.mysql.db import connect_args
from hongbao.core.clock import ManualClock
from hongbao.core.sharding import parse_dsn
from hongbao.server.cli import main as cli_main
from hongbao.server.composition import Backend

from tests.core.conftest import admission, clock  # noqa: F401  (fixtures)
from tests.core.test_service import _group, _paid
from tests.integration.mariadb import SERVICE_LAYOUT, MariaDb, make_backend  # noqa: F401  (fixture)

TABLES_PER_DB = 5 + 3 * 4 + 4 * 31 * 2  # per-database tables + accounts/ledger/lists x M + packets/receipts x M x 31


def _config(tmp_path: Path, prefix: str, dbs: int = 4, tables: int = 4) -> Path:
    path = tmp_path / f"{prefix}{dbs}x{tables}.toml"
    path.write_text(f'mysql_prefix = "{prefix}"\nmysql_dbs = {dbs}\nmysql_tables = {tables}\n')
    return path


async def _sql(server: MariaDb, sql: str) -> list[tuple[Any, ...]]:
    conn = await asyncmy.connect(**connect_args(parse_dsn(server.dsn)[0]))
    try:
        async with conn.cursor() as cur:
            await cur.execute(sql)
            return list(await cur.fetchall())
    finally:
        conn.close()


def test_migrate_is_idempotent_and_refuses_another_layout(
    mariadb: MariaDb, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """4 x 4: every table created once, a rerun creates none and keeps rows; 2 x 2 on it and a newer
    schema are refused with exit 2 (migrate cannot run there)."""
    config, dsn = _config(tmp_path, "mig_"), mariadb.dsn
    assert cli_main(["migrate", "--config", str(config), "--mysql-dsn", dsn]) == 0
    assert capsys.readouterr().out.strip().endswith(f"{4 * TABLES_PER_DB} tables created")
    counts = asyncio.run(
        _sql(
            mariadb,
            "SELECT table_schema, COUNT(*) FROM information_schema.tables "
            "WHERE table_schema LIKE 'mig\\_db\\___' GROUP BY table_schema ORDER BY 1",
        )
    )
    assert counts == [(f"mig_db_{i:02}", TABLES_PER_DB) for i in range(4)]
    asyncio.run(_sql(mariadb, "INSERT INTO mig_db_02.t_account_03 (user_id, balance_fen) VALUES ('kept', 7)"))
    assert cli_main(["migrate", "--config", str(config), "--mysql-dsn", dsn]) == 0
    assert capsys.readouterr().out.strip().endswith(" 0 tables created")
    assert asyncio.run(_sql(mariadb, "SELECT balance_fen FROM mig_db_02.t_account_03 WHERE user_id = 'kept'")) == [(7,)]
    assert cli_main(["migrate", "--config", str(_config(tmp_path, "mig_", 2, 2)), "--mysql-dsn", dsn]) == 2
    assert "resharding is not supported" in capsys.readouterr().err
    asyncio.run(_sql(mariadb, "UPDATE mig_db_01.t_meta SET value = '99' WHERE name = 'schema_version'"))
    assert cli_main(["migrate", "--config", str(config), "--mysql-dsn", dsn]) == 2
    assert "newer than this hongbao" in capsys.readouterr().err


def test_migrate_upgrades_a_version_1_schema_in_place(
    mariadb: MariaDb, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A schema of version 1 (ledger tables without the by_kind index, group members without
    by_user, the greeting and profile tables of version 2 and older) is upgraded in place to version
    3: the indexes added, the rows kept (the old tables' too: left for the operator), the version recorded."""
    config, dsn = _config(tmp_path, "up_", 2, 2), mariadb.dsn
    assert cli_main(["migrate", "--config", str(config), "--mysql-dsn", dsn]) == 0
    for db in range(2):
        for t in range(2):
            asyncio.run(_sql(mariadb, f"ALTER TABLE up_db_{db:02}.t_ledger_{t:02} DROP INDEX by_kind"))
        asyncio.run(_sql(mariadb, f"ALTER TABLE up_db_{db:02}.t_group_member DROP INDEX by_user"))
        asyncio.run(_sql(mariadb, f"CREATE TABLE up_db_{db:02}.t_profile (user_id VARCHAR(64) PRIMARY KEY)"))
        asyncio.run(_sql(mariadb, f"INSERT INTO up_db_{db:02}.t_profile VALUES ('old')"))
        asyncio.run(_sql(mariadb, f"UPDATE up_db_{db:02}.t_meta SET value = '1' WHERE name = 'schema_version'"))
    asyncio.run(
        _sql(
            mariadb,
            "INSERT INTO up_db_01.t_ledger_01 (user_id, kind, ref, amount_fen, created_at) "
            "VALUES ('kept', 'topup', 'k', 5, 1)",
        )
    )
    capsys.readouterr()
    assert cli_main(["migrate", "--config", str(config), "--mysql-dsn", dsn]) == 0
    assert capsys.readouterr().out.strip().endswith(" 0 tables created")
    indexed = asyncio.run(
        _sql(
            mariadb,
            "SELECT table_schema, table_name FROM information_schema.statistics "
            "WHERE table_schema LIKE 'up\\_db\\___' AND index_name = 'by_kind' "
            "AND seq_in_index = 1 ORDER BY 1, 2",
        )
    )
    assert indexed == [(f"up_db_{db:02}", f"t_ledger_{t:02}") for db in range(2) for t in range(2)]
    by_user = asyncio.run(
        _sql(
            mariadb,
            "SELECT table_schema, table_name, column_name FROM information_schema.statistics "
            "WHERE table_schema LIKE 'up\\_db\\___' AND index_name = 'by_user' AND seq_in_index = 1 ORDER BY 1",
        )
    )
    assert by_user == [(f"up_db_{db:02}", "t_group_member", "user_id") for db in range(2)]
    assert asyncio.run(_sql(mariadb, "SELECT user_id FROM up_db_01.t_profile")) == [("old",)]
    versions = asyncio.run(
        _sql(
            mariadb,
            "SELECT value FROM up_db_00.t_meta WHERE name = 'schema_version' UNION ALL "
            "SELECT value FROM up_db_01.t_meta WHERE name = 'schema_version'",
        )
    )
    assert versions == [("3",), ("3",)]
    assert asyncio.run(_sql(mariadb, "SELECT amount_fen FROM up_db_01.t_ledger_01 WHERE user_id = 'kept'")) == [(5,)]


def test_migrate_needs_a_dsn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --mysql-dsn (or HONGBAO_MYSQL_DSN) migrate exits 2 (it cannot run) and says what to give."""
    monkeypatch.delenv("HONGBAO_MYSQL_DSN", raising=False)
    assert cli_main(["migrate", "--config", str(_config(tmp_path, "none_"))]) == 2
    assert "--mysql-dsn" in capsys.readouterr().err


async def _world(svc_backend: Backend, clock: ManualClock) -> tuple[str, str, str]:
    """A finished packet, a refunded one, and an active one; everything credited."""
    svc = svc_backend.services
    await _group(svc, "g", ["A", "B", "C"])
    done = await _paid(svc, "A", {"count": 2, "total_fen": 300, "group_id": "g"}, fund=1000)
    left = await _paid(svc, "A", {"kind": "equal", "count": 3, "per_share_fen": 50, "group_id": "g"}, fund=1)
    for user in ("B", "C"):
        await svc.opening.open(user, done)
    await svc.opening.open("B", left)
    clock.advance_ms(DAY_MS)
    await svc.settlement.refund_due()
    active = await _paid(svc, "C", {"count": 2, "total_fen": 40, "group_id": "g"}, fund=40)
    while await svc.settlement.drain_credits():
        pass
    await svc.settlement.reconcile(window_ms=0)
    return done, left, active


async def test_audit_and_cold_move(mariadb: MariaDb, make_backend: Callable[..., Backend], clock: ManualClock) -> None:
    """The audit passes on honest shards and names money made; the cold move takes only closed old
    packets and the books still balance."""
    backend = make_backend()
    layout = SERVICE_LAYOUT
    done, left, active = await _world(backend, clock)
    report = await audit_mysql(mariadb.dsn, layout)
    assert report.ok, report.lines()
    assert (report.counts["packets"], report.counts["receipts"], report.counts["packets refunded"]) == (3, 3, 1)
    assert await move_cold(mariadb.dsn, layout, clock.now_ms() + DAY_MS) == 0  # inside the hot window
    moved = await move_cold(mariadb.dsn, layout, clock.now_ms() + 10 * DAY_MS)
    assert moved == 2
    packets = backend.services.ports.packets
    assert await packets.get_packet(done) is None and await packets.get_packet(left) is None
    assert await packets.get_packet(active) is not None
    assert await move_cold(mariadb.dsn, layout, clock.now_ms() + 10 * DAY_MS) == 0
    report = await audit_mysql(mariadb.dsn, layout)
    assert report.ok and report.counts["packets"] == 3, report.lines()
    db, t = layout.key_shard("B")
    await _sql(
        mariadb, f"UPDATE {layout.db_name(db)}.t_account_{t:02} SET balance_fen = balance_fen + 1 WHERE user_id = 'B'"
    )
    violations = (await audit_mysql(mariadb.dsn, layout)).violations
    assert any("money made or lost" in v for v in violations) and any("B: balance" in v for v in violations)
