"""The chaos run of ``make chaos``, bounded for ``make test``: 60 s of storm on the production
backend (2 workers, users online over WebSocket) while a worker is SIGKILLed every 6 s and at the
crash points inside pays and open batches, Redis is frozen for 3 s, restarted empty, restarted from
an older dump, and MariaDB is restarted; then, drained: the audit clean, the node still serving,
every expected push delivered or told (reset). The run starts its own MariaDB and Redis."""

from __future__ import annotations

import json
from pathlib import Path

from hongbao.bench.chaos.run import main


def test_money_and_service_survive_faults_that_come_together(tmp_path: Path) -> None:
    """Every fault of the schedule injected; 0 violations, every debit with its packet or refund,
    every receipt credited once, the node serving, no untold push."""
    status = main(["--duration", "60", "--rate", "8", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "chaos.json").read_text())
    names = {fault["name"] for fault in report["faults"]}
    assert names >= {"worker_kill", "redis_freeze", "redis_restart_empty", "redis_restart_from_dump", "mariadb_restart"}
    assert report["worker_restarts"] >= 8, report["worker_restarts"]
    assert report["money"]["audit"][-1] == "audit: 0 violations", report["money"]
    assert report["pushes"]["expected"] > 0 and report["pushes"]["untold"] == 0, report["pushes"]
    assert status == 0 and report["passed"], report["failed"]
