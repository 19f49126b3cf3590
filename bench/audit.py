"""The money audit of DESIGN.md section 11, over the embedded backend's database
(``audit_sqlite``) or the production MySQL/MariaDB shards (``audit_mysql``): each collects the
same rows (``Books``) and one ``check`` judges them.

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
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncmy
from hongbao.core.adapters.mysql_db import Layout, connect_args, parse_dsn
from hongbao.core.adapters.mysql_schema import day_tables
from hongbao.core.adapters.sqlite_schema import DAYS, packet_table, receipt_table
from hongbao.core.embedded import DB_FILE

#: the per-packet row of the audit: order_id, total, count, remaining_fen, remaining_count,
#: refunded_fen, status, receipts, opened fen, smallest share (1 when there is none).
PACKET_AUDIT = (
    "SELECT p.order_id, p.total_fen, p.count, p.remaining_fen, p.remaining_count, p.refunded_fen, p.status, "
    "COUNT(r.user_id), COALESCE(SUM(r.amount_fen), 0), COALESCE(MIN(r.amount_fen), 1) "
    "FROM {ptable} p LEFT JOIN {rtable} r ON r.order_id = p.order_id GROUP BY p.order_id"
)
RECEIPT_AUDIT = "SELECT order_id, user_id, amount_fen, credit_status FROM {rtable}"


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


def _tables(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    n_tables = int(conn.execute("SELECT value FROM t_meta WHERE key = 'n_tables'").fetchone()[0])
    return [(packet_table(t, d), receipt_table(t, d)) for t in range(n_tables) for d in DAYS]


def audit_sqlite(path: Path, *, drained: bool = True) -> AuditReport:
    """Audit the embedded database at ``path`` (a data directory or the .db file), read-only; a
    file without hongbao's tables (zero bytes, say) has nothing to audit (``empty``). Raises
    sqlite3.Error when the file cannot be opened (it does not exist...)."""
    db = path / DB_FILE if path.is_dir() else path
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    books = Books()
    try:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 't_meta'").fetchone() is None:
            return AuditReport(source=f"SQLite {db}")
        conn.execute("BEGIN")  # one snapshot for every query
        for ptable, rtable in _tables(conn):
            books.add(
                conn.execute(PACKET_AUDIT.format(ptable=ptable, rtable=rtable)),
                conn.execute(RECEIPT_AUDIT.format(rtable=rtable)),
                (),
                (),
            )
        books.add(
            (),
            (),
            conn.execute("SELECT user_id, kind, ref, amount_fen FROM t_ledger"),
            conn.execute("SELECT user_id, balance_fen FROM t_account"),
        )
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    report = check(books, drained=drained)
    report.source = f"SQLite {db}"
    return report


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


async def audit_mysql(dsn: str, layout: Layout, *, drained: bool = True) -> AuditReport:
    """Audit the MySQL/MariaDB shards of ``layout`` on ``dsn`` (cold databases included), read-only.

    Each database is read in one consistent snapshot; the databases are read one after the
    other, so audit a quiet system (after a storm, as the tests do)."""
    servers = parse_dsn(dsn)
    books = Books()
    for db in range(layout.n_dbs):
        conn = await asyncmy.connect(database=layout.db_name(db), **connect_args(servers[db % len(servers)]))
        try:
            async with conn.cursor() as cur:
                await cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                await cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                await cur.execute(
                    "SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema IN (%s, %s)",
                    (layout.db_name(db), layout.cold_name(db)),
                )
                present = {(str(s), str(t)) for s, t in await cur.fetchall()}
                pairs = [
                    (f"`{schema}`.{p}", f"`{schema}`.{r}")
                    for schema in (layout.db_name(db), layout.cold_name(db))
                    for p, r in day_tables(layout)
                    if (schema, p) in present
                ]
                rows = []
                for template in (PACKET_AUDIT, RECEIPT_AUDIT):
                    await cur.execute(" UNION ALL ".join(f"({template.format(ptable=p, rtable=r)})" for p, r in pairs))
                    rows.append(await cur.fetchall())
                by_user = range(layout.n_tables)
                await cur.execute(
                    " UNION ALL ".join(f"(SELECT user_id, kind, ref, amount_fen FROM t_ledger_{t:02})" for t in by_user)
                )
                ledger = await cur.fetchall()
                await cur.execute(
                    " UNION ALL ".join(f"(SELECT user_id, balance_fen FROM t_account_{t:02})" for t in by_user)
                )
                books.add(rows[0], rows[1], ledger, await cur.fetchall())
                await conn.rollback()
        finally:
            conn.close()
    report = check(books, drained=drained)
    report.source = mysql_source(dsn, layout)
    return report


def mysql_source(dsn: str, layout: Layout) -> str:
    """The shards of ``layout`` on ``dsn`` as the audit names them, the password masked:
    ``MySQL mysql://user:***@host:port[, ...], databases db_00..db_03 x 4 tables``. Raises
    ValueError for a malformed DSN."""
    servers = ", ".join(
        f"mysql://{s['user']}{':***' if s['password'] else ''}@{s['host']}:{s['port']}" for s in parse_dsn(dsn)
    )
    first, last = layout.db_name(0), layout.db_name(layout.n_dbs - 1)
    databases = f"database {first}" if layout.n_dbs == 1 else f"databases {first}..{last}"
    return f"MySQL {servers}, {databases} x {layout.n_tables} tables"
