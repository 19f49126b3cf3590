"""The idle benchmark (bench/idle.py) run short against its own MariaDB and Redis: it counts real
statements, names where they come from, and two workers and four stay under its floor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_a_short_idle_run_counts_statements_under_the_floor(tmp_path: Path) -> None:
    """Idle servers with 2 and 4 workers: each run counted statements (the reconciler's scans at
    least) and stayed under 5 a second; exit 0 and the report written."""
    out = tmp_path / "idle.json"
    done = subprocess.run(
        [sys.executable, "-m", "hongbao.bench.idle", "--seconds", "6", "--warmup", "3", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert [run["workers"] for run in report["runs"]] == [2, 4] and report["over_floor"] == []
    for run in report["runs"]:
        assert 0 < run["questions_per_s"] < 5, run
        assert any("t_receipt" in text for text, _ in run["top_statements_per_s"]), run
