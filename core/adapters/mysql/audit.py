"""The money audit (hongbao.core.audit) over the production MySQL/MariaDB shards, cold databases
included: each server's databases read in one consistent snapshot, read-only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncmy
from asyncmy.cursors import Cursor
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

    The databases of one server are read in one InnoDB snapshot (``START TRANSACTION WITH
    CONSISTENT SNAPSHOT`` is server-wide), so a credit whose ledger row and receipt live on two
    databases of that server is seen whole or not yet, and a busy server audits clean. The
    snapshots of several servers start one right after the other, not at one instant: a write
    landing between them can still be seen half, so audit a quiet fleet (as the tests do)."""
    dsns = list(dict.fromkeys([dsn] if isinstance(dsn, str) else dsn))
    books = Books()
    servers = [(server, dbs) for one in dsns for server, dbs in _by_server(one, layout)]
    conns = [await asyncmy.connect(**connect_args(server)) for server, _ in servers]
    try:
        cursors = [conn.cursor() for conn in conns]
        for cur in cursors:
            await cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        for cur in cursors:
            await cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        for cur, (_, dbs) in zip(cursors, servers, strict=True):
            for db in dbs:
                await _read(cur, layout, db, books)
        for conn in conns:
            await conn.rollback()
    finally:
        for conn in conns:
            conn.close()
    report = check(books, drained=drained)
    report.source = " + ".join(mysql_source(one, layout) for one in dsns)
    return report


def _by_server(dsn: str, layout: Layout) -> list[tuple[dict[str, Any], list[int]]]:
    """The servers of ``dsn``, each with the shard numbers of ``layout`` it holds (shard ``db`` on
    server ``db % servers``, as ``MysqlShards`` places them)."""
    servers = parse_dsn(dsn)
    return [(server, list(range(i, layout.n_dbs, len(servers)))) for i, server in enumerate(servers)]


async def _read(cur: Cursor, layout: Layout, db: int, books: Books) -> None:
    """Add the books of shard ``db`` (its cold database too) to ``books``, inside ``cur``'s snapshot."""
    schemas = (layout.db_name(db), layout.cold_name(db))
    await cur.execute(
        "SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema IN (%s, %s)", schemas
    )
    present = {(str(s), str(t)) for s, t in await cur.fetchall()}
    pairs = [
        (f"`{schema}`.{p}", f"`{schema}`.{r}")
        for schema in schemas
        for p, r in day_tables(layout)
        if (schema, p) in present
    ]
    rows = []
    for template in (PACKET_AUDIT, RECEIPT_AUDIT):
        await cur.execute(" UNION ALL ".join(f"({template.format(ptable=p, rtable=r)})" for p, r in pairs))
        rows.append(await cur.fetchall())
    hot, by_user = f"`{schemas[0]}`", range(layout.n_tables)
    await cur.execute(
        " UNION ALL ".join(f"(SELECT user_id, kind, ref, amount_fen FROM {hot}.t_ledger_{t:02})" for t in by_user)
    )
    ledger = await cur.fetchall()
    await cur.execute(" UNION ALL ".join(f"(SELECT user_id, balance_fen FROM {hot}.t_account_{t:02})" for t in by_user))
    books.add(rows[0], rows[1], ledger, await cur.fetchall())


def mysql_source(dsn: str, layout: Layout) -> str:
    """The shards of ``layout`` on ``dsn`` as the audit names them, each DSN as given with its
    password masked (``redact``): ``MySQL mysql://user:***@host:port[, ...], databases
    db_00..db_03 x 4 tables``. Raises ValueError for a malformed DSN."""
    parse_dsn(dsn)
    servers = ", ".join(redact(part.strip()) for part in dsn.split(","))
    first, last = layout.db_name(0), layout.db_name(layout.n_dbs - 1)
    databases = f"database {first}" if layout.n_dbs == 1 else f"databases {first}..{last}"
    return f"MySQL {servers}, {databases} x {layout.n_tables} tables"
