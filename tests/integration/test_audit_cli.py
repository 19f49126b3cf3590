"""`hongbao audit` of the MySQL shards: a DSN alone selects them (no --backend needed); shards with
no packets and no ledger entries are named and exit 2, "nothing to audit"; when it cannot read the
shards, one line naming the MySQL server (user, host, port, never the password) and the server's
error, exit 2 (1 means violations)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import hongbao_native
from hongbao.bench.services.process import free_port
from hongbao.core.adapters.mysql.db import MysqlShards
from hongbao.core.adapters.mysql.ledger import MysqlLedgerStore
from hongbao.core.adapters.mysql.packets import MysqlPacketStore
from hongbao.core.packet import Kind, Packet, Status
from hongbao.core.ports import LedgerEntry
from hongbao.core.sharding import Layout
from hongbao.core.times import business_yymmdd

from tests.integration.mariadb import PASSWORD, USER, MariaDb, migrated

AUDIT_LAYOUT = Layout(2, 2, prefix="aud_")
LAYOUT_TOML = 'mysql_prefix = "aud_"\nmysql_dbs = 2\nmysql_tables = 2\n'  # AUDIT_LAYOUT; no backend


def _audit(cwd: Path, dsn: str) -> subprocess.CompletedProcess[str]:
    """Run the audit on ``dsn``, given through HONGBAO_MYSQL_DSN as an operator would."""
    return subprocess.run(
        [sys.executable, "-m", "hongbao.server.cli", "audit", "--backend", "production"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HONGBAO_MYSQL_DSN": dsn},
    )


def test_audit_with_a_wrong_password_says_so(tmp_path: Path, mariadb: MariaDb) -> None:
    """A wrong password: exit 2 and one line with the server's access-denied error, no password, no traceback."""
    result = _audit(tmp_path, f"mysql://{USER}:not-the-password-42@127.0.0.1:{mariadb.port}")
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"hongbao audit: MySQL at mysql://{USER}:***@127.0.0.1:{mariadb.port}: (1045, ")
    assert "Access denied" in line and "not-the-password-42" not in line


def test_audit_of_an_unreachable_mysql_says_so(tmp_path: Path) -> None:
    """No server on the port: exit 2 and one line with the connect error, no password, no traceback."""
    port = free_port()
    result = _audit(tmp_path, f"mysql://{USER}:secret-pw@127.0.0.1:{port}")
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"hongbao audit: MySQL at mysql://{USER}:***@127.0.0.1:{port}: (2003, ")
    assert "Can't connect" in line and "secret-pw" not in line


def _audit_dsn_only(cwd: Path, dsn: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """``hongbao audit --mysql-dsn DSN`` with AUDIT_LAYOUT in ``cwd/hongbao.toml``, no --backend
    anywhere, in a directory with no embedded database (./var does not exist)."""
    (cwd / "hongbao.toml").write_text(LAYOUT_TOML)
    return subprocess.run(
        [sys.executable, "-m", "hongbao.server.cli", "audit", "--mysql-dsn", dsn, *flags],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )


async def _topup(dsn: str, layout: Layout) -> None:
    shards = MysqlShards(dsn, layout, pool_size=1)
    try:
        await MysqlLedgerStore(shards).post(LedgerEntry("alice", "topup", "alice:t1", 500, 0))
    finally:
        await shards.close()


def test_a_dsn_alone_audits_the_shards(tmp_path: Path, mariadb: MariaDb) -> None:
    """Empty shards: exit 2, one line naming the servers (password masked) and the databases, with
    "nothing to audit"; after a top-up, the same command audits them: the top-up counted, exit 0."""
    migrated(mariadb, AUDIT_LAYOUT)
    where = f"MySQL mysql://{USER}:***@127.0.0.1:{mariadb.port}, databases aud_db_00..aud_db_01 x 2 tables"
    empty = _audit_dsn_only(tmp_path, mariadb.dsn)
    assert (empty.returncode, empty.stdout) == (2, ""), empty.stdout + empty.stderr
    assert empty.stderr.splitlines() == [f"hongbao audit: nothing to audit in {where}: no packets, no ledger entries"]
    assert PASSWORD not in empty.stderr
    asyncio.run(_topup(mariadb.dsn, AUDIT_LAYOUT))
    done = _audit_dsn_only(tmp_path, mariadb.dsn)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"audited: {where}" and "ledger topup: 1" in lines and "top-ups fen: 500" in lines
    assert lines[-1] == "audit: 0 violations" and PASSWORD not in done.stdout


async def _opened_not_credited(dsn: str, layout: Layout) -> None:
    """alice tops up 500 fen, pays a packet of 100 fen in 2 shares, bob opens one: his credit is pending."""
    now = int(time.time() * 1000)
    order_id = hongbao_native.encode_order_id(1, business_yymmdd(now), 1, 4242)
    shards = MysqlShards(dsn, layout, pool_size=1)
    try:
        ledger, packets = MysqlLedgerStore(shards), MysqlPacketStore(shards)
        await ledger.post(LedgerEntry("alice", "topup", "alice:t1", 500, now))
        await ledger.post(LedgerEntry("alice", "send", order_id, -100, now))
        packet = Packet(
            order_id, "alice", Kind.LUCKY, 2, 100, "g", None, 100, 2, Status.ACTIVE, now, now, now + 86_400_000
        )
        assert await packets.insert_packet(packet)
        [[result]] = await packets.open_batches([(order_id, ["bob"])], now, hongbao_native.split_lucky)
        assert result.receipt is not None
    finally:
        await shards.close()


def test_pending_credits_fail_the_drained_audit_and_name_not_drained(tmp_path: Path, mariadb: MariaDb) -> None:
    """A receipt whose credit has not been applied (a live server's reconciler would): the plain
    audit fails (exit 1) and says on stderr that every violation is one not applied yet, naming
    --not-drained; with --not-drained the same books pass (exit 0)."""
    migrated(mariadb, AUDIT_LAYOUT)
    asyncio.run(_opened_not_credited(mariadb.dsn, AUDIT_LAYOUT))
    drained = _audit_dsn_only(tmp_path, mariadb.dsn)
    assert drained.returncode == 1, drained.stdout + drained.stderr
    assert "pending, but no credit in the ledger" in drained.stdout
    assert "add --not-drained" in drained.stderr
    live = _audit_dsn_only(tmp_path, mariadb.dsn, "--not-drained")
    assert live.returncode == 0 and live.stdout.splitlines()[-1] == "audit: 0 violations", live.stdout + live.stderr
