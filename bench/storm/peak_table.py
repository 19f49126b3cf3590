"""The peak report on the terminal: latency per rung, cost per rung, then the knees and notes
(from ``peak.json``'s content, ``peak.summarize``)."""

from __future__ import annotations

from typing import Any

from hongbao.bench.storm.meter import OPS
from rich.console import Console
from rich.markup import escape
from rich.table import Table


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def _p50_p99(entry: dict[str, Any] | None) -> str:
    return "-" if not entry or not entry.get("ok") else f"{_ms(entry['p50_ms'])}/{_ms(entry['p99_ms'])}"


def latency_table(result: dict[str, Any]) -> Table:
    """One row per rung: p50/p99 per operation (ms), opens/s, what failed, and why it does not hold."""
    table = Table(title="peak: latency per rung (p50/p99 ms over 2xx answers)")
    columns = (
        "system",
        "sends/s",
        "holds",
        *OPS,
        "opens/s",
        "timeouts",
        "429",
        "audit",
        "lag p99",
        "push p99",
        "why not",
    )
    for column in columns:
        table.add_column(column, justify="left" if column in ("system", "holds", "why not") else "right")
    for system, entry in result["systems"].items():
        for rung in entry["rungs"]:
            ops, push = rung["operations"], rung["push"]
            table.add_row(
                system,
                f"{rung['rate']:g}",
                "yes" if rung["holds"] else "[red]no[/red]",
                *(_p50_p99(ops.get(op)) for op in OPS),
                "-" if not ops.get("open") else f"{ops['open']['rps']:g}",
                str(rung["timeouts"] + rung["unanswered"]),
                str(rung["busy"]),
                "-" if rung["error"] else "clean" if rung["audit_clean"] else "[red]DIRTY[/red]",
                _ms(rung["lag_p99_ms"]),
                "-" if push is None else f"{_ms(push['p99_ms'])} ({push['missing']} missing)",
                escape("; ".join(rung["reasons"])),
            )
    return table


def cost_table(result: dict[str, Any]) -> Table:
    """One row per rung: the servers' CPU per request and per open (ms), and the generator's use."""
    table = Table(title="peak: CPU per rung (ms of CPU; per open = the whole storm's CPU / opens answered)")
    columns = (
        "system",
        "sends/s",
        "server/req",
        "requests send/pay/grab/open",
        "server/open",
        "MariaDB/open",
        "Redis/open",
        "generator/open",
        "generator cores",
        "load avg",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "system" else "right")
    for system, entry in result["systems"].items():
        for rung in entry["rungs"]:
            cpu = rung["cpu"]
            per_open = cpu.get("ms_per_open", {})
            table.add_row(
                system,
                f"{rung['rate']:g}",
                _ms(cpu.get("server_ms_per_request")),
                "/".join(str(cpu.get("requests", {}).get(op, 0)) for op in OPS),
                *(_ms(per_open.get(role)) for role in ("server", "mariadb", "redis", "generator")),
                " ".join(f"{c:g}" for c in rung["generator_cores"]) or "-",
                f"{rung['loadavg']:.2f}",
            )
    return table


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:g}/s"


def _held(entry: dict[str, Any], rate: float | None) -> str:
    """' held H of N' for ``rate``'s plays in a system's ``verdicts`` ("" for no rate)."""
    counts = next((v for v in entry["verdicts"] if v["rate"] == rate), None)
    return "" if counts is None else f" held {counts['held']} of {counts['plays']}"


def _bounds(bounds: list[float | None] | None) -> str:
    if bounds is None:
        return "no bounds"
    low, high = ("?" if b is None else f"{b:g}" for b in bounds)
    return f"{low} to {high}"


def print_peak(result: dict[str, Any], console: Console) -> None:
    """Both tables, each system's knee and the rate above it that failed, the knee ratios with
    their bounds, and the notes."""
    console.print(latency_table(result))
    console.print(cost_table(result))
    knees = ", ".join(
        f"{system} {_rate(e['knee'])}{_held(e, e['knee'])} (fails {_rate(e['failed_at'])}{_held(e, e['failed_at'])})"
        for system, e in result["systems"].items()
    )
    console.print(f"knee (highest rate that holds; lowest that fails; plays that held): {knees}")
    ratios = ", ".join(
        f"{mode} {value} ({_bounds(result['knee_ratio_bounds'][mode])})" for mode, value in result["knee_ratio"].items()
    )
    console.print(f"knee ratio hongbao / baseline (bounds from the failing rates): {ratios}")
    for note in result["notes"]:
        console.print(f"note: {escape(note)}")
    console.print(f"audits: {'all clean' if result['audits_clean'] else '[red]NOT all clean[/red]'}")
