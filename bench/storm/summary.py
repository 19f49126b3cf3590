"""The storm report's words, shared by the terminal table (``table.py``) and the picture
(``plot.py``): the title line, the verdict banner, outcome counts by code, and the money flow.
Every function takes a report from ``report.build`` and returns plain text (no markup)."""

from __future__ import annotations

from typing import Any

# the money flow, in order: (key in report["money"], label)
FLOW = (
    ("top_ups_fen", "topped up"),
    ("paid_fen", "paid into packets"),
    ("opened_fen", "opened"),
    ("credited_fen", "credited"),
    ("refunded_fen", "refunded"),
    ("active_fen", "still in active packets"),
    ("uncredited_fen", "opened, not yet credited"),
    ("balances_fen", "in balances"),
)


def title(report: dict[str, Any]) -> str:
    """``hongbao storm smoke · embedded backend · 1 worker · commit abc1234 · 2026-12-01 10:22 UTC``
    (the parts not known are left out)."""
    parts = [f"hongbao storm {report['scenario']['name']}"]
    if report.get("backend"):
        parts.append(f"{report['backend']} backend")
    workers = report.get("workers")
    if workers:
        parts.append(f"{workers} worker{'s' if workers != 1 else ''}")
    if report.get("commit"):
        parts.append(f"commit {report['commit']}")
    parts.append(report["finished_at"].replace("T", " ").removesuffix("+00:00")[:16] + " UTC")
    return " · ".join(parts)


def banner(report: dict[str, Any]) -> str:
    """``PASS: ...`` / ``FAIL: reasons`` / ``NOT AUDITED: ...``, with what the audit and the pushes found."""
    verdict, audit, push = report["verdict"], report["audit"], report["push"]
    if verdict["reasons"]:
        return f"{verdict['status']}: " + "; ".join(verdict["reasons"])
    counts = audit["counts"]
    pushes = "nobody online" if push is None else f"{push['delivered']}/{push['expected']} pushes delivered"
    return f"PASS: audit clean ({counts.get('packets', 0)} packets, {counts.get('receipts', 0)} receipts), {pushes}"


def by_code(outcomes: dict[str, dict[str, int]]) -> str:
    """``grab finished 1899, open finished 966`` from ``{op: {code: attempts}}`` (``none`` when empty)."""
    return ", ".join(f"{op} {code} {n}" for op, codes in outcomes.items() for code, n in codes.items()) or "none"


def money_lines(report: dict[str, Any]) -> list[str]:
    """One line per step of the money flow (``FLOW``), then the audit's conservation check;
    ``[]`` without the audit's money totals."""
    money = report["money"]
    if money is None:
        return []
    width = max(len(label) for _, label in FLOW)
    lines = [f"{label:<{width}}  {money[key]:>14,} fen" for key, label in FLOW]
    held = money["balances_fen"] + money["active_fen"] + money["uncredited_fen"] + money["unpaid_refunds_fen"]
    sign = "==" if held == money["top_ups_fen"] else "!="
    lines.append(f"balances + active + uncredited + unpaid refunds = {held:,} {sign} top-ups {money['top_ups_fen']:,}")
    return lines
