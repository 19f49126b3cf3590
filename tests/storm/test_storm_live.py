"""Short storms against a real ``hongbao serve`` subprocess: the audit, the report, record and replay."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from hongbao.bench.storm.record import read_record

from tests.server.conftest import Server

# smoke, shrunk to a few seconds: small groups plus a tail of larger ones, many duplicate clicks and re-sends
SHRUNK = [
    "--duration",
    "3",
    "--tail",
    "2",
    "--users",
    "80",
    "--groups",
    "16",
    "--rate",
    "12",
    "--processes",
    "2",
    "--set",
    "group_sizes=[[0.8, 3, 20], [0.2, 21, 60]]",
    "--set",
    "duplicate_p=0.2",
    "--set",
    "retry_p=0.2",
]


def storm(server: Server, out: Path | None, *extra: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``hongbao storm`` against ``server`` (its data dir: key and audit) in ``cwd``, reports
    in ``out`` (None: no ``--out``, the default directory)."""
    where = [] if out is None else ["--out", str(out)]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "hongbao.server.cli",
            "storm",
            "--target",
            server.url,
            "--data-dir",
            str(server.data_dir),
            *where,
            *SHRUNK,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
    )


def test_short_storm_audits_clean_and_reports(make_server: Callable[..., Server], tmp_path: Path) -> None:
    """A short storm audits clean, the receipts clients saw are the database's, pushes arrive, and
    the report and its printout have real values."""
    server = make_server()
    # drop_p 0.5: some of the ~24 online users (random ids) drop and resume; at the default 0.1 none
    # did in 0.9**24 = 8 % of runs
    done = storm(server, tmp_path / "out", "--record", str(tmp_path / "run.jsonl"), "--set", "drop_p=0.5")
    report: dict[str, Any] = orjson.loads((tmp_path / "out" / "report.json").read_bytes())
    push = report["push"]
    assert done.returncode == 0, done.stderr  # 3 would be: money clean, a push missing
    assert "audit: 0 violations" in done.stderr
    audit, ops, clients = report["audit"], report["operations"], report["clients"]
    assert audit["ok"] and audit["violations"] == []
    assert report["settlement"]["drained"] and report["settlement"]["credits_pending"] == 0
    assert audit["counts"]["receipts"] == clients["receipts_seen"] == audit["counts"]["ledger credit"] > 0
    assert (
        audit["counts"]["packets"] == ops["send"]["ok"] > 0 and ops["pay"]["ok"] >= ops["send"]["ok"]
    )  # pays re-sent too
    assert clients["disagreements"] == 0
    open_ = ops["open"]
    assert open_["ok"] > clients["receipts_seen"]  # duplicate clicks and re-sends answered 200 with the same amount
    assert 0 < open_["p50_ms"] <= open_["p90_ms"] <= open_["p99_ms"] <= open_["max_ms"] < 30_000
    assert open_["rps"] > 0 and sum(report["timeline"]["open"]) == open_["ok"]
    codes = {code for by_code in report["errors"].values() for code in by_code}
    assert codes <= {"finished", "busy"}, report["errors"]
    assert report["unexpected_errors"] == {} and report["verdict"] == {"status": "PASS", "reasons": []}
    assert report["expected_outcomes"]["open"]["already_opened"] > 0  # duplicate clicks: not errors
    assert 0 < report["load"]["period_s"] < report["load"]["seconds"]  # sends end before the late openers
    money = report["money"]
    assert money["opened_fen"] == money["credited_fen"] == clients["fen_seen"] > 0
    assert money["balances_fen"] + money["active_fen"] == money["top_ups_fen"] > 0
    assert (report["backend"], report["workers"]) == ("embedded", None)
    lines = done.stderr.splitlines()  # stderr is a pipe: whole progress lines, then the title on its own
    assert any(re.fullmatch(r"storm \d+/\d+ calls, \d+ s: send \d+ ok.*", line) for line in lines), done.stderr
    assert any(line.startswith("hongbao storm smoke · embedded backend · ") for line in lines), done.stderr
    assert "PASS: audit clean" in lines[-2] and "{'" not in done.stderr, done.stderr
    lines = (tmp_path / "run.jsonl").read_bytes().splitlines()
    assert len(lines) == report["load"]["calls"] + len([c for c in read_record(tmp_path / "run.jsonl") if c.packet < 0])
    png = (tmp_path / "out" / "report.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 20_000
    assert push["online_users"] > 0 and push["reconnects"] > 0 and push["client_failures"] == 0
    assert push["by_event"]["opened"]["expected"] > 0 and 0 < push["p50_ms"] <= push["p99_ms"] <= push["max_ms"]
    assert push["missing"] == 0, (
        f"{push['missing']} of {push['expected']} pushes missing, e.g. {push['missing_examples'][:2]}"
    )
    assert push["delivered"] == push["expected"] > 0


def test_replay_makes_the_same_requests(make_server: Callable[..., Server], tmp_path: Path) -> None:
    """A recorded storm replayed against a fresh server makes the same requests (ids aside) and
    audits clean; without --out its report goes to bench-results/storm-replay, not over a storm's."""
    first = storm(
        make_server(),
        tmp_path / "a",
        "--duration",
        "2",
        "--tail",
        "1",
        "--record",
        str(tmp_path / "a.jsonl"),
        "--set",
        "online_p=0",
    )
    assert first.returncode == 0, first.stderr
    again = storm(
        make_server(),
        None,
        "--replay",
        str(tmp_path / "a.jsonl"),
        "--record",
        str(tmp_path / "b.jsonl"),
        "--set",
        "online_p=0",
        cwd=tmp_path,
    )
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "bench-results" / "storm-replay" / "report.json").exists()  # a replay's own default directory
    assert not (tmp_path / "bench-results" / "storm").exists()

    def requests(path: Path) -> dict[str, tuple[Any, ...]]:
        return {c.seq: (c.at, c.op, c.user, c.method, c.path, c.body, c.needs, c.key, c.tag) for c in read_record(path)}

    recorded, replayed = requests(tmp_path / "a.jsonl"), requests(tmp_path / "b.jsonl")
    assert len(recorded) > 100 and recorded == replayed

    def groups(path: Path) -> set[str]:
        return {line["id"] for line in map(orjson.loads, path.read_bytes().splitlines()) if line["op"] == "group"}

    assert groups(tmp_path / "a.jsonl") and not groups(tmp_path / "a.jsonl") & groups(
        tmp_path / "b.jsonl"
    )  # fresh random ids
