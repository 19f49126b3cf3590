"""The money audit (hongbao.core.audit) over the production MySQL/MariaDB shards, cold databases
included: each database's books read in one consistent snapshot, read-only."""

from __future__ import annotations

from collections.abc import Sequence

import asyncmy
from hongbao.core.adapters.mysql.db import connect_args
from hongbao.core.adapters.mysql.schema import day_tables
from hongbao.core.adapters.sql import PACKET_AUDIT, RECEIPT_AUDIT
from hongbao.core.audit import AuditReport, Books, check
from hongbao.core.redact import redact
from hongbao.core.sharding import Layout, parse_dsn


async def audit_mysql(dsn: str | Sequence[str], layout: Layout, *, drained: bool = True) -> AuditReport:
    """Audit the MySQL/MariaDB shards of ``layout`` on ``dsn`` (cold databases included), read-only;
    several DSNs (a fleet's regions, docs/architecture.md section 9: each region's packets and
    receipts, the home region's accounts and ledger) are audited as one set of books, one
    conservation law over them all (a DSN given twice is read once).

    Each database is read in one consistent snapshot; the databases are read one after the
    other, so audit a quiet system (after a storm, as the tests do)."""
    dsns = list(dict.fromkeys([dsn] if isinstance(dsn, str) else dsn))
    books = Books()
    for one in dsns:
        await _read(one, layout, books)
    report = check(books, drained=drained)
    report.source = " + ".join(mysql_source(one, layout) for one in dsns)
    return report


async def _read(dsn: str, layout: Layout, books: Books) -> None:
    """Add the books of ``layout``'s databases on ``dsn`` to ``books``."""
    servers = parse_dsn(dsn)
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


def mysql_source(dsn: str, layout: Layout) -> str:
    """The shards of ``layout`` on ``dsn`` as the audit names them, each DSN as given with its
    password masked (``redact``): ``MySQL mysql://user:***@host:port[, ...], databases
    db_00..db_03 x 4 tables``. Raises ValueError for a malformed DSN."""
    parse_dsn(dsn)
    servers = ", ".join(redact(part.strip()) for part in dsn.split(","))
    first, last = layout.db_name(0), layout.db_name(layout.n_dbs - 1)
    databases = f"database {first}" if layout.n_dbs == 1 else f"databases {first}..{last}"
    return f"MySQL {servers}, {databases} x {layout.n_tables} tables"
