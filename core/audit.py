"""The money audit of docs/architecture.md section 11: the rows it judges (``Books``, read by the adapters:
hongbao.core.adapters.sqlite.audit over the embedded database, hongbao.core.adapters.mysql.audit
over the production shards), one ``check`` that judges them, and its ``AuditReport``.

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

Besides the row counts, ``counts`` holds where the money is, in fen: ``top-ups fen``, ``paid fen``
(send debits), ``opened fen`` (receipts), ``credited fen`` and ``refunded fen`` (ledger entries),
``active fen`` (remaining in active packets), ``uncredited fen``, ``unpaid refunds fen`` and
``balances fen``; the conservation check above is ``balances + active + uncredited + unpaid refunds
== top-ups``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class AuditReport:
    """What the audit counted and every violation it found (``ok`` when there is none), and the
    database it read (``source``: ``SQLite PATH`` or ``mysql_source``'s text; "" when not said)."""

    violations: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    source: str = ""

    @property
    def ok(self) -> bool:
        """True when no invariant is broken."""
        return not self.violations

    @property
    def empty(self) -> bool:
        """True when the database held nothing to audit: no packets and no ledger entries (the
        wrong database, or a server that never served; ``hongbao audit`` exits 2 on it)."""
        return not self.counts["packets"] and not any(name.startswith("ledger ") for name in self.counts)

    def lines(self) -> list[str]:
        """``audited: SOURCE`` (when known), counts, then violations, then the last line ``audit: N violations``."""
        out = [f"audited: {self.source}"] if self.source else []
        out += [f"{name}: {value}" for name, value in sorted(self.counts.items())]
        out += [f"VIOLATION {v}" for v in self.violations]
        out.append(f"audit: {len(self.violations)} violations")
        return out


@dataclass
class Books:
    """Every row the audit judges: packets (PACKET_AUDIT rows), receipts (order_id, user_id,
    amount_fen, credit_status), ledger entries (user_id, kind, ref, amount_fen) and balances."""

    packets: list[tuple[Any, ...]] = field(default_factory=list)
    receipts: list[tuple[Any, ...]] = field(default_factory=list)
    ledger: list[tuple[Any, ...]] = field(default_factory=list)
    balances: dict[str, int] = field(default_factory=dict)

    def add(
        self,
        packets: Iterable[tuple[Any, ...]],
        receipts: Iterable[tuple[Any, ...]],
        ledger: Iterable[tuple[Any, ...]],
        balances: Iterable[tuple[Any, ...]],
    ) -> None:
        """Append the rows of one database (or shard)."""
        self.packets += packets
        self.receipts += receipts
        self.ledger += ledger
        self.balances.update((str(u), int(b)) for u, b in balances)


def check(books: Books, *, drained: bool) -> AuditReport:
    """Judge ``books`` against the invariants (see the module docstring)."""
    report = AuditReport()
    bad, counts = report.violations, report.counts
    ledger: dict[tuple[str, str], int] = {(k, r): a for _, k, r, a in books.ledger if k != "topup"}
    active_remaining = uncredited = unpaid_refunds = 0
    receipts: dict[str, int] = {}
    packets: dict[str, tuple[int, str]] = {}
    for order_id, total, count, rem_fen, rem_count, refunded, status, n, opened, smallest in books.packets:
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
    for order_id, user_id, amount, credit_status in books.receipts:
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
    ledger_sums: Counter[str] = Counter()
    for user_id, kind, _, amount in books.ledger:
        ledger_sums[user_id] += amount
        counts[f"ledger {kind}"] += 1
    topups = sum(a for _, k, _, a in books.ledger if k == "topup")
    counts["top-ups fen"] = topups
    balances = books.balances
    _money(counts, books, active_remaining, uncredited, unpaid_refunds)
    for user_id in set(balances) | set(ledger_sums):
        if balances.get(user_id, 0) != ledger_sums.get(user_id, 0):
            bad.append(f"{user_id}: balance {balances.get(user_id, 0)} != ledger sum {ledger_sums.get(user_id, 0)}")
    held = sum(balances.values()) + active_remaining + uncredited + unpaid_refunds
    if held != topups:
        bad.append(
            f"money made or lost: balances {sum(balances.values())} + active {active_remaining} + uncredited "
            f"{uncredited} + unpaid refunds {unpaid_refunds} = {held} != top-ups {topups}"
        )
    for (kind, ref), amount in ledger.items():
        if kind == "send" and (ref not in packets or packets[ref][0] != -amount):
            bad.append(f"send debit {ref} of {-amount} fen has no packet of that total")
        elif kind == "credit" and ref not in receipts:
            bad.append(f"credit {ref} of {amount} fen has no receipt")
        elif kind == "refund" and (ref not in packets or packets[ref][1] not in ("refunded", "expired")):
            bad.append(f"refund {ref} has no refunded packet")
    return report


def _money(counts: Counter[str], books: Books, active: int, uncredited: int, unpaid_refunds: int) -> None:
    """Add the fen totals of the module's docstring to ``counts``."""
    by_kind: Counter[str] = Counter()
    for _, kind, _, amount in books.ledger:
        by_kind[kind] += amount
    counts["paid fen"] = -by_kind["send"]
    counts["opened fen"] = sum(amount for _, _, amount, _ in books.receipts)
    counts["credited fen"] = by_kind["credit"]
    counts["refunded fen"] = by_kind["refund"]
    counts["active fen"] = active
    counts["uncredited fen"] = uncredited
    counts["unpaid refunds fen"] = unpaid_refunds
    counts["balances fen"] = sum(books.balances.values())
