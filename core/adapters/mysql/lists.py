"""UserListStore on the sharded MySQL/MariaDB schema: list rows in ``t_user_list_{t}`` on the user's
shard. (Greetings and profiles are not here: they live in the non-critical store, Redis,
hongbao.core.adapters.redis.profiles.)"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence

from asyncmy.cursors import Cursor
from hongbao.core.adapters.mysql.db import Committed, MysqlShards, commit_with, key_rows
from hongbao.core.ports import ListItem, ListRow
from hongbao.core.vocabulary import Direction


def _insert_rows(table: int, args: Sequence[object]) -> str:
    """The INSERT of list table ``table`` for ``args`` (5 values a row), a row already there kept."""
    return (
        f"INSERT INTO t_user_list_{table:02} (user_id, direction, order_id, amount_fen, created_at) VALUES "
        + ", ".join(["(%s, %s, %s, %s, %s)"] * (len(args) // 5))
        + " ON DUPLICATE KEY UPDATE order_id = order_id"
    )


def _flag_best_luck(table: int, args: Sequence[object]) -> str:
    """The UPDATE of list table ``table`` flagging best luck on the received rows of ``args``
    ((user_id, order_id) pairs, in the table's key order), joined on them (``key_rows``)."""
    keys = key_rows(("user_id", "order_id"), len(args) // 2)
    return (
        f"UPDATE t_user_list_{table:02} l JOIN {keys} ON l.user_id = k.user_id AND l.direction = 'received' "
        "AND l.order_id = k.order_id SET l.best_luck = 1"
    )


class MysqlUserListStore:
    """The production UserListStore (hongbao.core.ports.UserListStore)."""

    __slots__ = ("_shards",)

    def __init__(self, shards: MysqlShards) -> None:
        self._shards = shards

    async def write(self, rows: Sequence[ListRow], best_luck: Sequence[tuple[str, str]]) -> None:
        """Record the rows once each, then flag the (user_id, order_id) received rows: per user
        database one transaction of one multi-row INSERT and one UPDATE per list table, sent with
        its COMMIT in one round trip, every database at once."""
        inserts: dict[int, dict[int, list[object]]] = defaultdict(lambda: defaultdict(list))
        flags: dict[int, dict[int, list[object]]] = defaultdict(lambda: defaultdict(list))
        for r in sorted(rows, key=lambda r: (r.user_id, r.direction, r.order_id)):  # one lock order for every writer
            db, t = self._shards.layout.key_shard(r.user_id)
            inserts[db][t] += (r.user_id, r.direction, r.order_id, r.amount_fen, r.created_at_ms)
        for user_id, order_id in sorted(set(best_luck)):  # one lock order for every writer
            db, t = self._shards.layout.key_shard(user_id)
            flags[db][t] += (user_id, order_id)

        def body(db: int) -> Callable[[Cursor], Awaitable[Committed[None] | None]]:
            statements: list[str] = []
            values: list[object] = []
            for by_table, statement in ((inserts[db], _insert_rows), (flags[db], _flag_best_luck)):
                for t, args in sorted(by_table.items()):
                    statements.append(statement(t, args))
                    values += args

            async def run(cur: Cursor) -> Committed[None] | None:
                await commit_with(cur, "; ".join(statements), values)
                return Committed(None)

            return run

        await asyncio.gather(*(self._shards.transaction(db, body(db)) for db in {*inserts, *flags}))

    async def page(
        self, user_id: str, direction: Direction, start_ms: int, end_ms: int, offset: int, limit: int
    ) -> list[ListItem]:
        """Rows in [start_ms, end_ms), newest first."""
        db, t = self._shards.layout.key_shard(user_id)
        rows = await self._shards.fetchall(
            db,
            f"SELECT order_id, amount_fen, created_at, best_luck FROM t_user_list_{t:02} "
            "WHERE user_id = %s AND direction = %s "
            "AND created_at >= %s AND created_at < %s ORDER BY created_at DESC, order_id DESC LIMIT %s OFFSET %s",
            (user_id, direction, start_ms, end_ms, limit, offset),
        )
        return [ListItem(str(o), int(a), int(c), bool(b)) for o, a, c, b in rows]

    async def summary(self, user_id: str, direction: Direction, start_ms: int, end_ms: int) -> tuple[int, int, int]:
        """(count, total fen, best-luck count) in [start_ms, end_ms)."""
        db, t = self._shards.layout.key_shard(user_id)
        row = await self._shards.fetchone(
            db,
            f"SELECT COUNT(*), COALESCE(SUM(amount_fen), 0), COALESCE(SUM(best_luck), 0) FROM t_user_list_{t:02} "
            "WHERE user_id = %s AND direction = %s AND created_at >= %s AND created_at < %s",
            (user_id, direction, start_ms, end_ms),
        )
        assert row is not None  # an aggregate always returns its row
        return int(row[0]), int(row[1]), int(row[2])

    async def recorded(self, keys: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str, str], bool]:
        """Of the (user_id, direction, order_id) keys, those recorded, with their best-luck flags:
        one SELECT per list table joined on its keys (``key_rows``), every database at once."""
        by_table: dict[tuple[int, int], list[object]] = defaultdict(list)
        for k in dict.fromkeys(keys):
            by_table[self._shards.layout.key_shard(k[0])] += k
        found = await asyncio.gather(
            *(
                self._shards.fetchall(
                    db,
                    "SELECT l.user_id, l.direction, l.order_id, l.best_luck FROM "
                    f"{key_rows(('user_id', 'direction', 'order_id'), len(args) // 3)} JOIN t_user_list_{t:02} l "
                    "ON l.user_id = k.user_id AND l.direction = k.direction AND l.order_id = k.order_id",
                    args,
                    once=len(args) > 3,
                )
                for (db, t), args in by_table.items()
            )
        )
        return {(str(u), str(d), str(o)): bool(b) for rows in found for u, d, o, b in rows}
