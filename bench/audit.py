"""The money audit of DESIGN.md section 11, over the embedded backend's database.

Checks, and lists every violation (the caller exits non-zero when there is one):
- per packet: opened shares + remaining_fen + refunded_fen == total_fen; every share >= 1 fen;
  receipts <= count and remaining_count == count - receipts; a finished packet has nothing left;
- money is only moved: sum(balances) + remaining_fen of active packets + receipts with no credit
  in the ledger yet + refunds recorded but with no refund in the ledger yet == sum(top-ups) (a
  receipt whose credit is in the ledger but not yet marked on the receipt, the moment between
  the two steps of a credit, is counted once);
- every balance equals the sum of its ledger entries; every send debit has a packet (active,
  finished, expired or refunded) of the same total;
- every credit matches its receipt's amount, every refund the packet's refunded fen; with
  ``drained`` (the reconciler has run): every receipt is credited and marked, every refund paid.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from hongbao.core.adapters.sqlite_schema import DAYS, packet_table, receipt_table
from hongbao.core.embedded import DB_FILE


@dataclass
class AuditReport:
    """What the audit counted and every violation it found (``ok`` when there is none)."""

    violations: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        """True when no invariant is broken."""
        return not self.violations

    def lines(self) -> list[str]:
        """Counts, then violations, then the last line ``audit: N violations``."""
        out = [f"{name}: {value}" for name, value in sorted(self.counts.items())]
        out += [f"VIOLATION {v}" for v in self.violations]
        out.append(f"audit: {len(self.violations)} violations")
        return out


def _tables(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    n_tables = int(conn.execute("SELECT value FROM t_meta WHERE key = 'n_tables'").fetchone()[0])
    return [(packet_table(t, d), receipt_table(t, d)) for t in range(n_tables) for d in DAYS]


def audit_sqlite(path: Path, *, drained: bool = True) -> AuditReport:
    """Audit the embedded database at ``path`` (a data directory or the .db file), read-only."""
    db = path / DB_FILE if path.is_dir() else path
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return _audit(conn, drained)
    finally:
        conn.close()


def _audit(conn: sqlite3.Connection, drained: bool) -> AuditReport:
    report = AuditReport()
    bad, counts = report.violations, report.counts
    conn.execute("BEGIN")  # one snapshot for every query
    ledger: dict[tuple[str, str], int] = {(k, r): a for k, r, a in conn.execute("SELECT kind, ref, amount_fen FROM t_ledger")}
    active_remaining = uncredited = unpaid_refunds = 0
    receipts: dict[str, int] = {}
    packets: dict[str, tuple[int, str]] = {}
    for ptable, rtable in _tables(conn):
        rows = conn.execute(
            f"SELECT p.order_id, p.total_fen, p.count, p.remaining_fen, p.remaining_count, p.refunded_fen, p.status, "
            f"COUNT(r.user_id), COALESCE(SUM(r.amount_fen), 0), COALESCE(MIN(r.amount_fen), 1) "
            f"FROM {ptable} p LEFT JOIN {rtable} r ON r.order_id = p.order_id GROUP BY p.order_id")
        for order_id, total, count, rem_fen, rem_count, refunded, status, n, opened, smallest in rows:
            counts["packets"] += 1
            counts[f"packets {status}"] += 1
            counts["receipts"] += n
            packets[order_id] = (total, status)
            if opened + rem_fen + refunded != total:
                bad.append(f"{order_id}: opened {opened} + remaining {rem_fen} + refunded {refunded} != total {total}")
            if smallest < 1:
                bad.append(f"{order_id}: a share of {smallest} fen")
            if n > count or rem_count != count - n:
                bad.append(f"{order_id}: {n} receipts, count {count}, remaining_count {rem_count}")
            if status == "finished" and (rem_fen, rem_count) != (0, 0) and refunded == 0:
                bad.append(f"{order_id}: finished with {rem_fen} fen / {rem_count} shares left")
            if status == "active":
                active_remaining += rem_fen
            paid_back = ledger.get(("refund", order_id))
            if status in ("expired", "refunded") and paid_back is None:
                unpaid_refunds += refunded  # recorded in the packet, not yet in the sender's balance
                if status == "refunded" or drained:
                    bad.append(f"{order_id}: refund of {refunded} fen recorded but not paid")
            elif paid_back is not None and paid_back != refunded:
                bad.append(f"{order_id}: refund paid {paid_back} fen, recorded {refunded}")
        for order_id, user_id, amount, credit_status in conn.execute(
                f"SELECT order_id, user_id, amount_fen, credit_status FROM {rtable}"):
            ref = f"{order_id}:{user_id}"
            receipts[ref] = amount
            credit = ledger.get(("credit", ref))
            if credit is None:
                uncredited += amount  # not yet in the receiver's balance
                if credit_status == "credited" or drained:
                    bad.append(f"receipt {ref} of {amount} fen: {credit_status}, but no credit in the ledger")
            elif credit != amount:
                bad.append(f"receipt {ref} of {amount} fen credited {credit} fen")
            elif credit_status != "credited" and drained:
                bad.append(f"receipt {ref} credited in the ledger but still marked {credit_status}")
    balances = dict(conn.execute("SELECT user_id, balance_fen FROM t_account").fetchall())
    ledger_sums = dict(conn.execute("SELECT user_id, SUM(amount_fen) FROM t_ledger GROUP BY user_id").fetchall())
    topups = sum(a for (k, _), a in ledger.items() if k == "topup")
    counts["top-ups fen"] = topups
    for user_id in set(balances) | set(ledger_sums):
        if balances.get(user_id, 0) != ledger_sums.get(user_id, 0):
            bad.append(f"{user_id}: balance {balances.get(user_id, 0)} != ledger sum {ledger_sums.get(user_id, 0)}")
    held = sum(balances.values()) + active_remaining + uncredited + unpaid_refunds
    if held != topups:
        bad.append(f"money made or lost: balances {sum(balances.values())} + active {active_remaining} + uncredited "
                   f"{uncredited} + unpaid refunds {unpaid_refunds} = {held} != top-ups {topups}")
    for (kind, ref), amount in ledger.items():
        counts[f"ledger {kind}"] += 1
        if kind == "send" and (ref not in packets or packets[ref][0] != -amount):
            bad.append(f"send debit {ref} of {-amount} fen has no packet of that total")
        elif kind == "credit" and ref not in receipts:
            bad.append(f"credit {ref} of {amount} fen has no receipt")
        elif kind == "refund" and (ref not in packets or packets[ref][1] not in ("refunded", "expired")):
            bad.append(f"refund {ref} has no refunded packet")
    conn.execute("ROLLBACK")
    return report
