"""The grab benchmark (bench/http/grab.py) run tiny against its own MariaDB and Redis:
it produces real numbers for every target and the Redis bytes per packet (the floor is not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_a_tiny_grab_benchmark_reports_numbers(tmp_path: Path) -> None:
    """One-second runs with --no-gate exit 0; ceiling, healthz, grab and redis_rt all answered 2xx
    at a real rate, and the memory numbers are real."""
    out = tmp_path / "grab.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hongbao.bench.http.grab",
            "--duration",
            "1",
            "--warmup",
            "1",
            "--connections",
            "16",
            "--no-gate",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["incorrect"] == []
    rates = {run["target"]: run["rps"] for run in result["runs"]}
    assert set(rates) == {"ceiling", "healthz", "grab", "redis_rt"} and min(rates.values()) > 0, rates
    ratios = result["ratios"]["2"]
    assert ratios["grab/redis_rt"] == round(ratios["grab"] / ratios["redis_rt"], 4) and ratios["grab"] > 0
    memory = result["redis_memory"]
    assert 50 < memory["bytes_per_live_packet"] < memory["bytes_per_fully_opened_packet"] < 20_000, memory
    assert f"bench-grab: wrote {out}" in done.stdout and "bytes per live packet" in done.stdout
