"""The embedded backend's schema: docs/architecture.md section 5's tables, in one SQLite file.

Packets and receipts use the production names, day tables included (``t_packet_{table:02}_{dd}``,
``t_receipt_{table:02}_{dd}``, dd = 01..31 from the order id), with N = 1 database and
``n_tables`` tables. Every state the workers share (sequence blocks, queues, pre-orders) lives here
too, so ``--workers N`` is correct on the embedded backend. Money columns are INTEGER fen; times
are INTEGER ms since the epoch, UTC.
"""

from __future__ import annotations

import sqlite3

from hongbao.core.adapters.sql import DAYS, packet_table, receipt_table

#: 2: t_preorder.state; 3: the push tables (t_push_*); 4: they moved to push.db; 5: t_ledger_kind;
#: 6: t_group_member_user (a user's groups)
SCHEMA_VERSION = 6
#: Tables of version 3 that version 4 drops (the push channel has its own file, push_db).
MOVED_OUT_V4 = ("t_push_session", "t_push_node", "t_push_stream", "t_push_message", "t_push_topic", "t_push_broadcast")

_PACKET = """CREATE TABLE IF NOT EXISTS {name} (
    order_id TEXT PRIMARY KEY, sender_id TEXT NOT NULL, group_id TEXT, receiver_id TEXT,
    kind TEXT NOT NULL, total_fen INTEGER NOT NULL CHECK (total_fen > 0),
    count INTEGER NOT NULL CHECK (count > 0),
    remaining_fen INTEGER NOT NULL CHECK (remaining_fen >= 0),
    remaining_count INTEGER NOT NULL CHECK (remaining_count >= 0),
    refunded_fen INTEGER NOT NULL DEFAULT 0 CHECK (refunded_fen >= 0),
    status TEXT NOT NULL, created_at INTEGER NOT NULL, pay_by INTEGER NOT NULL,
    expires_at INTEGER NOT NULL, best_luck_user_id TEXT,
    CHECK (remaining_fen + refunded_fen <= total_fen)
) STRICT"""
_PACKET_INDEX = "CREATE INDEX IF NOT EXISTS {name}_expiry ON {name} (status, expires_at)"
_RECEIPT = """CREATE TABLE IF NOT EXISTS {name} (
    order_id TEXT NOT NULL, user_id TEXT NOT NULL, position INTEGER NOT NULL,
    amount_fen INTEGER NOT NULL CHECK (amount_fen >= 1), opened_at INTEGER NOT NULL,
    credit_status TEXT NOT NULL DEFAULT 'pending',
    PRIMARY KEY (order_id, user_id), UNIQUE (order_id, position)
) STRICT"""
_RECEIPT_INDEX = "CREATE INDEX IF NOT EXISTS {name}_pending ON {name} (credit_status, opened_at)"

#: Schema metadata (``schema_version``, ``n_tables``, flags), in every SQLite file of the backend.
META_TABLE = """CREATE TABLE IF NOT EXISTS t_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT"""
#: The queue's table (hongbao.core.adapters.sqlite.state.SqliteQueue), here and in the push file.
QUEUE_TABLE = (
    """CREATE TABLE IF NOT EXISTS t_queue (
        id INTEGER PRIMARY KEY, stream TEXT NOT NULL, body TEXT NOT NULL,
        visible_at INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 0) STRICT""",
    "CREATE INDEX IF NOT EXISTS t_queue_ready ON t_queue (stream, visible_at)",
)
_SHARED = (
    """CREATE TABLE IF NOT EXISTS t_account (
        user_id TEXT PRIMARY KEY, balance_fen INTEGER NOT NULL CHECK (balance_fen >= 0)) STRICT""",
    """CREATE TABLE IF NOT EXISTS t_ledger (
        id INTEGER PRIMARY KEY, user_id TEXT NOT NULL, kind TEXT NOT NULL, ref TEXT NOT NULL,
        amount_fen INTEGER NOT NULL, created_at INTEGER NOT NULL, UNIQUE (kind, ref)) STRICT""",
    "CREATE INDEX IF NOT EXISTS t_ledger_user ON t_ledger (user_id, id)",
    "CREATE INDEX IF NOT EXISTS t_ledger_kind ON t_ledger (kind, created_at)",  # the reconciler's scan of debits
    """CREATE TABLE IF NOT EXISTS t_group (
        group_id TEXT PRIMARY KEY, creator_id TEXT NOT NULL, created_at INTEGER NOT NULL) STRICT""",
    """CREATE TABLE IF NOT EXISTS t_group_member (
        group_id TEXT NOT NULL, user_id TEXT NOT NULL, PRIMARY KEY (group_id, user_id)) STRICT""",
    "CREATE INDEX IF NOT EXISTS t_group_member_user ON t_group_member (user_id, group_id)",
    """CREATE TABLE IF NOT EXISTS t_preorder (
        order_id TEXT PRIMARY KEY, body TEXT NOT NULL, expires_at INTEGER NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending') STRICT""",
    "CREATE INDEX IF NOT EXISTS t_preorder_expiry ON t_preorder (expires_at)",
    """CREATE TABLE IF NOT EXISTS t_seq_block (
        region INTEGER NOT NULL, yymmdd INTEGER NOT NULL, next_seq INTEGER NOT NULL,
        PRIMARY KEY (region, yymmdd)) STRICT""",
    *QUEUE_TABLE,
    """CREATE TABLE IF NOT EXISTS t_user_list (
        user_id TEXT NOT NULL, direction TEXT NOT NULL, order_id TEXT NOT NULL,
        amount_fen INTEGER NOT NULL, created_at INTEGER NOT NULL, best_luck INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (user_id, direction, order_id)) STRICT""",
    "CREATE INDEX IF NOT EXISTS t_user_list_time ON t_user_list (user_id, direction, created_at)",
    # the non-critical store's side tables (greetings, profiles: hongbao.core.adapters.sqlite.profiles)
    """CREATE TABLE IF NOT EXISTS t_packet_note (order_id TEXT PRIMARY KEY, greeting TEXT NOT NULL) STRICT""",
    """CREATE TABLE IF NOT EXISTS t_profile (
        user_id TEXT PRIMARY KEY, nickname TEXT NOT NULL, avatar_url TEXT NOT NULL) STRICT""",
)


def schema_version(conn: sqlite3.Connection, known: int) -> int | None:
    """The version ``conn``'s file records (None: a new file), creating t_meta if needed.

    Raises RuntimeError when it is newer than ``known``, the version this code writes.
    """
    conn.execute(META_TABLE)
    row = conn.execute("SELECT value FROM t_meta WHERE key = 'schema_version'").fetchone()
    if row is not None and int(row[0]) > known:
        raise RuntimeError(f"database {_path(conn)} has schema {row[0]}, newer than this hongbao ({known})")
    return None if row is None else int(row[0])


def record_version(conn: sqlite3.Connection, version: int) -> None:
    """Record ``version`` as the file's schema version."""
    conn.execute(
        "INSERT INTO t_meta (key, value) VALUES ('schema_version', ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (str(version),),
    )


def _path(conn: sqlite3.Connection) -> str:
    """The file behind ``conn`` (for messages)."""
    return str(conn.execute("PRAGMA database_list").fetchone()[2])


def migrate(conn: sqlite3.Connection, n_tables: int) -> None:
    """Create every table (idempotent, safe to rerun), upgrade an older file in place, and record
    the schema version. Raises RuntimeError when the file holds a newer version than this code knows.
    """
    with conn:
        version = schema_version(conn, SCHEMA_VERSION)
        for statement in _SHARED:
            conn.execute(statement)
        preorder_columns = {row[1] for row in conn.execute("PRAGMA table_info(t_preorder)")}
        if "state" not in preorder_columns:  # version 1 -> 2: pay and cancel claim a pre-order atomically
            conn.execute("ALTER TABLE t_preorder ADD COLUMN state TEXT NOT NULL DEFAULT 'pending'")
        if version == 3:  # 3 -> 4: push state moved to its own file; the streams held here start
            for moved in MOVED_OUT_V4:  # again under new epochs there (clients reload, docs/architecture.md 7)
                conn.execute(f"DROP TABLE IF EXISTS {moved}")
        for table in range(n_tables):
            for day in DAYS:
                for template, name in (
                    (_PACKET, packet_table(table, day)),
                    (_PACKET_INDEX, packet_table(table, day)),
                    (_RECEIPT, receipt_table(table, day)),
                    (_RECEIPT_INDEX, receipt_table(table, day)),
                ):
                    conn.execute(template.format(name=name))
        record_version(conn, SCHEMA_VERSION)
        conn.execute(
            "INSERT INTO t_meta (key, value) VALUES ('n_tables', ?) ON CONFLICT (key) DO NOTHING",
            (str(n_tables),),
        )
