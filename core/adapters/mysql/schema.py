"""``hongbao migrate``: the sharded MySQL/MariaDB schema of docs/architecture.md section 5.

Every database ``{prefix}db_{i:02}`` (i < N) holds, for t < M: the packet and receipt day tables
``t_packet_{t:02}_{dd}`` / ``t_receipt_{t:02}_{dd}`` (dd = 01..31, the same names as the embedded
schema), ``t_account_{t:02}``, ``t_ledger_{t:02}`` and ``t_user_list_{t:02}`` (sharded by user),
and the per-database tables: pre-orders (by order id; only while the cache is down, and kept
apart from the packet tables so these hold paid packets only), groups and their members, and
``t_meta`` (schema version, layout; run-time flags in db_00). db_00 also keeps the DB sequence
blocks. Greetings and profiles are not here: they live in the non-critical store (Redis); version 3
stopped creating their tables (``t_packet_note``, ``t_profile``), and a database upgraded from an
older version keeps them, unread, for the operator to drop (docs/operations.md). Money is BIGINT
fen, times BIGINT ms since the epoch (UTC), ids compare byte for byte (utf8mb4_bin). Rerunning is
safe: tables are created if missing (indexes a later version added too), the version is checked (a
newer schema is refused) and recorded, and a different N x M is refused (resharding moves data;
this tool does not).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import asyncmy
from asyncmy.cursors import Cursor
from asyncmy.errors import MySQLError
from hongbao.core.adapters.mysql.db import connect_args
from hongbao.core.adapters.sql import DAYS, packet_table, receipt_table
from hongbao.core.rules import GROUP_ID_MAX, USER_ID_MAX
from hongbao.core.sharding import Layout, parse_dsn

#: 2: t_ledger_{t}.by_kind, the reconciler's scan of the send debits; 3: t_group_member.by_user (a
#: user's groups), t_packet_note and t_profile no longer created (greetings and profiles on Redis).
SCHEMA_VERSION = 3
#: Indexes a later version added to tables an older one created: (table template, index name, its definition).
ADDED_INDEXES = (
    ("t_ledger_{t:02}", "by_kind", "KEY by_kind (kind, created_at)"),
    ("t_group_member", "by_user", "KEY by_user (user_id, group_id)"),
)
_TABLE = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
_ORDER_ID = "order_id CHAR(20) CHARACTER SET ascii COLLATE ascii_bin NOT NULL"
_ID = f"VARCHAR({USER_ID_MAX})"
_GROUP_ID = f"VARCHAR({GROUP_ID_MAX})"

PACKET = f"""CREATE TABLE IF NOT EXISTS {{name}} (
    {_ORDER_ID} PRIMARY KEY, sender_id {_ID} NOT NULL, group_id {_GROUP_ID} NULL, receiver_id {_ID} NULL,
    kind VARCHAR(16) NOT NULL, total_fen BIGINT NOT NULL CHECK (total_fen > 0), count INT NOT NULL CHECK (count > 0),
    remaining_fen BIGINT NOT NULL CHECK (remaining_fen >= 0), remaining_count INT NOT NULL CHECK (remaining_count >= 0),
    refunded_fen BIGINT NOT NULL DEFAULT 0 CHECK (refunded_fen >= 0), status VARCHAR(16) NOT NULL,
    created_at BIGINT NOT NULL, pay_by BIGINT NOT NULL, expires_at BIGINT NOT NULL, best_luck_user_id {_ID} NULL,
    CHECK (remaining_fen + refunded_fen <= total_fen), KEY expiry (status, expires_at)){_TABLE}"""
RECEIPT = (
    f"""CREATE TABLE IF NOT EXISTS {{name}} (
    {_ORDER_ID}, user_id {_ID} NOT NULL, position INT NOT NULL, amount_fen BIGINT NOT NULL CHECK (amount_fen >= 1),
    opened_at BIGINT NOT NULL, credit_status VARCHAR(8) NOT NULL DEFAULT 'pending',
    PRIMARY KEY (order_id, user_id), UNIQUE KEY open_order (order_id, position), """
    f"KEY pending (credit_status, opened_at)){_TABLE}"
)
_BY_USER = (
    f"""CREATE TABLE IF NOT EXISTS t_account_{{t:02}} (
        user_id {_ID} NOT NULL PRIMARY KEY, balance_fen BIGINT NOT NULL CHECK (balance_fen >= 0)){_TABLE}""",
    f"""CREATE TABLE IF NOT EXISTS t_ledger_{{t:02}} (
        id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, user_id {_ID} NOT NULL, kind VARCHAR(8) NOT NULL,
        ref VARCHAR(255) NOT NULL, amount_fen BIGINT NOT NULL, created_at BIGINT NOT NULL,
        UNIQUE KEY movement (kind, ref), KEY bill (user_id, id), KEY by_kind (kind, created_at)){_TABLE}""",
    f"""CREATE TABLE IF NOT EXISTS t_user_list_{{t:02}} (
        user_id {_ID} NOT NULL, direction VARCHAR(8) NOT NULL, {_ORDER_ID}, amount_fen BIGINT NOT NULL,
        created_at BIGINT NOT NULL, best_luck TINYINT NOT NULL DEFAULT 0,
        PRIMARY KEY (user_id, direction, order_id), KEY by_time (user_id, direction, created_at)){_TABLE}""",
)
_PER_DB = (
    f"CREATE TABLE IF NOT EXISTS t_meta (name VARCHAR(64) NOT NULL PRIMARY KEY, value VARCHAR(255) NOT NULL){_TABLE}",
    f"""CREATE TABLE IF NOT EXISTS t_preorder ({_ORDER_ID} PRIMARY KEY, body BLOB NOT NULL, expires_at BIGINT NOT NULL,
        state VARCHAR(8) NOT NULL DEFAULT 'pending', KEY expiry (expires_at)){_TABLE}""",
    f"""CREATE TABLE IF NOT EXISTS t_group (group_id {_GROUP_ID} NOT NULL PRIMARY KEY, creator_id {_ID} NOT NULL,
        created_at BIGINT NOT NULL){_TABLE}""",
    f"""CREATE TABLE IF NOT EXISTS t_group_member (group_id {_GROUP_ID} NOT NULL, user_id {_ID} NOT NULL,
        PRIMARY KEY (group_id, user_id), KEY by_user (user_id, group_id)){_TABLE}""",
    f"""CREATE TABLE IF NOT EXISTS t_seq_block (region TINYINT NOT NULL, yymmdd INT NOT NULL, next_seq BIGINT NOT NULL,
        PRIMARY KEY (region, yymmdd)){_TABLE}""",
)


def day_tables(layout: Layout) -> list[tuple[str, str]]:
    """Every (packet, receipt) day table name of one database, table-major."""
    return [(packet_table(t, d), receipt_table(t, d)) for t in range(layout.n_tables) for d in DAYS]


def statements(layout: Layout) -> list[tuple[str, str]]:
    """(table name, CREATE TABLE statement) of every table of one database (all databases alike)."""
    out = [(_name(sql), sql) for sql in _PER_DB]
    for t in range(layout.n_tables):
        out += [(_name(sql), sql) for sql in (template.format(t=t) for template in _BY_USER)]
    for ptable, rtable in day_tables(layout):
        out += [(ptable, PACKET.format(name=ptable)), (rtable, RECEIPT.format(name=rtable))]
    return out


def _name(create: str) -> str:
    return create.split("IF NOT EXISTS ", 1)[1].split(" ", 1)[0]


@dataclass(frozen=True, slots=True)
class MigrateReport:
    """What one run did: databases touched, tables created (0 on a rerun), the schema version they hold."""

    databases: int
    tables_created: int
    schema_version: int = SCHEMA_VERSION


async def migrate(dsn: str, layout: Layout) -> MigrateReport:
    """Create (or complete) every database and table of ``layout`` on the servers of ``dsn``.

    Idempotent. Raises RuntimeError for a database holding a newer schema version or another
    N x M layout; asyncmy errors for unreachable servers or missing privileges."""
    servers = parse_dsn(dsn)
    created = await asyncio.gather(*(_migrate_db(servers[db % len(servers)], layout, db) for db in range(layout.n_dbs)))
    return MigrateReport(layout.n_dbs, sum(created))


async def _migrate_db(server: dict[str, object], layout: Layout, db: int) -> int:
    name = layout.db_name(db)
    conn = await asyncmy.connect(**connect_args(server, connect_timeout_s=10.0))
    try:
        async with conn.cursor() as cur:
            await cur.execute("SET SESSION sql_notes = 0")  # no "already exists" notes on a rerun
            await cur.execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
            await cur.execute(f"USE `{name}`")
            await cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (name,))
            existing = {str(row[0]) for row in await cur.fetchall()}
            await cur.execute(_PER_DB[0])  # t_meta first: the checks read it
            await _check_meta(cur, name, layout)
            missing = [sql for table, sql in statements(layout) if table not in existing]
            for statement in missing:
                await cur.execute(statement)
            await _add_indexes(cur, name, layout)
            await cur.execute(
                "INSERT INTO t_meta (name, value) VALUES ('schema_version', %s), ('n_dbs', %s), ('n_tables', %s) "
                "ON DUPLICATE KEY UPDATE value = VALUES(value)",
                (str(SCHEMA_VERSION), str(layout.n_dbs), str(layout.n_tables)),
            )
            return len(missing)
    finally:
        conn.close()


async def _add_indexes(cur: Cursor, name: str, layout: Layout) -> None:
    """Add each of ADDED_INDEXES to the tables of database ``name`` that lack it (an older schema)."""
    await cur.execute(
        "SELECT DISTINCT table_name, index_name FROM information_schema.statistics WHERE table_schema = %s", (name,)
    )
    present = {(str(table), str(index)) for table, index in await cur.fetchall()}
    for template, index, definition in ADDED_INDEXES:
        for table in dict.fromkeys(template.format(t=t) for t in range(layout.n_tables)):  # once a per-database table
            if (table, index) not in present:
                await cur.execute(f"ALTER TABLE {table} ADD {definition}")


async def _check_meta(cur: Cursor, name: str, layout: Layout) -> None:
    await cur.execute("SELECT name, value FROM t_meta WHERE name IN ('schema_version', 'n_dbs', 'n_tables')")
    meta = {str(k): int(v) for k, v in await cur.fetchall()}
    if meta.get("schema_version", 0) > SCHEMA_VERSION:
        raise RuntimeError(
            f"database {name} has schema {meta['schema_version']}, newer than this hongbao ({SCHEMA_VERSION})"
        )
    found = (meta.get("n_dbs", layout.n_dbs), meta.get("n_tables", layout.n_tables))
    if found != (layout.n_dbs, layout.n_tables):
        raise RuntimeError(
            f"database {name} was migrated for {found[0]} x {found[1]} shards, the settings say "
            f"{layout.n_dbs} x {layout.n_tables} (mysql_dbs x mysql_tables); resharding is not supported"
        )


class NotMigrated(RuntimeError):
    """The shards are not (or no longer) what this hongbao needs: a database or its t_meta is
    missing, its schema is older or newer, or it was made for another N x M; the message says
    what to run."""


#: Server errors of a database or table that does not exist (ER_BAD_DB_ERROR, ER_NO_SUCH_TABLE).
_MISSING = frozenset({1049, 1146})


async def check_migrated(dsn: str, layout: Layout, *, connect_timeout_s: float = 2.0) -> None:
    """Check every database of ``layout`` on ``dsn`` holds this schema version and layout.

    Raises NotMigrated (naming the database and ``hongbao migrate``), or the asyncmy error /
    OSError of a server that refuses (bad credentials) or cannot be reached."""
    servers = parse_dsn(dsn)
    for db in range(layout.n_dbs):
        name = layout.db_name(db)
        conn = await asyncmy.connect(**connect_args(servers[db % len(servers)], connect_timeout_s=connect_timeout_s))
        try:
            async with conn.cursor() as cur:
                try:
                    await cur.execute(
                        f"SELECT name, value FROM `{name}`.t_meta WHERE name IN ('schema_version', 'n_dbs', 'n_tables')"
                    )
                except MySQLError as exc:
                    if exc.args and exc.args[0] in _MISSING:
                        raise NotMigrated(f"database {name} does not exist: run `hongbao migrate` first") from None
                    raise
                meta = {str(k): int(v) for k, v in await cur.fetchall()}
        finally:
            conn.close()
        version = meta.get("schema_version", 0)
        if version != SCHEMA_VERSION:
            older = "an older" if version < SCHEMA_VERSION else "a newer"
            raise NotMigrated(
                f"database {name} has schema {version}, this hongbao needs {SCHEMA_VERSION} "
                f"({older} hongbao migrated it): "
                + ("run `hongbao migrate` to upgrade it in place" if version < SCHEMA_VERSION else "upgrade hongbao")
            )
        found = (meta.get("n_dbs"), meta.get("n_tables"))
        if found != (layout.n_dbs, layout.n_tables):
            raise NotMigrated(
                f"database {name} was migrated for {found[0]} x {found[1]} shards, the settings say "
                f"{layout.n_dbs} x {layout.n_tables} (mysql_dbs x mysql_tables)"
            )
