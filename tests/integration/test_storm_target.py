"""A storm against a production server audits the shards the server writes, not the SQLite file of
whatever --data-dir names: pointed at an empty embedded database beside a copy of the server's key,
it must not report a clean audit (the audit found no packets but the storm paid some: exit 2);
given the server's MySQL (--mysql-dsn, no --backend, the layout in a TOML file) it audits the
shards and reports the packets of both storms."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
from hongbao.bench.services.redis_servers import RedisTarget
from hongbao.core.adapters.sqlite.db import SqliteDb
from hongbao.server.auth import KEY_FILE
from hongbao.server.composition import DB_FILE

from tests.integration.mariadb import PASSWORD, MariaDb
from tests.integration.production import SERVE_LAYOUT, start_production
from tests.server.conftest import stop_server

# a storm of a few seconds, nobody online (the push channel is not what this checks)
SHORT = ["--duration", "2", "--tail", "1", "--users", "30", "--groups", "6", "--rate", "6", "--processes", "1"]
SHORT += ["--set", "online_p=0", "--set", "group_sizes=[[1.0, 3, 10]]"]


def _storm(url: str, out: Path, *flags: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "hongbao.server.cli", "storm", "--target", url, "--out", str(out), *SHORT, *flags],
        capture_output=True,
        text=True,
        timeout=180,
    )
    report_file = out / "report.json"
    return done, orjson.loads(report_file.read_bytes()) if report_file.exists() else {}


def test_a_storm_audits_the_production_servers_shards(
    mariadb: MariaDb, redis_standalone: RedisTarget, tmp_path: Path
) -> None:
    """The wrong database is an error in the report and the exit status; the right one is audited clean."""
    redis_standalone.flush()
    server = start_production(tmp_path / "srv", mariadb, redis_standalone.url, workers=1)
    try:
        wrong = tmp_path / "var"  # an embedded data directory: an empty database and the server's key
        SqliteDb(wrong / DB_FILE).close()
        shutil.copy(server.data_dir / KEY_FILE, wrong / KEY_FILE)
        blind, first = _storm(server.url, tmp_path / "blind", "--data-dir", str(wrong))
        assert blind.returncode == 2, blind.stderr
        paid = first["clients"]["packets_paid"]
        assert paid > 0 and first["audit"]["counts"].get("packets", 0) == 0
        assert f"the audit found no packets but the storm paid {paid}: is --data-dir/--mysql-dsn" in blind.stderr
        assert first["audit"]["error"].startswith(f"the audit found no packets but the storm paid {paid}")
        assert "audit: 0 violations" not in blind.stderr and "Traceback" not in blind.stderr

        layout = tmp_path / "layout.toml"  # the layout only: --mysql-dsn alone means production
        layout.write_text(
            f'mysql_prefix = "{SERVE_LAYOUT.prefix}"\nmysql_dbs = {SERVE_LAYOUT.n_dbs}\n'
            f"mysql_tables = {SERVE_LAYOUT.n_tables}\n"
        )
        flags = ["--config", str(layout), "--mysql-dsn", mariadb.dsn, "--data-dir", str(server.data_dir)]
        right, second = _storm(server.url, tmp_path / "right", *flags)
        assert right.returncode == 0, right.stderr
        audit = second["audit"]
        assert audit["ok"] and audit["error"] == "" and audit["source"].startswith("MySQL mysql://")
        assert PASSWORD not in audit["source"] and PASSWORD not in right.stderr
        sends = first["operations"]["send"]["ok"] + second["operations"]["send"]["ok"]
        assert audit["counts"]["packets"] == sends > paid  # the first storm's packets are in the shards too
        receipts = first["clients"]["receipts_seen"] + second["clients"]["receipts_seen"]
        assert audit["counts"]["receipts"] == receipts > 0
        assert "audit: 0 violations" in right.stderr
    finally:
        status = stop_server(server)
    assert status == 0 and "Traceback" not in server.log(), server.log()
