"""The storm's picture: one PNG (matplotlib, Agg backend, no display needed) with throughput
over time, latency percentiles per operation and of push delivery, errors by code, and the
money and push summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {"send": "#c0392b", "pay": "#e67e22", "grab": "#2980b9", "open": "#27ae60"}


def _summary(report: dict[str, Any]) -> str:
    audit = report["audit"]
    lines = [
        f"scenario {report['scenario']['name']}, {report['load']['seconds']} s, "
        f"{report['load']['processes']} load processes"
    ]
    for op in ("send", "grab", "open"):
        e = report["operations"].get(op)
        if e:
            lines.append(f"{op}: {e['ok']} ok, {e['rps']}/s, p50 {e['p50_ms']} ms, p99 {e['p99_ms']} ms")
    lines.append(f"admission rejections (429): {report['admission_rejections']}")
    if audit is None:
        lines.append("audit: not run")
    else:
        c = audit["counts"]
        lines.append(
            f"{c.get('packets', 0)} packets, {c.get('receipts', 0)} receipts, "
            f"{c.get('ledger credit', 0)} credits, {c.get('ledger refund', 0)} refunds"
        )
        paid = report["clients"].get("packets_paid", 0)
        if audit.get("error"):  # the wrong database: not "0 violations"
            lines.append(f"audit FAILED: it found {c.get('packets', 0)} packets, the storm paid {paid}")
        else:
            lines.append(f"audit: {len(audit['violations'])} violations")
    push = report["push"]
    if push is None:
        lines.append("push: nobody online")
    else:
        lines.append(f"push: {push['delivered']}/{push['expected']} delivered to {push['online_users']} online users,")
        lines.append(f"  {push['missing']} missing, p50 {push['p50_ms']} ms, p99 {push['p99_ms']} ms")
    return "\n".join(lines)


def write_png(report: dict[str, Any], path: Path) -> None:
    """Draw ``report`` (from ``report.build``) into ``path``."""
    fig, ((rate, lat), (err, text)) = plt.subplots(2, 2, figsize=(13, 8.5))
    fig.suptitle(f"hongbao storm: {report['scenario']['name']} against {report['target']}")
    timeline = report["timeline"]
    for op in ("send", "pay", "grab", "open"):
        rate.plot(timeline["second"], timeline[op], label=op, color=COLORS[op])
    rate.set(title="2xx answers per second", xlabel="seconds since start", ylabel="per second")
    rate.legend()
    rate.grid(alpha=0.3)
    latencies = {op: report["operations"][op] for op in ("send", "pay", "grab", "open") if op in report["operations"]}
    if report["push"] is not None:
        latencies["push"] = report["push"]
    width = 0.2
    for i, key in enumerate(("p50_ms", "p90_ms", "p99_ms", "max_ms")):
        values = [max(entry[key], 1e-3) for entry in latencies.values()]
        lat.bar([x + (i - 1.5) * width for x in range(len(values))], values, width, label=key.removesuffix("_ms"))
    lat.set_xticks(range(len(latencies)), list(latencies))
    lat.set(title="latency of 2xx answers and push deliveries (ms, log scale)", yscale="log")
    lat.legend()
    lat.grid(alpha=0.3, axis="y")
    bars = sorted(
        ((f"{op} {code}", n) for op, codes in report["errors"].items() for code, n in codes.items()),
        key=lambda item: item[1],
    )
    if bars:
        err.barh([name for name, _ in bars], [n for _, n in bars], color="#7f8c8d")
    err.set(title=f"errors by code (429 busy: {report['admission_rejections']})", xlabel="attempts")
    text.axis("off")
    text.text(0.0, 1.0, _summary(report), va="top", family="monospace", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
