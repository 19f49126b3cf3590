"""The storm's baseline (bench/baselines): FastAPI + uvicorn, a Redis Lua pre-split list and an
asynchronous MySQL write per receipt, served on real MariaDB and Redis and played by the storm."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from hongbao.bench.baselines.audit import audit_baseline
from hongbao.bench.http.run import free_port, terminate
from tests.integration.mariadb import MariaDb
from tests.integration.redis_servers import RedisTarget
from tests.storm.test_storm_live import SHRUNK

SECRET = "baseline-test-secret-of-32-bytes-or-more"


@pytest.fixture
def baseline(mariadb: MariaDb, redis_standalone: RedisTarget, tmp_path: Path) -> Iterator[str]:
    """The baseline on a free port over the session's MariaDB and (emptied) Redis; its URL."""
    redis_standalone.flush()
    port, log = free_port(), tmp_path / "baseline.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "hongbao.bench.baselines.serve", "--port", str(port), "--mysql-dsn", mariadb.dsn,
         "--redis-url", redis_standalone.url, "--jwt-secret", SECRET], stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    yield url
    assert terminate(process) in (0, -signal.SIGTERM), log.read_text()  # uvicorn re-raises the signal it handled
    assert "Traceback" not in log.read_text(), log.read_text()


def test_baseline_serves_the_storm_and_passes_its_audit(baseline: str, mariadb: MariaDb, redis_standalone: RedisTarget,
                                                         tmp_path: Path) -> None:
    """A short storm against the baseline: same routes answered, and its audit finds every receipt clients saw."""
    done = subprocess.run([sys.executable, "-m", "hongbao.server.cli", "storm", "--target", baseline, "--jwt-secret", SECRET,
                           "--out", str(tmp_path / "out"), *SHRUNK, "--set", "online_p=0"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = orjson.loads((tmp_path / "out" / "report.json").read_bytes())
    ops = report["operations"]
    assert report["audit"] is None and report["settlement"]["credits_pending"] is None  # not a hongbao server
    assert ops["open"]["ok"] > 0 and ops["send"]["ok"] > 0
    assert set(code for codes in report["errors"].values() for code in codes) <= {"finished"}, report["errors"]
    time.sleep(0.5)  # the receipts' background writes
    audit = asyncio.run(audit_baseline(mariadb.dsn, redis_standalone.url))
    assert audit.ok, audit.lines()
    assert audit.counts["receipts"] == audit.counts["shares opened"] == report["clients"]["receipts_seen"] > 0
    assert audit.counts["packets"] == ops["send"]["ok"]
