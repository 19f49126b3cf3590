"""The storm's picture: one PNG (matplotlib, Agg backend, no display needed) of a report from
``report.build``.

Top: the verdict banner (PASS green, FAIL red, NOT AUDITED amber; ``summary.banner``) and the
title (scenario, backend, workers, commit, date, target). Then six panels: 2xx answers per
second with the load period the rates are computed over shaded; p50 and p99 latency per bucket
and operation; push delivery by the time of its cause (expected vs delivered, and latency); what
every attempt got, with the expected outcomes (finished, expired, already opened) and the 429
admission rejections apart from the errors; the money flow the audit found, in fen; the numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from hongbao.bench.storm import summary
from hongbao.bench.storm.series import LOAD_OPS
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter

COLORS = {"send": "#c0392b", "pay": "#e67e22", "grab": "#2980b9", "open": "#27ae60"}
VERDICT = {"PASS": "#1e8449", "FAIL": "#c0392b", "NOT AUDITED": "#b9770e"}
# what an attempt got, in the order drawn: (label, colour)
OUTCOMES = (
    ("2xx", "#27ae60"),
    ("already opened (2xx)", "#a9dfbf"),
    ("finished (410)", "#bdc3c7"),
    ("expired (410)", "#95a5a6"),
    ("busy (429, retried)", "#f5b041"),
    ("errors", "#c0392b"),
)


def _gaps(values: list[float | None]) -> list[float]:
    return [float("nan") if v is None else v for v in values]


def _throughput(ax: Axes, report: dict[str, Any]) -> None:
    timeline, period = report["timeline"], report["load"]["period_s"]
    ax.axvspan(0, period, color="#f4f6f7", label=f"load period ({period} s)")
    for op in LOAD_OPS:
        ax.plot(timeline["second"], timeline[op], label=op, color=COLORS[op])
    ax.set(title="2xx answers per second (rates over the load period)", xlabel="seconds since start", ylabel="per s")
    ax.set_ylim(0, max((max(timeline[op], default=0) for op in LOAD_OPS), default=0) * 1.3 or 1)
    ax.legend(fontsize=8, ncol=5, loc="upper left")
    ax.grid(alpha=0.3)


def _latency(ax: Axes, report: dict[str, Any]) -> None:
    lines = report["latency_timeline"]
    for op in LOAD_OPS:
        if op in lines:
            ax.plot(lines["start_s"], _gaps(lines[op]["p50_ms"]), color=COLORS[op], label=op)
            ax.plot(lines["start_s"], _gaps(lines[op]["p99_ms"]), color=COLORS[op], ls="--", lw=1)
    ax.set(
        title=f"latency of 2xx answers per {lines['bucket_s']} s: p50 solid, p99 dashed (ms)",
        xlabel="seconds since start (when the request started)",
        yscale="log",
    )
    low, high = ax.get_ylim()
    ax.set_ylim(low, high * 8)  # room for the legend above the lines
    ax.legend(fontsize=8, ncol=4, loc="upper left")
    ax.grid(alpha=0.3)


def _push(ax: Axes, report: dict[str, Any]) -> None:
    push = report["push"]
    if push is None:
        ax.axis("off")
        ax.text(0.5, 0.5, "push: nobody online (online_p = 0)", ha="center", va="center")
        return
    lines = push["timeline"]
    width = lines["bucket_s"] * 0.8
    ax.bar(lines["start_s"], lines["expected"], width, align="edge", color="#f1948a", label="expected, missing")
    ax.bar(lines["start_s"], lines["delivered"], width, align="edge", color="#85c1e9", label="delivered")
    ax.set(
        title=f"push: {push['delivered']}/{push['expected']} expected events delivered, {push['missing']} missing",
        xlabel="seconds since start (when the cause was sent)",
        ylabel="events",
    )
    ax.set_ylim(0, max(lines["expected"], default=0) * 1.35 or 1)
    ax.legend(fontsize=8, loc="upper left", ncol=2)
    slow = ax.twinx()
    slow.plot(lines["start_s"], _gaps(lines["p50_ms"]), color="#1a5276", label="latency p50")
    slow.plot(lines["start_s"], _gaps(lines["p99_ms"]), color="#1a5276", ls="--", lw=1, label="latency p99")
    slow.set(yscale="log", ylabel="latency, ms")
    low, high = slow.get_ylim()
    slow.set_ylim(low, high * 8)
    slow.legend(fontsize=8, loc="upper right", ncol=2)


def _attempts(report: dict[str, Any], op: str) -> list[int]:
    expected = report["expected_outcomes"].get(op, {})
    errors = report["errors"].get(op, {})
    attempts = report["operations"][op]["attempts"]
    return [
        attempts - sum(errors.values()) - expected.get("already_opened", 0),
        expected.get("already_opened", 0),
        expected.get("finished", 0),
        expected.get("expired", 0),
        errors.get("busy", 0),
        sum(report["unexpected_errors"].get(op, {}).values()),
    ]


def _outcomes(ax: Axes, report: dict[str, Any]) -> None:
    ops = [op for op in LOAD_OPS if op in report["operations"]]
    rows = {op: _attempts(report, op) for op in ops}
    left = [0] * len(ops)
    for i, (label, color) in enumerate(OUTCOMES):
        values = [rows[op][i] for op in ops]
        ax.barh(ops, values, left=left, color=color, label=label)
        left = [a + b for a, b in zip(left, values, strict=True)]
    errors = summary.by_code(report["unexpected_errors"])
    ax.set(title=f"what each attempt got; errors: {errors}", xlabel="attempts")
    ax.set_ylim(len(ops) + 0.6, -0.5)  # top to bottom, with room for the legend below the last bar
    ax.legend(fontsize=8, loc="lower center", ncol=3)
    ax.grid(alpha=0.3, axis="x")


def _money(ax: Axes, report: dict[str, Any]) -> None:
    money = report["money"]
    if money is None:
        ax.axis("off")
        ax.text(0.5, 0.5, "money: no audit of the target's database", ha="center", va="center")
        return
    values = [money[key] for key, _ in summary.FLOW]
    bars = ax.barh(range(len(values)), values, color="#d4ac0d")
    ax.bar_label(bars, [f"{label}: {v:,}" for (_, label), v in zip(summary.FLOW, values, strict=True)], padding=3)
    ax.set(title="money flow the audit found (fen)", xlim=(0, max(values, default=0) * 1.7 or 1), yticks=[])
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
    ax.set_xlabel(summary.money_lines(report)[-1], fontsize=9)
    ax.invert_yaxis()
    ax.grid(alpha=0.3, axis="x")


def _numbers(ax: Axes, report: dict[str, Any]) -> None:
    ax.axis("off")
    load = report["load"]
    lines = [
        f"load period {load['period_s']} s of {load['seconds']} s, {load['processes']} load processes",
        f"{'op':<5} {'ok':>6} {'2xx/s':>7} {'peak/s':>6} {'p50 ms':>8} {'p99 ms':>8}",
    ]
    for op in LOAD_OPS:
        e = report["operations"].get(op)
        if e:
            lines.append(f"{op:<5} {e['ok']:>6} {e['rps']:>7} {e['peak_rps']:>6} {e['p50_ms']:>8} {e['p99_ms']:>8}")
    push = report["push"]
    if push is not None:
        lines.append(f"push  p50 {push['p50_ms']} ms, p99 {push['p99_ms']} ms, to {push['online_users']} users online")
    lines.append(f"expected: {summary.by_code(report['expected_outcomes'])}")
    lines.append(f"429 busy: {report['admission_rejections']}, errors: {summary.by_code(report['unexpected_errors'])}")
    settlement, audit = report["settlement"], report["audit"]
    lines.append(f"reconciler {'drained' if settlement['drained'] else 'NOT drained'} in {settlement['waited_s']} s")
    if audit is not None:
        lines.append(f"audit: {len(audit['violations'])} violations{'; ' + audit['error'] if audit['error'] else ''}")
        lines += [f"  {v}" for v in audit["violations"][:3]]
    ax.text(0.0, 1.0, "\n".join(lines), va="top", family="monospace", fontsize=10, wrap=True)


def write_png(report: dict[str, Any], path: Path) -> None:
    """Draw ``report`` (from ``report.build``) into ``path`` (its directory is created)."""
    fig = plt.figure(figsize=(16, 13))
    grid = fig.add_gridspec(3, 2, top=0.89, bottom=0.05, left=0.07, right=0.96, hspace=0.38, wspace=0.28)
    status = report["verdict"]["status"]
    fig.text(
        0.5,
        0.975,
        summary.banner(report),
        ha="center",
        va="top",
        fontsize=15,
        weight="bold",
        color="white",
        bbox={"boxstyle": "round,pad=0.4", "facecolor": VERDICT[status], "edgecolor": "none"},
    )
    fig.text(0.5, 0.925, f"{summary.title(report)} · target {report['target']}", ha="center", va="top", fontsize=11)
    panels = (_throughput, _latency, _push, _outcomes, _money, _numbers)
    for i, draw in enumerate(panels):
        draw(fig.add_subplot(grid[i // 2, i % 2]), report)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
