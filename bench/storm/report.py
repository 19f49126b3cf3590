"""The storm's report: numbers from the samples, the JSON file, and the terminal table.

Latency percentiles (nearest rank) are over the 2xx answers of each operation, in ms; rates
are 2xx answers per second from the start to the last answer (``load.seconds``; the wall time,
with the wait for late pushes, is ``load.wall_seconds``), and the peak is the busiest whole second.
Errors are counted per attempt by the answer's ``error.code`` (``timeout`` or the client
exception's name when there was no answer; ``unanswered`` counts those attempts of the load);
``busy`` (429) attempts are the admission rejections.
Push delivery (expected vs delivered, latency) is ``delivery.py``'s. The generator's own cost:
``load.lag_p99_ms`` (how late calls left against the plan) and ``load.generator_cores``, each
load process's CPU over the load in cores (CPU seconds / wall seconds; one process cannot pass 1.0).
"""

from __future__ import annotations

import datetime
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import orjson
from hongbao.bench.storm.delivery import push_report
from hongbao.bench.storm.load import Sample
from hongbao.bench.storm.runner import LoadResult
from hongbao.bench.storm.scenario import Scenario
from hongbao.bench.storm.settle import Settlement
from hongbao.bench.storm.stats import percentile
from hongbao.core.audit import AuditReport
from rich.console import Console
from rich.markup import escape
from rich.table import Table

OPS = ("topup", "group", "send", "pay", "grab", "open")
PERCENTILES = (("p50_ms", 50.0), ("p90_ms", 90.0), ("p99_ms", 99.0))


def _operations(samples: list[Sample], counts: Counter[str], load_s: float) -> dict[str, Any]:
    latencies: dict[str, list[float]] = defaultdict(list)
    per_second: dict[str, Counter[int]] = defaultdict(Counter)
    attempts: Counter[str] = Counter()
    for op, t, latency, status, _, _ in samples:
        attempts[op] += 1
        if 200 <= status < 300:
            latencies[op].append(latency * 1000.0)
            per_second[op][int(t)] += 1
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
            "rps": round(len(values) / load_s, 1) if load_s > 0 and op not in ("topup", "group") else None,
            "peak_rps": max(per_second[op].values(), default=0),
        }
        entry.update({name: round(percentile(values, q), 2) for name, q in PERCENTILES})
        entry["max_ms"] = round(values[-1], 2) if values else 0.0
        out[op] = entry
    return out


def _timeline(samples: list[Sample]) -> dict[str, list[int]]:
    seconds = int(max((t for _, t, _, _, _, _ in samples), default=0.0)) + 1
    lines: dict[str, list[int]] = {"second": list(range(seconds))}
    for op in ("send", "pay", "grab", "open"):
        lines[op] = [0] * seconds
    for op, t, _, status, _, _ in samples:
        if op in lines and 200 <= status < 300 and t >= 0:
            lines[op][int(t)] += 1
    return lines


def build(result: LoadResult, settlement: Settlement, scenario: Scenario, url: str) -> dict[str, Any]:
    """The report as a JSON object (see the module's docstring for the definitions)."""
    load = [s for s in result.samples if s[0] not in ("topup", "group")]
    errors: dict[str, Counter[str]] = defaultdict(Counter)
    for op, _, _, status, code, _ in result.samples:
        if not 200 <= status < 300:
            errors[op][code] += 1
    lags = sorted(lag * 1000.0 for *_, lag in load)
    span = max((t + latency for _, t, latency, _, _, _ in load), default=0.0)  # start to the last answer
    audit = settlement.audit
    paid = sum(1 for *_, paid_at in result.packets.values() if paid_at is not None)
    return {
        "target": url,
        "finished_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "scenario": scenario.as_json(),
        "load": {
            "seconds": round(span, 2),
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
        "operations": _operations(result.samples, result.counts, span),
        "errors": {op: dict(codes.most_common()) for op, codes in sorted(errors.items())},
        "admission_rejections": sum(1 for s in load if s[3] == 429),
        "unanswered": sum(1 for s in load if s[3] == 0),
        "timeline": _timeline(load),
        "clients": {
            "receipts_seen": len(result.receipts),
            "fen_seen": sum(r[2] for r in result.receipts),
            "disagreements": result.disagreements,
            "packets_paid": paid,
        },
        "settlement": {
            "drained": settlement.drained,
            "credits_pending": settlement.pending,
            "waited_s": round(settlement.waited_s, 2),
            "note": settlement.note,
        },
        "audit": None
        if audit is None
        else {
            "ok": audit.ok,
            "violations": audit.violations,
            "counts": dict(audit.counts),
            "source": audit.source,
            "error": audit_error(audit, paid, result.counts["topup ok"]),
        },
        "push": push_report(result),
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


def print_table(report: dict[str, Any], console: Console) -> None:
    """The terminal summary: one row per operation, then errors, clients, settlement, audit."""
    load = report["load"]
    table = Table(title=f"storm {report['scenario']['name']} against {report['target']}: {load['seconds']} s of load")
    for column in ("op", "ok", "failed", "skipped", "2xx/s", "peak/s", "p50 ms", "p90 ms", "p99 ms", "max ms"):
        table.add_column(column, justify="left" if column == "op" else "right")
    for op, e in report["operations"].items():
        table.add_row(
            op,
            str(e["ok"]),
            str(e["failed"]),
            str(e["skipped"]),
            "" if e["rps"] is None else f"{e['rps']:.1f}",
            str(e["peak_rps"]),
            f"{e['p50_ms']:.1f}",
            f"{e['p90_ms']:.1f}",
            f"{e['p99_ms']:.1f}",
            f"{e['max_ms']:.1f}",
        )
    console.print(table)
    errors = ", ".join(f"{op} {code} x{n}" for op, codes in report["errors"].items() for code, n in codes.items())
    console.print(f"errors: {errors or 'none'}; admission rejections (429): {report['admission_rejections']}")
    clients = report["clients"]
    console.print(
        f"clients: {clients['packets_paid']} packets paid, {clients['receipts_seen']} receipts seen, "
        f"{clients['fen_seen']} fen, "
        f"{clients['disagreements']} repeated opens disagreeing; generator lag p99 {load['lag_p99_ms']} ms, "
        f"CPU per load process {load['generator_cores']} cores"
    )
    push = report["push"]
    if push is None:
        console.print("push: nobody online (online_p = 0)")
    else:
        console.print(
            f"push: {push['online_users']} users online ({push['reconnects']} dropped and resumed), "
            f"{push['delivered']}/{push['expected']} expected events delivered, {push['missing']} missing, "
            f"latency p50 {push['p50_ms']} ms p99 {push['p99_ms']} ms max {push['max_ms']} ms; "
            f"{push['duplicates']} duplicates dropped, {push['resets']} resets, also {push['also_delivered']}"
        )
    settlement = report["settlement"]
    console.print(
        f"reconciler: {'drained' if settlement['drained'] else 'NOT drained'} after {settlement['waited_s']} s "
        f"(credits pending {settlement['credits_pending']}) {settlement['note']}"
    )
    audit = report["audit"]
    if audit is None:
        console.print("audit: not run")
        return
    counts = audit["counts"]
    console.print(
        f"money: {counts.get('packets', 0)} packets, {counts.get('receipts', 0)} receipts, "
        f"{counts.get('ledger credit', 0)} credits, {counts.get('ledger refund', 0)} refunds, "
        f"{counts.get('top-ups fen', 0)} fen topped up, in {audit.get('source') or 'the audited database'}",
        markup=False,
    )
    for violation in audit["violations"]:
        console.print(f"[red]VIOLATION[/red] {violation}")
    if audit.get("error"):
        console.print(f"audit: [red]failed[/red]: {escape(audit['error'])}")
        return
    console.print(f"audit: {len(audit['violations'])} violations")
