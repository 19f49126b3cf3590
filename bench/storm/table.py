"""The storm's terminal summary (rich): the title, one row per operation, the outcomes apart
from the errors, clients, push, reconciler, the money flow and the audit, and last the verdict.
Every line is whole (nothing is printed but through ``console``), and no value is printed as a
Python literal."""

from __future__ import annotations

import sys
from typing import Any

from hongbao.bench.storm import summary
from rich.console import Console
from rich.markup import escape
from rich.table import Table

STYLE = {"PASS": "bold green", "FAIL": "bold red", "NOT AUDITED": "bold yellow"}


def stderr_console() -> Console:
    """The storm's console on stderr: on a terminal, its width; elsewhere (a log, a pipe) tables
    120 columns wide and every other line whole, never wrapped."""
    terminal = sys.stderr.isatty()
    return Console(stderr=True, width=None if terminal else 120, soft_wrap=not terminal)


def _operations(report: dict[str, Any]) -> Table:
    load = report["load"]
    table = Table(title=f"2xx/s over the {load['period_s']} s load period; {load['seconds']} s to the last answer")
    # "not 2xx": calls whose last answer was not a 2xx (``failed`` in the JSON), expected outcomes included
    for column in ("op", "ok", "not 2xx", "skipped", "2xx/s", "peak/s", "p50 ms", "p90 ms", "p99 ms", "max ms"):
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
    return table


def _push(push: dict[str, Any] | None) -> str:
    if push is None:
        return "push: nobody online (online_p = 0)"
    also = ", ".join(f"{event} {n}" for event, n in push["also_delivered"].items()) or "nothing"
    return (
        f"push: {push['online_users']} users online ({push['reconnects']} dropped and resumed), "
        f"{push['delivered']}/{push['expected']} expected events delivered, {push['missing']} missing "
        f"({push['missing'] - push['untold']} of them after a reset told the client to reload), "
        f"latency p50 {push['p50_ms']} ms p99 {push['p99_ms']} ms max {push['max_ms']} ms; "
        f"{push['duplicates']} duplicates dropped, {push['resets']} resets; also delivered: {also}"
    )


def print_table(report: dict[str, Any], console: Console) -> None:
    """Print the summary of ``report`` (from ``report.build``) on ``console``."""
    console.print(f"{summary.title(report)} · target {report['target']}", markup=False, highlight=False)
    console.print(_operations(report))
    errors = report["unexpected_errors"]
    console.print(f"expected outcomes: {summary.by_code(report['expected_outcomes'])}", markup=False)
    console.print(f"admission rejections (429 busy, retried): {report['admission_rejections']}")
    console.print(f"{'[red]errors[/red]' if errors else 'errors'}: {escape(summary.by_code(errors))}", highlight=False)
    clients, load = report["clients"], report["load"]
    console.print(
        f"clients: {clients['packets_paid']} packets paid, {clients['receipts_seen']} receipts seen, "
        f"{clients['fen_seen']} fen, "
        f"{clients['disagreements']} repeated opens disagreeing; generator lag p99 {load['lag_p99_ms']} ms, "
        f"load processes at {', '.join(f'{c:.2f}' for c in load['generator_cores'])} of a core"
    )
    console.print(_push(report["push"]), markup=False)
    settlement = report["settlement"]
    console.print(
        f"reconciler: {'drained' if settlement['drained'] else 'NOT drained'} after {settlement['waited_s']} s "
        f"(credits pending {settlement['credits_pending']}) {settlement['note']}".rstrip(),
        markup=False,
    )
    _audit(report, console)
    status = report["verdict"]["status"]
    console.print(summary.banner(report), style=STYLE[status], markup=False, highlight=False)


def _audit(report: dict[str, Any], console: Console) -> None:
    audit = report["audit"]
    if audit is None:
        console.print("audit: not run")
        return
    counts = audit["counts"]
    console.print(
        f"money: {counts.get('packets', 0)} packets, {counts.get('receipts', 0)} receipts, "
        f"{counts.get('ledger credit', 0)} credits, {counts.get('ledger refund', 0)} refunds, "
        f"in {audit.get('source') or 'the audited database'}",
        markup=False,
    )
    for line in summary.money_lines(report):
        console.print(f"  {line}", markup=False, highlight=False)
    for violation in audit["violations"]:
        console.print(f"[red]VIOLATION[/red] {escape(violation)}")
    if audit.get("error"):
        console.print(f"audit: [red]failed[/red]: {escape(audit['error'])}")
        return
    console.print(f"audit: {len(audit['violations'])} violations")
