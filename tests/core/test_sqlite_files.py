"""The embedded backend's two SQLite files: money (``hongbao.db``) and push (``push.db``), each
with its own schema version, durability setting and write thread."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from hongbao.core.adapters.sqlite.db import SqliteDb
from hongbao.core.adapters.sqlite.push_db import PUSH_DB_FILE, PUSH_SCHEMA_VERSION, open_push_db
from hongbao.core.adapters.sqlite.schema import MOVED_OUT_V4, SCHEMA_VERSION

MONEY_FILE = "hongbao.db"


def tables(path: Path) -> set[str]:
    """The table names in the SQLite file at ``path``."""
    with sqlite3.connect(path) as conn:
        return {str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def meta(path: Path, key: str) -> str:
    """``t_meta``'s value for ``key`` in the file at ``path``."""
    with sqlite3.connect(path) as conn:
        return str(conn.execute("SELECT value FROM t_meta WHERE key = ?", (key,)).fetchone()[0])


def test_new_files_each_hold_their_own_tables(tmp_path: Path) -> None:
    """A new money file has no push table; the push file has them (and its queue), FULL vs NORMAL sync."""
    money, push = SqliteDb(tmp_path / MONEY_FILE), open_push_db(tmp_path)
    try:
        assert not any(name.startswith("t_push_") for name in tables(money.path))
        assert set(MOVED_OUT_V4) | {"t_meta", "t_queue", "t_push_head", "t_push_lost"} == tables(push.path)
        assert (meta(money.path, "schema_version"), meta(push.path, "schema_version")) == (
            str(SCHEMA_VERSION),
            str(PUSH_SCHEMA_VERSION),
        )
        synchronous = [int(db.conn.execute("PRAGMA synchronous").fetchone()[0]) for db in (money, push)]
        assert synchronous == [2, 1]  # FULL, NORMAL
        assert push.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        money.close()
        push.close()


def test_version_3_money_file_drops_the_push_tables(tmp_path: Path) -> None:
    """A version 3 money file upgrades in place: push tables dropped, money rows kept, the ledger's
    index of kinds and the members' index of users added, version 6."""
    SqliteDb(tmp_path / MONEY_FILE).close()
    with sqlite3.connect(tmp_path / MONEY_FILE) as conn:
        conn.execute("INSERT INTO t_account (user_id, balance_fen) VALUES ('u1', 1234)")
        conn.execute("UPDATE t_meta SET value = '3' WHERE key = 'schema_version'")
        conn.execute("CREATE TABLE t_push_message (uid TEXT, offset INTEGER, created_at INTEGER, body BLOB)")
        conn.execute("CREATE INDEX t_push_message_age ON t_push_message (created_at)")
        conn.execute("CREATE TABLE t_push_session (uid TEXT PRIMARY KEY, sid TEXT)")
        conn.execute("INSERT INTO t_push_message VALUES ('u1', 1, 0, x'00')")
        conn.execute("DROP INDEX t_ledger_kind")
        conn.execute("DROP INDEX t_group_member_user")
    SqliteDb(tmp_path / MONEY_FILE).close()
    assert not any(name.startswith("t_push_") for name in tables(tmp_path / MONEY_FILE))
    with sqlite3.connect(tmp_path / MONEY_FILE) as conn:
        assert conn.execute("SELECT balance_fen FROM t_account WHERE user_id = 'u1'").fetchone() == (1234,)
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 't_ledger_kind'").fetchone() == (1,)
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 't_group_member_user'").fetchone() == (1,)
    assert meta(tmp_path / MONEY_FILE, "schema_version") == str(SCHEMA_VERSION) == "6"


def test_version_1_push_file_restarts_its_streams(tmp_path: Path) -> None:
    """A version 1 push file upgrades in place: its whole-body rows and streams go (new epochs), sessions stay."""
    with sqlite3.connect(tmp_path / PUSH_DB_FILE) as conn:
        conn.execute("CREATE TABLE t_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO t_meta VALUES ('schema_version', '1')")
        conn.execute("CREATE TABLE t_push_message (uid TEXT, offset INTEGER, created_at INTEGER, body BLOB)")
        conn.execute("CREATE INDEX t_push_message_age ON t_push_message (created_at)")
        conn.execute(
            "CREATE TABLE t_push_stream (uid TEXT PRIMARY KEY, epoch TEXT, last_offset INTEGER, acked INTEGER)"
        )
        conn.execute(
            "CREATE TABLE t_push_session "
            "(uid TEXT PRIMARY KEY, sid TEXT, node TEXT, login_at INTEGER, active_at INTEGER)"
        )
        conn.execute("INSERT INTO t_push_message VALUES ('u1', 1, 0, x'00')")
        conn.execute("INSERT INTO t_push_stream VALUES ('u1', 'old', 1, 0)")
        conn.execute("INSERT INTO t_push_session VALUES ('u1', 's1', 'n/1', 0, 0)")
    open_push_db(tmp_path).close()
    with sqlite3.connect(tmp_path / PUSH_DB_FILE) as conn:
        columns = [str(row[1]) for row in conn.execute("PRAGMA table_info(t_push_message)")]
        counts = [
            conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in ("t_push_message", "t_push_stream", "t_push_session")
        ]
    assert (columns, counts) == (["uid", "offset", "head_id"], [0, 0, 1])
    assert meta(tmp_path / PUSH_DB_FILE, "schema_version") == str(PUSH_SCHEMA_VERSION) == "2"


def test_newer_push_schema_is_refused(tmp_path: Path) -> None:
    """A push file written by a newer hongbao is refused with RuntimeError naming the file."""
    open_push_db(tmp_path).close()
    with sqlite3.connect(tmp_path / PUSH_DB_FILE) as conn:
        conn.execute("UPDATE t_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(RuntimeError, match=r"push\.db has schema 99, newer than this hongbao \(2\)"):
        open_push_db(tmp_path)


async def test_money_write_does_not_wait_for_push_writes(tmp_path: Path) -> None:
    """While the push file's write thread is held, a money transaction still commits at once."""
    money, push = SqliteDb(tmp_path / MONEY_FILE), open_push_db(tmp_path)
    release = threading.Event()
    held = asyncio.ensure_future(push.run(lambda: release.wait(10)))
    try:
        started = time.monotonic()

        def topup() -> None:
            with money.immediate() as conn:
                conn.execute("INSERT INTO t_account (user_id, balance_fen) VALUES ('u1', 100)")

        await asyncio.wait_for(money.run(topup), 5)
        assert time.monotonic() - started < 2.0 and not held.done()
    finally:
        release.set()
        assert await held is True
        money.close()
        push.close()


async def test_waiting_calls_share_one_commit_and_fail_alone(tmp_path: Path) -> None:
    """Group commit: calls that waited together commit once; the one that raised is rolled back alone."""
    money = SqliteDb(tmp_path / MONEY_FILE)
    statements: list[str] = []
    money.conn.set_trace_callback(statements.append)
    release = threading.Event()
    held = asyncio.ensure_future(money.run(lambda: release.wait(10)))

    def topup(user: str) -> str:
        with money.immediate() as conn:
            conn.execute("INSERT INTO t_account (user_id, balance_fen) VALUES (?, 100)", (user,))
            if user == "u3":
                raise ValueError("u3 refused")
        return user

    try:
        await asyncio.sleep(0.05)
        calls = [asyncio.ensure_future(money.run(lambda user=f"u{i}": topup(user))) for i in range(8)]
        await asyncio.sleep(0.05)
        release.set()
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert await held is True
        assert [str(r) for r in results] == ["u0", "u1", "u2", "u3 refused", "u4", "u5", "u6", "u7"]
        rows = money.reader.execute("SELECT user_id FROM t_account ORDER BY user_id").fetchall()
        assert [r[0] for r in rows] == ["u0", "u1", "u2", "u4", "u5", "u6", "u7"]
        assert statements.count("COMMIT") == 2 and statements.count("SAVEPOINT tx") == 8
    finally:
        release.set()
        money.close()
