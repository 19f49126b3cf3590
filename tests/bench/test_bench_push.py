"""The push benchmark's machinery (bench/push/run.py): a tiny run against real servers (hongbao,
the websockets baseline, the ceiling, a redis-server) with real values in its JSON, and its floor
arithmetic."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.push import run as bench_push

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "bench" / "push" / "run.py"


def test_floors_and_the_redis_budget_gate_the_run() -> None:
    """A ratio over its floor, one not measured, or Redis past 380 bytes a user is a floor miss;
    ratios at or under their floors and Redis within budget are none."""
    passing: dict[str, Any] = {
        "ratios": {"fanout_cpu_per_message": 1 / 3, "memory_per_idle_connection": 0.5},
        "redis": {"three_layers_bytes_per_user": 380},
    }
    assert bench_push.floor_misses(passing) == []
    failing: dict[str, Any] = {
        "ratios": {"fanout_cpu_per_message": 0.61, "memory_per_idle_connection": None},
        "redis": {"three_layers_bytes_per_user": 380.5},
    }
    assert bench_push.floor_misses(failing) == [
        "fanout_cpu_per_message: hongbao / websockets = 0.610, floor 0.333",
        "memory_per_idle_connection: not measured (the websockets side measured nothing)",
        "redis: 380.5 bytes per online user, budget 380",
    ]


def test_a_tiny_run_is_correct_and_reports_real_values(tmp_path: Path) -> None:
    """bench/push/run.py at tiny sizes with --no-gate exits 0; every client got every broadcast
    from the three servers, the CPU, memory, latency and Redis numbers are real, and the ratios are
    the same run's hongbao (or ceiling) / websockets values; no server wrote more than once per message."""
    out = tmp_path / "push.json"
    done = subprocess.run(
        [
            sys.executable,
            str(RUN),
            "--idle",
            "300",
            "--fanout",
            "200",
            "--broadcasts",
            "20",
            "--openers",
            "3",
            "--packets",
            "2",
            "--redis-users",
            "100",
            "--procs",
            "2",
            "--no-gate",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"bench-push: wrote {out}" in done.stdout and "fan-out CPU us / message" in done.stdout
    result = json.loads(out.read_text())
    assert result["incorrect"] == []
    assert result["settings"]["hongbao_workers"] == 1 and result["settings"]["client_processes"] == 2
    for side in ("hongbao", "websockets", "ceiling"):
        fan, mem = result["fanout"][side], result["memory"][side]
        assert fan["delivered"] == 200 * 20 and 99 <= fan["payload_bytes_mean"] <= 102, fan
        assert fan["server_cpu_s"] > 0 and fan["cpu_us_per_message"] == round(fan["server_cpu_s"] * 1e6 / 4000, 3), fan
        assert 0 < fan["writes_per_message"] <= 1.1, fan  # at most one write per message (and the HTTP answers)
        assert mem["connections"] == 300 and mem["rss_after_bytes"] > 0 and mem["rss_before_bytes"] > 0, mem
    ratios = result["ratios"]
    assert ratios["fanout_cpu_per_message"] == round(
        result["fanout"]["hongbao"]["cpu_us_per_message"] / result["fanout"]["websockets"]["cpu_us_per_message"], 4
    )
    assert ratios["memory_per_idle_connection"] == round(
        result["memory"]["hongbao"]["bytes_per_connection"] / result["memory"]["websockets"]["bytes_per_connection"], 4
    )
    assert set(result["ceiling_ratios"]) == {"fanout_cpu_per_message", "memory_per_idle_connection"}
    assert result["ceiling_ratios"]["fanout_cpu_per_message"] == round(
        result["fanout"]["ceiling"]["cpu_us_per_message"] / result["fanout"]["websockets"]["cpu_us_per_message"], 4
    )
    latency = result["latency"]
    assert latency["samples"] == 6 and latency["missing_events"] == 0, latency
    assert 0 < latency["push"]["p50_ms"] <= latency["push"]["p99_ms"] <= latency["push"]["max_ms"], latency
    redis = result["redis"]
    assert redis["keys_by_kind"]["session"]["keys"] == redis["keys_by_kind"]["route"]["keys"] == 100, redis
    assert 100 < redis["three_layers_bytes_per_user"] == round(sum(redis["bytes_per_user"].values()), 1) < 1000, redis
