"""LedgerStore on SQLite: accounts and ledger entries, each movement applied exactly once.

The (kind, ref) unique key is the idempotency of every movement (docs/architecture.md section 5); the
``balance_fen >= 0`` CHECK makes an overdraft impossible even if a caller forgot to look first.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from hongbao.core.adapters.sqlite.db import SqliteDb
from hongbao.core.errors import InsufficientBalance
from hongbao.core.ports import LedgerEntry
from hongbao.core.vocabulary import EntryKind


class SqliteLedgerStore:
    """The embedded LedgerStore (see hongbao.core.ports.LedgerStore for the contract)."""

    __slots__ = ("_db",)

    def __init__(self, db: SqliteDb) -> None:
        self._db = db

    async def post(self, entry: LedgerEntry) -> bool:
        """Apply ``entry`` once; False if already applied. Raises InsufficientBalance on overdraft."""
        return (await self.post_many([entry]))[0]

    async def post_many(self, entries: Sequence[LedgerEntry]) -> list[bool]:
        """Apply each entry once, all in one transaction; per entry, True if applied now. Raises
        InsufficientBalance on an overdraft (and applies none of them)."""

        def post() -> list[bool]:
            try:
                with self._db.immediate() as conn:
                    return [_apply(conn, entry) for entry in entries]
            except sqlite3.IntegrityError as exc:
                if "balance_fen" not in str(exc):
                    raise
                raise InsufficientBalance(
                    "; ".join(
                        f"balance of {e.user_id} is below {-e.amount_fen} fen" for e in entries if e.amount_fen < 0
                    )
                ) from None

        return await self._db.run(post)

    async def balance(self, user_id: str) -> int:
        """The balance in fen; 0 for a user with no account row."""

        def get() -> int:
            row = self._db.reader.execute("SELECT balance_fen FROM t_account WHERE user_id = ?", (user_id,)).fetchone()
            return 0 if row is None else int(row[0])

        return self._db.read(get)

    async def amount(self, user_id: str, kind: EntryKind, ref: str) -> int | None:
        """The signed amount in fen of the user's entry (kind, ref); None if there is none."""

        def get() -> int | None:
            row = self._db.reader.execute(
                "SELECT amount_fen FROM t_ledger WHERE kind = ? AND ref = ? AND user_id = ?", (kind, ref, user_id)
            ).fetchone()
            return None if row is None else int(row[0])

        return self._db.read(get)

    async def entries(self, user_id: str, offset: int, limit: int) -> list[LedgerEntry]:
        """The user's entries, newest first."""
        sql = (
            "SELECT user_id, kind, ref, amount_fen, created_at FROM t_ledger WHERE user_id = ? "
            "ORDER BY id DESC LIMIT ? OFFSET ?"
        )
        return self._db.read(
            lambda: [
                LedgerEntry(u, EntryKind(k), r, a, c)
                for u, k, r, a, c in self._db.reader.execute(sql, (user_id, limit, offset))
            ]
        )

    async def entries_between(self, kind: EntryKind, start_ms: int, end_ms: int, limit: int) -> list[LedgerEntry]:
        """Entries of ``kind`` created in [start_ms, end_ms), oldest first, at most ``limit``."""
        sql = (
            "SELECT user_id, kind, ref, amount_fen, created_at FROM t_ledger WHERE kind = ? AND created_at >= ? "
            "AND created_at < ? ORDER BY created_at, id LIMIT ?"
        )
        args = (kind, start_ms, end_ms, limit)
        return self._db.read(
            lambda: [LedgerEntry(u, EntryKind(k), r, a, c) for u, k, r, a, c in self._db.reader.execute(sql, args)]
        )


def _apply(conn: sqlite3.Connection, entry: LedgerEntry) -> bool:
    """Insert the entry and move the balance, unless (kind, ref) is there already (-> False)."""
    cur = conn.execute(
        "INSERT INTO t_ledger (user_id, kind, ref, amount_fen, created_at) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (kind, ref) DO NOTHING",
        (entry.user_id, entry.kind, entry.ref, entry.amount_fen, entry.created_at_ms),
    )
    if cur.rowcount == 0:
        return False
    # UPDATE first: SQLite checks CHECK constraints on an upsert's candidate row before the
    # conflict, so a debit must never go through INSERT ... ON CONFLICT.
    cur = conn.execute(
        "UPDATE t_account SET balance_fen = balance_fen + ? WHERE user_id = ?", (entry.amount_fen, entry.user_id)
    )
    if cur.rowcount == 0:
        conn.execute("INSERT INTO t_account (user_id, balance_fen) VALUES (?, ?)", (entry.user_id, entry.amount_fen))
    return True
