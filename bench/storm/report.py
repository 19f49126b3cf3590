"""The storm's report: numbers from the samples, and the JSON file (``table.py`` prints it,
``plot.py`` draws it).

Latency percentiles (nearest rank) are over the 2xx answers of each operation, in ms. Rates
(``rps``) are the 2xx answers started in the load period divided by its length
(``load.period_s``: from the start to the last answer to a send, ``series.py``; the scenario's
tail of late openers would dilute them), and ``peak_rps`` is the busiest whole second. The
whole span, to the last answer, is ``load.seconds``; the wall time, with the wait for late
pushes, is ``load.wall_seconds``.

Outcomes are counted per attempt. ``errors`` holds every non-2xx attempt by the answer's
``error.code`` (``timeout`` or the client exception's name when there was no answer).
``expected_outcomes`` are the answers a late or repeating member is meant to get: ``finished`` and
``expired`` (410), and ``already_opened`` (a 2xx grab or open giving back the first amount);
``busy`` (429) attempts are the admission rejections (retried after Retry-After, as our clients
do); ``unexpected_errors`` holds the rest, the real errors. ``money`` is where the audit found the
money, in fen (``hongbao.core.audit``). ``verdict`` is PASS when the audit is clean and found what
the storm paid, no repeated open disagreed and every expected push arrived (or its user was told
to reload); FAIL with the reasons otherwise; NOT AUDITED when nothing failed but no audit ran.
Push delivery (expected vs delivered, latency, timeline) is ``delivery.py``'s.
``unanswered`` counts the load's attempts that got no answer. The generator's own cost:
``load.lag_p99_ms`` (how late calls left against the plan) and ``load.generator_cores``, each
load process's CPU over the load in cores (CPU seconds / wall seconds; one process cannot pass 1.0).
"""

from __future__ import annotations

import datetime
import subprocess
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import orjson
from hongbao.bench.storm import series
from hongbao.bench.storm.delivery import push_report
from hongbao.bench.storm.load import Sample
from hongbao.bench.storm.runner import LoadResult
from hongbao.bench.storm.scenario import Scenario
from hongbao.bench.storm.settle import Settlement
from hongbao.bench.storm.stats import percentile
from hongbao.core.audit import AuditReport

OPS = ("topup", "group", "send", "pay", "grab", "open")
PERCENTILES = (("p50_ms", 50.0), ("p90_ms", 90.0), ("p99_ms", 99.0))
EXPECTED = ("finished", "expired", "already_opened")
BUSY = "busy"
MONEY = ("top-ups", "paid", "opened", "credited", "refunded", "active", "uncredited", "unpaid refunds", "balances")


def _operations(samples: list[Sample], counts: Counter[str], period_s: float) -> dict[str, Any]:
    latencies: dict[str, list[float]] = defaultdict(list)
    per_second: dict[str, Counter[int]] = defaultdict(Counter)
    attempts: Counter[str] = Counter()
    in_period: Counter[str] = Counter()
    for op, t, latency, status, _, _ in samples:
        attempts[op] += 1
        if 200 <= status < 300:
            latencies[op].append(latency * 1000.0)
            per_second[op][int(t)] += 1
            in_period[op] += t <= period_s
    out: dict[str, Any] = {}
    for op in OPS:
        if not attempts[op]:
            continue
        values = sorted(latencies[op])
        entry: dict[str, Any] = {
            "ok": counts[f"{op} ok"],
            "failed": counts[f"{op} failed"],
            "skipped": counts[f"{op} skipped"],
            "attempts": attempts[op],
            "rps": round(in_period[op] / period_s, 1) if period_s > 0 and op in series.LOAD_OPS else None,
            "peak_rps": max(per_second[op].values(), default=0),
        }
        entry.update({name: round(percentile(values, q), 2) for name, q in PERCENTILES})
        entry["max_ms"] = round(values[-1], 2) if values else 0.0
        out[op] = entry
    return out


def _outcomes(samples: list[Sample]) -> dict[str, dict[str, dict[str, int]]]:
    """``errors``, ``expected_outcomes`` and ``unexpected_errors`` of the module's docstring."""
    kinds: dict[str, dict[str, Counter[str]]] = {
        name: defaultdict(Counter) for name in ("errors", "expected_outcomes", "unexpected_errors")
    }
    for op, _, _, status, code, _ in samples:
        if not 200 <= status < 300:
            kinds["errors"][op][code] += 1
        if code in EXPECTED:
            kinds["expected_outcomes"][op][code] += 1
        elif code and code != BUSY:
            kinds["unexpected_errors"][op][code] += 1
    return {
        name: {op: dict(codes.most_common()) for op, codes in sorted(by_op.items())} for name, by_op in kinds.items()
    }


def git_commit() -> str | None:
    """The short hash of the git checkout this code runs from, None outside one (an installed
    wheel) or without git."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def build(
    result: LoadResult,
    settlement: Settlement,
    scenario: Scenario,
    url: str,
    *,
    backend: str = "",
    workers: int | None = None,
) -> dict[str, Any]:
    """The report as a JSON object (see the module's docstring for the definitions); ``backend``
    and ``workers`` describe the target ("" and None: not known)."""
    load = [s for s in result.samples if s[0] not in ("topup", "group")]
    lags = sorted(lag * 1000.0 for *_, lag in load)
    span = series.span(load)  # start to the last answer
    period = series.load_period(load)
    audit = settlement.audit
    paid = sum(1 for *_, paid_at in result.packets.values() if paid_at is not None)
    outcomes = _outcomes(result.samples)
    report: dict[str, Any] = {
        "target": url,
        "backend": backend or None,
        "workers": workers,
        "commit": git_commit(),
        "finished_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "scenario": scenario.as_json(),
        "load": {
            "seconds": round(span, 2),
            "period_s": round(period, 2),
            "started_at": round(result.started_at, 3),
            "wall_seconds": round(result.load_s, 2),
            "setup_seconds": round(result.setup_s, 2),
            "calls": result.calls,
            "processes": scenario.processes,
            "lag_p99_ms": round(percentile(lags, 99.0), 1),
            "lag_max_ms": round(lags[-1], 1) if lags else 0.0,
            "generator_cpu_s": round(sum(g["cpu_s"] for g in result.generator), 2),
            "generator_cores": [
                round(g["cpu_s"] / g["wall_s"], 2) if g["wall_s"] > 0 else 0.0 for g in result.generator
            ],
        },
        "operations": _operations(result.samples, result.counts, period),
        **outcomes,
        "admission_rejections": sum(1 for s in load if s[3] == 429),
        "unanswered": sum(1 for s in load if s[3] == 0),
        "timeline": series.throughput(load),
        "latency_timeline": series.latency(load),
        "clients": {
            "receipts_seen": len(result.receipts),
            "fen_seen": sum(r[2] for r in result.receipts),
            "disagreements": result.disagreements,
            "packets_paid": paid,
            "users_topped_up": result.counts["topup ok"],
        },
        "settlement": {
            "drained": settlement.drained,
            "credits_pending": settlement.pending,
            "waited_s": round(settlement.waited_s, 2),
            "note": settlement.note,
        },
        "audit": None if audit is None else audit_entry(audit, paid, result.counts["topup ok"]),
        "money": None if audit is None else _money(audit),
        "push": push_report(result),
    }
    report["verdict"] = verdict(report)
    return report


def _money(audit: AuditReport) -> dict[str, int] | None:
    """The audit's fen totals as ``{"top_ups_fen": ..., "paid_fen": ...}`` (``MONEY``), None when
    its counts hold none (an audit of another kind, such as the baseline's)."""
    if "paid fen" not in audit.counts:
        return None
    return {name.replace("-", "_").replace(" ", "_") + "_fen": int(audit.counts[f"{name} fen"]) for name in MONEY}


def verdict(report: dict[str, Any]) -> dict[str, Any]:
    """``{"status": "PASS" | "FAIL" | "NOT AUDITED", "reasons": [why it failed or was not audited]}``
    of a report from ``build`` (the module's docstring says when each holds)."""
    audit, push = report["audit"], report["push"]
    reasons = []
    if audit is not None and audit.get("error"):
        reasons.append("the audit did not find what the storm paid")
    elif audit is not None and audit["violations"]:
        reasons.append(f"{len(audit['violations'])} audit violations")
    if report["clients"]["disagreements"]:
        reasons.append(f"{report['clients']['disagreements']} repeated opens answered another amount")
    if not push_ok(report):
        reasons.append(f"{push['untold']} of {push['expected']} expected pushes missing")
    if reasons:
        return {"status": "FAIL", "reasons": reasons}
    if audit is None:
        return {"status": "NOT AUDITED", "reasons": ["the storm did not know the target's database"]}
    return {"status": "PASS", "reasons": []}


def audit_entry(audit: AuditReport, paid: int, topped_up: int) -> dict[str, Any]:
    """The report's ``audit`` section: ``{"ok", "violations", "counts", "source", "error"}`` of
    ``audit``, its ``error`` judged against the storm's ``paid`` packets and ``topped_up`` users
    (``audit_error``)."""
    return {
        "ok": audit.ok,
        "violations": audit.violations,
        "counts": dict(audit.counts),
        "source": audit.source,
        "error": audit_error(audit, paid, topped_up),
    }


def audit_error(audit: AuditReport, paid: int, topped_up: int) -> str:
    """What is wrong with an audit that missed what the storm did ("" when nothing is): it found
    no packets, or fewer than the ``paid`` packets the storm saw paid, or nothing at all (no
    packets, no ledger entries) after ``topped_up`` top-ups. Every packet paid in the storm is in
    the target's database, so each of these means another database was audited (or packets were lost)."""
    found = audit.counts["packets"]
    question = f"is --data-dir/--mysql-dsn the target's database? (audited: {audit.source or 'not said'})"
    if paid and not found:
        return f"the audit found no packets but the storm paid {paid}: {question}"
    if found < paid:
        return f"the audit found {found} packets but the storm paid {paid}: {question}"
    if audit.empty and topped_up:
        return (
            f"the audit found nothing (no packets, no ledger entries) after the storm topped up {topped_up} users: "
            f"{question}"
        )
    return ""


def audit_blind(report: dict[str, Any]) -> bool:
    """True when the audit ran but found no packets where the storm made some (or nothing at all):
    it read another database than the target's, so nothing was checked (``hongbao storm`` exits 2)."""
    audit = report["audit"]
    return audit is not None and bool(audit["error"]) and not audit["counts"].get("packets", 0)


def money_ok(report: dict[str, Any]) -> bool:
    """True when the audit ran clean (or was not asked for), found what the storm paid (no
    ``error``), and no repeated open disagreed."""
    audit = report["audit"]
    clean = audit is None or (bool(audit["ok"]) and not audit.get("error"))
    return clean and report["clients"]["disagreements"] == 0


def push_ok(report: dict[str, Any]) -> bool:
    """True when every expected push reached its online user, or the user was told ``reset``
    after it was due (docs/architecture.md sections 7 and 11), or nobody was online."""
    push = report["push"]
    return push is None or push["untold"] == 0


def write_json(report: dict[str, Any], path: Path) -> None:
    """Write the report as indented JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
