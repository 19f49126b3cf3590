"""The push channel's own SQLite file, ``push.db`` beside the money's ``hongbao.db``.

SQLite has one writer per file, and each worker drives a file from one write thread
(hongbao.core.adapters.sqlite.db). Push writes (logins, liveness refreshes, acks, node
heartbeats, every event appended to every member's log, group pushes, broadcasts) are many and
small; in the money's file they queued in front of pay and open and each paid the money's fsync.
Here they have their own file, lock and write thread, so money transactions never wait for them.

Durability: WAL with ``synchronous=NORMAL``. A commit reaches the OS before it returns, the disk
at the next checkpoint: a crash of any or every worker loses nothing; a power loss or OS crash
may lose the last commits (the file stays consistent). That is what Redis's default persistence
(RDB snapshots, or AOF with ``appendfsync everysec``) gives the push channel in production: it is
an at-least-once message queue whose clients reload state over HTTP when a stream's history is
lost (docs/architecture.md section 7), never money.

Tables (times are wall-clock ms): ``t_push_session`` (a row is at once the user's session, route
and online entry), ``t_push_node`` (liveness and internal address), ``t_push_stream`` and
``t_push_message`` (each user's log: its messages' places, each naming its head in ``t_push_head``,
kept once for every stream it went to), ``t_push_topic`` and ``t_push_broadcast`` (broadcasts), and
``t_queue`` for the group-push stream (hongbao.core.adapters.sqlite.state.SqliteQueue).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hongbao.core.adapters.sqlite.db import SqliteDb
from hongbao.core.adapters.sqlite.schema import QUEUE_TABLE, record_version, schema_version

PUSH_DB_FILE = "push.db"
PUSH_SCHEMA_VERSION = 2
WAL_PAGES = 8_000  # checkpoint (and sync, in NORMAL mode) once the WAL holds this many pages (~32 MiB)
# Version 1 kept a whole body in every stream's row; version 2 keeps a message's head once
# (t_push_head) for every stream it goes to. The old rows go: the streams restart under new
# epochs, so their clients are told to reload (docs/architecture.md section 7).
_FROM_1 = ("DROP TABLE IF EXISTS t_push_message", "DELETE FROM t_push_stream")

_TABLES = (
    """CREATE TABLE IF NOT EXISTS t_push_session (
        uid TEXT PRIMARY KEY, sid TEXT NOT NULL, node TEXT NOT NULL, login_at INTEGER NOT NULL,
        active_at INTEGER NOT NULL) STRICT""",
    "CREATE INDEX IF NOT EXISTS t_push_session_node ON t_push_session (node)",
    "CREATE INDEX IF NOT EXISTS t_push_session_active ON t_push_session (active_at)",
    """CREATE TABLE IF NOT EXISTS t_push_node (
        node TEXT PRIMARY KEY, address TEXT NOT NULL, expires_at INTEGER NOT NULL) STRICT""",
    """CREATE TABLE IF NOT EXISTS t_push_stream (
        uid TEXT PRIMARY KEY, epoch TEXT NOT NULL, last_offset INTEGER NOT NULL, acked INTEGER NOT NULL) STRICT""",
    """CREATE TABLE IF NOT EXISTS t_push_head (
        id INTEGER PRIMARY KEY, created_at INTEGER NOT NULL, head BLOB NOT NULL) STRICT""",
    "CREATE INDEX IF NOT EXISTS t_push_head_age ON t_push_head (created_at)",
    """CREATE TABLE IF NOT EXISTS t_push_message (
        uid TEXT NOT NULL, offset INTEGER NOT NULL, head_id INTEGER NOT NULL,
        PRIMARY KEY (uid, offset)) STRICT, WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS t_push_message_head ON t_push_message (head_id)",
    """CREATE TABLE IF NOT EXISTS t_push_topic (
        topic TEXT PRIMARY KEY, epoch TEXT NOT NULL, last_offset INTEGER NOT NULL) STRICT""",
    """CREATE TABLE IF NOT EXISTS t_push_broadcast (
        id INTEGER PRIMARY KEY, topic TEXT NOT NULL, offset INTEGER NOT NULL, epoch TEXT NOT NULL,
        body BLOB NOT NULL, created_at INTEGER NOT NULL) STRICT""",
    "CREATE INDEX IF NOT EXISTS t_push_broadcast_age ON t_push_broadcast (created_at)",
    # renewed streams, read by every worker from its cursor: ids only grow (the newest row is never deleted)
    "CREATE TABLE IF NOT EXISTS t_push_lost (id INTEGER PRIMARY KEY, uid TEXT NOT NULL) STRICT",
    *QUEUE_TABLE,
)


def migrate_push(conn: sqlite3.Connection) -> None:
    """Create the push tables in one transaction (idempotent) and record the push schema
    version. Raises RuntimeError when the file holds a newer version than this code knows."""
    with conn:  # commits the transaction begun here, or rolls it back on an exception
        conn.execute("BEGIN IMMEDIATE")
        if schema_version(conn, PUSH_SCHEMA_VERSION) == 1:
            for statement in _FROM_1:
                conn.execute(statement)
        for statement in _TABLES:
            conn.execute(statement)
        record_version(conn, PUSH_SCHEMA_VERSION)


def open_push_db(data_dir: Path) -> SqliteDb:
    """Open (creating if needed) ``data_dir/push.db`` with its own write thread. Open it once
    before forking workers, as the money file is: two processes switching a new file to WAL at
    the same moment may fail with "database is locked"."""
    db = SqliteDb(data_dir / PUSH_DB_FILE, schema=migrate_push, synchronous="NORMAL")
    db.conn.execute("PRAGMA temp_store=MEMORY")  # a group commit's savepoints journal in memory, not a temp file
    db.conn.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES}")
    return db
