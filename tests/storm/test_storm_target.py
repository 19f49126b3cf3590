"""The storm audits the database its target runs, and says so when it cannot: a key the target
refuses and a data directory without a database stop it before the load (exit 2)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from hongbao.core.adapters.sqlite_db import SqliteDb
from hongbao.core.embedded import DB_FILE
from hongbao.server.auth import KEY_FILE

from tests.server.conftest import Server

QUICK = ["--duration", "1", "--tail", "1", "--users", "10", "--groups", "2", "--rate", "2", "--processes", "1"]
QUICK += ["--set", "group_sizes=[[1.0, 3, 5]]"]


def _storm(server: Server, data_dir: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "hongbao.server.cli",
            "storm",
            "--target",
            server.url,
            "--data-dir",
            str(data_dir),
            "--out",
            str(out),
            *QUICK,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_key_the_target_refuses_stops_the_storm_before_the_load(
    make_server: Callable[..., Server], tmp_path: Path
) -> None:
    """A data directory with a database but another server's jwt.key: one authenticated request
    is refused, the storm stops with a line naming the key file, exit 2, nothing played."""
    server = make_server()
    other = tmp_path / "other"
    SqliteDb(other / DB_FILE).close()
    (other / KEY_FILE).write_text("not-the-target-key-" + "0" * 40)
    done = _storm(server, other, tmp_path / "out")
    assert done.returncode == 2, done.stderr
    assert f"refused a token signed with {other / KEY_FILE}" in done.stderr and "Traceback" not in done.stderr
    assert "is --data-dir the target's data directory (or --jwt-secret its secret)?" in done.stderr
    assert not (tmp_path / "out" / "report.json").exists()


def test_a_data_dir_without_a_database_stops_the_storm_before_the_load(
    make_server: Callable[..., Server], tmp_path: Path
) -> None:
    """The target's key but no hongbao.db beside it (a production server's data directory, say):
    exit 2 before the load, saying where it looked and how to name a production target's database."""
    server = make_server()
    keys = tmp_path / "keys"
    keys.mkdir()
    shutil.copy(server.data_dir / KEY_FILE, keys / KEY_FILE)
    done = _storm(server, keys, tmp_path / "out")
    assert done.returncode == 2, done.stderr
    assert f"no database at {keys / DB_FILE} to audit" in done.stderr and "--mysql-dsn" in done.stderr
    assert not (tmp_path / "out" / "report.json").exists()
