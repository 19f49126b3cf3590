"""UserListStore on SQLite (t_user_list)."""

from __future__ import annotations

from collections.abc import Sequence

from hongbao.core.adapters.sqlite.db import SqliteDb
from hongbao.core.ports import ListItem, ListRow
from hongbao.core.vocabulary import Direction


class SqliteUserListStore:
    """The embedded UserListStore (hongbao.core.ports.UserListStore)."""

    __slots__ = ("_db",)

    def __init__(self, db: SqliteDb) -> None:
        self._db = db

    async def write(self, rows: Sequence[ListRow], best_luck: Sequence[tuple[str, str]]) -> None:
        """Record the rows once each, then flag the (user_id, order_id) received rows, in one transaction."""
        values = [(r.user_id, r.direction, r.order_id, r.amount_fen, r.created_at_ms) for r in rows]

        def write() -> None:
            with self._db.immediate() as conn:
                conn.executemany(
                    "INSERT OR IGNORE INTO t_user_list (user_id, direction, order_id, amount_fen, created_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    values,
                )
                conn.executemany(
                    "UPDATE t_user_list SET best_luck = 1 "
                    "WHERE user_id = ? AND direction = 'received' AND order_id = ?",
                    best_luck,
                )

        await self._db.run(write)

    async def page(
        self, user_id: str, direction: Direction, start_ms: int, end_ms: int, offset: int, limit: int
    ) -> list[ListItem]:
        """Rows in [start_ms, end_ms), newest first."""
        sql = (
            "SELECT order_id, amount_fen, created_at, best_luck FROM t_user_list WHERE user_id = ? AND direction = ? "
            "AND created_at >= ? AND created_at < ? ORDER BY created_at DESC, order_id DESC LIMIT ? OFFSET ?"
        )
        args = (user_id, direction, start_ms, end_ms, limit, offset)
        return self._db.read(
            lambda: [ListItem(str(o), int(a), int(c), bool(b)) for o, a, c, b in self._db.reader.execute(sql, args)]
        )

    async def summary(self, user_id: str, direction: Direction, start_ms: int, end_ms: int) -> tuple[int, int, int]:
        """(count, total fen, best-luck count) in [start_ms, end_ms)."""
        sql = (
            "SELECT COUNT(*), COALESCE(SUM(amount_fen), 0), COALESCE(SUM(best_luck), 0) FROM t_user_list "
            "WHERE user_id = ? AND direction = ? AND created_at >= ? AND created_at < ?"
        )

        def get() -> tuple[int, int, int]:
            count, total, best = self._db.reader.execute(sql, (user_id, direction, start_ms, end_ms)).fetchone()
            return int(count), int(total), int(best)

        return self._db.read(get)

    async def recorded(self, keys: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str, str], bool]:
        """Of the (user_id, direction, order_id) keys, those recorded, with their best-luck flags."""
        sql = "SELECT best_luck FROM t_user_list WHERE user_id = ? AND direction = ? AND order_id = ?"

        def get() -> dict[tuple[str, str, str], bool]:
            found = ((k, self._db.reader.execute(sql, k).fetchone()) for k in dict.fromkeys(keys))
            return {k: bool(row[0]) for k, row in found if row is not None}

        return self._db.read(get)
