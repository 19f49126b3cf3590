"""The money audit (hongbao.core.audit) over the embedded backend's SQLite file: its books read in
one snapshot, read-only."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hongbao.core.adapters.sql import DAYS, PACKET_AUDIT, RECEIPT_AUDIT, packet_table, receipt_table
from hongbao.core.adapters.sqlite.db import DB_FILE
from hongbao.core.audit import AuditReport, Books, check


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
