"""UserListStore and ProfileStore on the sharded MySQL/MariaDB schema: list rows in
``t_user_list_{t}`` on the user's shard, greetings on the packet's database, profiles on the user's."""

from __future__ import annotations

from hongbao.core.adapters.mysql_db import MysqlShards
from hongbao.core.ports import ListItem


class MysqlUserListStore:
    """The production UserListStore (hongbao.core.ports.UserListStore)."""

    __slots__ = ("_shards",)

    def __init__(self, shards: MysqlShards) -> None:
        self._shards = shards

    async def add(self, user_id: str, direction: str, order_id: str, amount_fen: int, created_at_ms: int) -> None:
        """Record a list row once."""
        db, t = self._shards.layout.key_shard(user_id)
        await self._shards.execute(
            db, f"INSERT INTO t_user_list_{t:02} (user_id, direction, order_id, amount_fen, created_at) VALUES (%s, %s, %s, %s, %s) "
            "ON DUPLICATE KEY UPDATE order_id = order_id", (user_id, direction, order_id, amount_fen, created_at_ms))

    async def mark_best_luck(self, user_id: str, order_id: str) -> None:
        """Flag the received row as best luck."""
        db, t = self._shards.layout.key_shard(user_id)
        await self._shards.execute(
            db, f"UPDATE t_user_list_{t:02} SET best_luck = 1 WHERE user_id = %s AND direction = 'received' AND order_id = %s",
            (user_id, order_id))

    async def page(self, user_id: str, direction: str, start_ms: int, end_ms: int, offset: int, limit: int) -> list[ListItem]:
        """Rows in [start_ms, end_ms), newest first."""
        db, t = self._shards.layout.key_shard(user_id)
        rows = await self._shards.fetchall(
            db, f"SELECT order_id, amount_fen, created_at, best_luck FROM t_user_list_{t:02} WHERE user_id = %s AND direction = %s "
            "AND created_at >= %s AND created_at < %s ORDER BY created_at DESC, order_id DESC LIMIT %s OFFSET %s",
            (user_id, direction, start_ms, end_ms, limit, offset))
        return [ListItem(str(o), int(a), int(c), bool(b)) for o, a, c, b in rows]

    async def summary(self, user_id: str, direction: str, start_ms: int, end_ms: int) -> tuple[int, int, int]:
        """(count, total fen, best-luck count) in [start_ms, end_ms)."""
        db, t = self._shards.layout.key_shard(user_id)
        row = await self._shards.fetchone(
            db, f"SELECT COUNT(*), COALESCE(SUM(amount_fen), 0), COALESCE(SUM(best_luck), 0) FROM t_user_list_{t:02} "
            "WHERE user_id = %s AND direction = %s AND created_at >= %s AND created_at < %s", (user_id, direction, start_ms, end_ms))
        assert row is not None  # an aggregate always returns its row
        return int(row[0]), int(row[1]), int(row[2])


class MysqlProfileStore:
    """The production ProfileStore (hongbao.core.ports.ProfileStore), for a deployment that keeps
    these non-critical fields in MySQL rather than in Redis."""

    __slots__ = ("_shards",)

    def __init__(self, shards: MysqlShards) -> None:
        self._shards = shards

    async def set_greeting(self, order_id: str, greeting: str) -> None:
        """Keep the greeting."""
        db, _, _ = self._shards.layout.order_shard(order_id)
        await self._shards.execute(db, "REPLACE INTO t_packet_note (order_id, greeting) VALUES (%s, %s)", (order_id, greeting))

    async def greeting(self, order_id: str) -> str | None:
        """The greeting, or None."""
        db, _, _ = self._shards.layout.order_shard(order_id)
        row = await self._shards.fetchone(db, "SELECT greeting FROM t_packet_note WHERE order_id = %s", (order_id,))
        return None if row is None else str(row[0])

    async def set_profile(self, user_id: str, nickname: str, avatar_url: str) -> None:
        """Keep the profile fields."""
        db, _ = self._shards.layout.key_shard(user_id)
        await self._shards.execute(db, "REPLACE INTO t_profile (user_id, nickname, avatar_url) VALUES (%s, %s, %s)",
                                   (user_id, nickname, avatar_url))

    async def profile(self, user_id: str) -> tuple[str, str] | None:
        """(nickname, avatar_url), or None."""
        db, _ = self._shards.layout.key_shard(user_id)
        row = await self._shards.fetchone(db, "SELECT nickname, avatar_url FROM t_profile WHERE user_id = %s", (user_id,))
        return None if row is None else (str(row[0]), str(row[1]))
