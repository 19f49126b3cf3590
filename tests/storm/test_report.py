"""The storm's report from known samples and books: the verdict banner, expected outcomes apart
from errors, rates over the load period, the money flow, and a terminal summary without Python literals."""

from __future__ import annotations

import io
import re
from collections import Counter
from pathlib import Path
from typing import Any

from hongbao.bench.storm import plot, report, summary, table
from hongbao.bench.storm.load import Sample
from hongbao.bench.storm.runner import LoadResult
from hongbao.bench.storm.scenario import load_scenario
from hongbao.bench.storm.settle import Settlement
from hongbao.core.audit import AuditReport, Books, check
from rich.console import Console

# sends every 0.5 s for 10 s; opens 5 a second while they last (to 9.4 s), then 1 a second for a 20 s tail
SENDS: list[Sample] = [("send", i / 2, 0.1, 200, "", 0.0) for i in range(20)]
OPENS: list[Sample] = [("open", i / 5, 0.01, 200, "", 0.0) for i in range(48)]
OPENS += [("open", 10.0 + i, 0.01, 200, "", 0.0) for i in range(20)]


def _books(balance_b: int = 200) -> AuditReport:
    """A's top-up of 1000 fen, a 300-fen packet of 2 shares opened and credited to B (200) and C (100)."""
    books = Books()
    books.add(
        [("p1", 300, 2, 0, 0, 0, "finished", 2, 300, 100)],
        [("p1", "B", 200, "credited"), ("p1", "C", 100, "credited")],
        [
            ("A", "topup", "t1", 1000),
            ("A", "send", "p1", -300),
            ("B", "credit", "p1:B", 200),
            ("C", "credit", "p1:C", 100),
        ],
        [("A", 700), ("B", balance_b), ("C", 100)],
    )
    return check(books, drained=True)


def _report(samples: list[Sample], audit: AuditReport | None) -> dict[str, Any]:
    result = LoadResult(samples=samples, counts=Counter({"topup ok": 1, "send ok": 1}))
    result.packets = {"p1": ["g1", 2, "A", 1.0]}
    return report.build(result, Settlement(True, 0, 0.1, audit), load_scenario("smoke"), "http://t", backend="embedded")


def _printed(summary_: dict[str, Any]) -> str:
    out = io.StringIO()
    table.print_table(summary_, Console(file=out, width=200))
    return out.getvalue()


def test_the_banner_says_fail_when_the_audit_has_violations(tmp_path: Path) -> None:
    """A balance the ledger does not explain: the verdict, banner, last printed line and picture say FAIL."""
    failed, clean, blind = _report(SENDS, _books(250)), _report(SENDS, _books()), _report(SENDS, None)
    assert failed["verdict"] == {
        "status": "FAIL",
        "reasons": [f"{len(failed['audit']['violations'])} audit violations"],
    }
    assert summary.banner(failed).startswith("FAIL: 2 audit violations")
    assert _printed(failed).rstrip().splitlines()[-1] == summary.banner(failed)
    assert clean["verdict"] == {"status": "PASS", "reasons": []}
    assert summary.banner(clean) == "PASS: audit clean (1 packets, 2 receipts), nobody online"
    assert blind["verdict"]["status"] == "NOT AUDITED"
    plot.write_png(failed, tmp_path / "report.png")
    assert (tmp_path / "report.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_expected_outcomes_are_not_counted_as_errors() -> None:
    """Finished, expired and already-opened answers are expected outcomes, 429 is busy, only the rest are errors."""
    answers: list[Sample] = [
        ("grab", 1.0, 0.01, 410, "finished", 0.0),
        ("grab", 1.0, 0.01, 410, "finished", 0.0),
        ("open", 1.0, 0.01, 410, "expired", 0.0),
        ("open", 1.0, 0.01, 200, "already_opened", 0.0),
        ("open", 1.0, 0.01, 429, "busy", 0.0),
        ("open", 1.0, 0.01, 0, "timeout", 0.0),
        ("pay", 1.0, 0.01, 503, "degraded", 0.0),
    ]
    built = _report(SENDS + answers, _books())
    assert built["expected_outcomes"] == {
        "grab": {"finished": 2},
        "open": {"expired": 1, "already_opened": 1},
    }
    assert built["unexpected_errors"] == {"open": {"timeout": 1}, "pay": {"degraded": 1}}
    assert built["errors"] == {
        "grab": {"finished": 2},
        "open": {"expired": 1, "busy": 1, "timeout": 1},
        "pay": {"degraded": 1},
    }
    assert built["admission_rejections"] == 1
    printed = _printed(built)
    assert "expected outcomes: grab finished 2, open expired 1, open already_opened 1" in printed
    assert "errors: open timeout 1, pay degraded 1" in printed


def test_rates_are_over_the_load_period() -> None:
    """Sends end at 9.6 s: rates divide the 2xx answers started by then by 9.6 s, not by the 29 s of the tail."""
    built = _report(SENDS + OPENS, _books())
    load, ops = built["load"], built["operations"]
    assert (load["period_s"], load["seconds"]) == (9.6, 29.01)
    assert ops["send"]["rps"] == round(20 / 9.6, 1) and ops["open"]["rps"] == 48 / 9.6
    assert ops["open"]["peak_rps"] == 5 and sum(built["timeline"]["open"]) == 68
    latency = built["latency_timeline"]
    assert latency["bucket_s"] == 1 and latency["open"]["p50_ms"][:2] == [10.0, 10.0]
    assert latency["send"]["p99_ms"][12] is None  # no send after 10 s: a gap, not a zero


def test_the_money_flow_comes_from_the_audit() -> None:
    """The money totals are the audit's fen, conserved, and printed as whole lines without Python literals."""
    built = _report(SENDS, _books())
    assert built["money"] == {
        "top_ups_fen": 1000,
        "paid_fen": 300,
        "opened_fen": 300,
        "credited_fen": 300,
        "refunded_fen": 0,
        "active_fen": 0,
        "uncredited_fen": 0,
        "unpaid_refunds_fen": 0,
        "balances_fen": 1000,
    }
    assert summary.money_lines(built)[-1] == "balances + active + uncredited + unpaid refunds = 1,000 == top-ups 1,000"
    printed = _printed(built)
    assert re.search(r"^  opened +300 fen$", printed, re.M) and re.search(r"^  topped up +1,000 fen$", printed, re.M)
    assert "{" not in printed and "['" not in printed


def test_missing_pushes_say_how_many_came_after_a_reset() -> None:
    """Of 4 missing events, 3 came after a reset that told their client to reload: the line says so."""
    push = {
        "online_users": 3,
        "reconnects": 1,
        "delivered": 6,
        "expected": 10,
        "missing": 4,
        "untold": 1,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "max_ms": 3.0,
        "duplicates": 0,
        "resets": 2,
        "also_delivered": {},
    }
    assert "6/10 expected events delivered, 4 missing (3 of them after a reset told the client to reload)," in (
        table._push(push)
    )
