"""The storm audits the database its target runs, and says so when it cannot: a key the target
refuses and a data directory without a database stop it before the load (exit 2); an audit that
finds no packets after the storm paid some is an error (exit 2), never "0 violations"."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hongbao.bench.storm import report
from hongbao.bench.storm.runner import LoadResult
from hongbao.bench.storm.scenario import load_scenario
from hongbao.bench.storm.settle import Settlement
from hongbao.core.adapters.sqlite.db import SqliteDb
from hongbao.core.audit import AuditReport
from hongbao.server.auth import KEY_FILE
from hongbao.server.composition import DB_FILE

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


def _summary(paid: int, unpaid: int, found: Counter[str]) -> dict[str, Any]:
    result = LoadResult(counts=Counter({"topup ok": 10}))
    result.packets = {f"p{i}": ["g1", 3, "u1", 1.0] for i in range(paid)}
    result.packets |= {f"q{i}": ["g1", 3, "u1", None] for i in range(unpaid)}
    audit = AuditReport(counts=found, source="SQLite var/hongbao.db")
    return report.build(result, Settlement(True, 0, 0.1, audit), load_scenario("smoke"), "http://t")


@pytest.mark.parametrize(
    ("paid", "found", "error", "blind"),
    [
        (
            3,
            Counter({"top-ups fen": 0}),
            "the audit found no packets but the storm paid 3: is --data-dir/--mysql-dsn",
            True,
        ),
        (
            0,
            Counter({"top-ups fen": 0}),
            "the audit found nothing (no packets, no ledger entries) after the storm topped up 10 users",
            True,
        ),
        (3, Counter({"packets": 2, "ledger topup": 10}), "the audit found 2 packets but the storm paid 3", False),
        (3, Counter({"packets": 3, "ledger topup": 10}), "", False),
        (3, Counter({"packets": 9, "ledger topup": 20}), "", False),  # a target with packets of earlier storms
    ],
)
def test_an_audit_that_misses_what_the_storm_paid_is_an_error(
    paid: int, found: Counter[str], error: str, blind: bool
) -> None:
    """Fewer packets than the storm paid (two of them unpaid here), or nothing at all, is an error in
    the report and fails the money check; none found is "blind" (exit 2: the wrong database)."""
    summary = _summary(paid, 2, found)
    audit = summary["audit"]
    assert audit["source"] == "SQLite var/hongbao.db"
    assert summary["clients"]["packets_paid"] == paid and summary["clients"]["users_topped_up"] == 10
    if error:
        assert audit["error"].startswith(error) and "SQLite var/hongbao.db" in audit["error"]
    else:
        assert audit["error"] == ""
    assert report.money_ok(summary) is (error == "")
    assert report.audit_blind(summary) is blind
