"""The storm's baseline (bench/baselines): FastAPI + uvicorn, a Redis Lua pre-split list and an
asynchronous MySQL write per receipt, on real MariaDB and Redis, played in the same run as hongbao."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
from hongbao.bench.services.redis_servers import RedisTarget

from tests.integration.mariadb import MariaDb
from tests.storm.test_storm_live import SHRUNK


def test_one_storm_against_hongbao_and_the_baseline(
    mariadb: MariaDb, redis_standalone: RedisTarget, tmp_path: Path
) -> None:
    """The same short storm against both: each serves every route, both audits pass, and the ratios are real numbers."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hongbao.bench.baselines.compare",
            "--mysql-dsn",
            mariadb.dsn,
            "--redis-url",
            redis_standalone.url,
            "--out",
            str(tmp_path),
            *SHRUNK,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = orjson.loads((tmp_path / "compare.json").read_bytes())
    ours: dict[str, Any] = orjson.loads((tmp_path / "hongbao" / "report.json").read_bytes())
    theirs: dict[str, Any] = orjson.loads((tmp_path / "baseline" / "report.json").read_bytes())
    assert result["hongbao_audit"]["ok"] and result["baseline_audit"]["ok"], (
        result["hongbao_audit"],
        result["baseline_audit"],
    )
    counts = result["baseline_audit"]["counts"]
    assert counts["receipts"] == counts["shares opened"] == theirs["clients"]["receipts_seen"] > 0
    assert counts["packets"] == theirs["operations"]["send"]["ok"] == ours["operations"]["send"]["ok"]  # same plan
    opens = result["operations"]["open"]
    assert opens["hongbao_rps"] > 0 and opens["baseline_rps"] > 0 and opens["rps_ratio"] > 0 and opens["p99_ratio"] > 0
    assert ours["push"] is None and theirs["push"] is None  # nobody online: the baseline has no push channel
    for report in (ours, theirs):
        assert set(code for codes in report["errors"].values() for code in codes) <= {"finished", "busy"}, report[
            "errors"
        ]
