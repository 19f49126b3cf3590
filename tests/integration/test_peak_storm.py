"""``make bench-storm``'s ladder (bench/storm/peak.py), shrunk to two tiny rungs: hongbao (users online)
and the baseline, each rung on a MariaDB and a Redis of its own, judged and reported. The offline
ladder is the same code with nobody online (tests/storm/test_knee.py covers the three-system report
and the narrowing and second plays of knees, which ``--resolution 1 --plays 1`` leave out here: 6 | 12
is narrow enough)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from tests.storm.test_storm_live import SHRUNK

RATES = (6.0, 12.0)


def shrunk_without_rate() -> list[str]:
    """The shrunk storm's flags less its ``--rate`` (the ladder sets the rate)."""
    at = SHRUNK.index("--rate")
    return SHRUNK[:at] + SHRUNK[at + 2 :]


def test_a_two_rung_ladder_reports_knees_latency_and_cpu(tmp_path: Path) -> None:
    """Every system climbs until a rung fails, the knee is its last holding rung, and each rung has
    p50/p99 per operation, a clean audit, the CPU of the server, MariaDB and Redis per open, and the
    server's log next to its report; a rung of an earlier ladder in the output directory is gone."""
    stale = tmp_path / "baseline" / "rate-999"
    stale.mkdir(parents=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hongbao.bench.storm.peak",
            "--rates",
            ",".join(f"{r:g}" for r in RATES),
            "--systems",
            "hongbao,baseline",
            "--resolution",
            "1",
            "--plays",
            "1",
            "--out",
            str(tmp_path),
            *shrunk_without_rate(),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    assert "knee (highest rate that holds; lowest that fails; plays that held)" in done.stderr
    assert "baseline audit, once its server stopped: 0 violations (" in done.stderr
    result: dict[str, Any] = orjson.loads((tmp_path / "peak.json").read_bytes())
    assert list(result["systems"]) == ["hongbao", "baseline"]
    assert result["audits_clean"] is True and result["rates"] == list(RATES)
    for system, entry in result["systems"].items():
        rungs = entry["rungs"]
        holding = [r["rate"] for r in rungs if r["holds"]]
        assert len(rungs) == (2 if rungs[0]["holds"] else 1), (system, rungs)  # it stops after a failing rung
        assert entry["knee"] == (holding[-1] if holding else None)
        assert entry["failed_at"] == next((r["rate"] for r in rungs if not r["holds"]), None)
        assert all(r["holds"] == (not r["reasons"]) for r in rungs)
        assert entry["verdicts"] == [{"rate": r["rate"], "held": int(r["holds"]), "plays": 1} for r in rungs]
        for r in rungs:
            assert not r["error"] and r["audit_clean"] and r["violations"] == []
            assert set(r["operations"]) == {"send", "pay", "grab", "open"}
            assert all(0 < e["p50_ms"] <= e["p99_ms"] for e in r["operations"].values())
            cpu = r["cpu"]
            assert cpu["requests"] == {op: e["attempts"] for op, e in r["operations"].items()}
            assert cpu["opens"] == r["operations"]["open"]["ok"] > 0
            assert all(cpu["seconds"][role] > 0 for role in ("server", "mariadb", "redis", "generator"))
            assert all(cpu["ms_per_open"][role] > 0 for role in ("server", "mariadb", "redis"))
            assert cpu["server_ms_per_request"] > 0 and len(r["generator_cores"]) == 2
            assert (r["push"] is not None) == (system == "hongbao")
            rung = tmp_path / system / f"rate-{r['rate']:g}"
            assert (rung / "report.json").is_file()
            assert (rung / "server.log").read_text().strip(), "the rung's server log is kept, not empty"
    assert not stale.exists()
    assert sorted(p.name for p in (tmp_path / "baseline").iterdir()) == sorted(
        f"rate-{r['rate']:g}" for r in result["systems"]["baseline"]["rungs"]
    )
    knees = {system: entry["knee"] for system, entry in result["systems"].items()}
    expected = round(knees["hongbao"] / knees["baseline"], 2) if knees["hongbao"] and knees["baseline"] else None
    assert result["knee_ratio"] == {"online": expected, "offline": None}
