"""The production backend's state in MySQL/MariaDB: pre-orders (the degradation path of docs/architecture.md
section 10, while the cache is down), groups, the DB sequence blocks (source 1, while Redis is
down) and run-time flags.

Pre-orders live in ``t_preorder`` on the order's database; groups and their members on the
group id's database; sequence blocks and flags in db_00.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from asyncmy.cursors import Cursor
from hongbao.core.adapters.mysql.db import MysqlShards, Row, marks
from hongbao.core.adapters.sql import SEQUENCE_BLOCK, BlockSequence

_LIVE = "(expires_at > %s OR state = 'paying')"  # a pre-order get answers: pending before pay_by (ms), or paying
LAPSED_PER_PUT = 100  # lapsed pre-orders deleted per database on each put


class MysqlPreOrderStore:
    """PreOrderStore on t_preorder (state pending or paying). Lapsed pending rows read as absent;
    each put deletes some that lapsed before it on every database."""

    __slots__ = ("_shards",)

    def __init__(self, shards: MysqlShards) -> None:
        self._shards = shards

    def _db(self, order_id: str) -> int:
        return self._shards.layout.order_shard(order_id)[0]

    async def put(self, order_id: str, body: bytes, expires_at_ms: int, now_ms: int) -> None:
        """Store the pre-order, pending until ``expires_at_ms``; drop those lapsed by ``now_ms``."""
        await asyncio.gather(
            *(
                self._shards.execute(
                    db,
                    "DELETE FROM t_preorder WHERE state = 'pending' AND expires_at <= %s LIMIT %s",
                    (now_ms, LAPSED_PER_PUT),
                )
                for db in range(self._shards.layout.n_dbs)
            )
        )
        await self._shards.execute(
            self._db(order_id),
            "REPLACE INTO t_preorder (order_id, body, expires_at, state) VALUES (%s, %s, %s, 'pending')",
            (order_id, body, expires_at_ms),
        )

    async def get(self, order_id: str, now_ms: int) -> bytes | None:
        """The body of a live pending pre-order or of one being paid, or None."""
        row = await self._shards.fetchone(
            self._db(order_id),
            f"SELECT body FROM t_preorder WHERE order_id = %s AND {_LIVE}",
            (order_id, now_ms),
        )
        return None if row is None else bytes(row[0])

    async def get_many(self, order_ids: Sequence[str], now_ms: int) -> list[bytes | None]:
        """``get`` of each of ``order_ids``, in order: one query per database that holds any, in the
        text protocol (``run_statement``'s ``once``: an IN list's shape depends on its length)."""
        by_db: dict[int, list[str]] = {}
        for order_id in order_ids:
            by_db.setdefault(self._db(order_id), []).append(order_id)

        async def one_db(db: int, ids: list[str]) -> list[Row]:
            sql = f"SELECT order_id, body FROM t_preorder WHERE order_id IN ({marks(ids)}) AND {_LIVE}"
            return await self._shards.fetchall(db, sql, (*ids, now_ms), once=len(ids) > 1)

        found = await asyncio.gather(*(one_db(db, ids) for db, ids in by_db.items()))
        bodies = {str(row[0]): bytes(row[1]) for rows in found for row in rows}
        return [bodies.get(order_id) for order_id in order_ids]

    async def claim_for_pay(self, order_id: str, now_ms: int) -> bytes | None:
        """pending (before expiry) or paying -> paying; the body, or None."""

        async def body(cur: Cursor) -> bytes | None:
            await cur.execute(
                "SELECT body, state, expires_at FROM t_preorder WHERE order_id = %s FOR UPDATE", (order_id,)
            )
            row = await cur.fetchone()
            if row is None or (row[1] != "paying" and int(row[2]) <= now_ms):
                return None
            await cur.execute("UPDATE t_preorder SET state = 'paying' WHERE order_id = %s", (order_id,))
            return bytes(row[0])

        return await self._shards.transaction(self._db(order_id), body)

    async def release(self, order_id: str) -> None:
        """paying -> pending."""
        await self._shards.execute(
            self._db(order_id),
            "UPDATE t_preorder SET state = 'pending' WHERE order_id = %s AND state = 'paying'",
            (order_id,),
        )

    async def cancel(self, order_id: str, now_ms: int) -> bool:
        """Delete a live pending pre-order; False if a pay claimed it or it is gone."""

        async def body(cur: Cursor) -> bool:  # locked by primary key first: a DELETE on expires_at could range-lock
            await cur.execute("SELECT state, expires_at FROM t_preorder WHERE order_id = %s FOR UPDATE", (order_id,))
            row = await cur.fetchone()
            if row is None or row[0] != "pending" or int(row[1]) <= now_ms:
                return False
            return await cur.execute("DELETE FROM t_preorder WHERE order_id = %s", (order_id,)) == 1

        return await self._shards.transaction(self._db(order_id), body)

    async def delete(self, order_id: str) -> bool:
        """Remove the pre-order; False if absent."""
        return (
            await self._shards.execute(self._db(order_id), "DELETE FROM t_preorder WHERE order_id = %s", (order_id,))
            == 1
        )


class MysqlGroupStore:
    """GroupStore on t_group and t_group_member, on the group id's database."""

    __slots__ = ("_shards",)

    def __init__(self, shards: MysqlShards) -> None:
        self._shards = shards

    def _db(self, group_id: str) -> int:
        return self._shards.layout.key_shard(group_id)[0]

    async def create(self, group_id: str, creator_id: str, members: Sequence[str], now_ms: int) -> None:
        """Create the group with its members (the creator included)."""
        everyone = sorted({creator_id, *members})

        async def body(cur: Cursor) -> None:
            await cur.execute(
                "INSERT INTO t_group (group_id, creator_id, created_at) VALUES (%s, %s, %s)",
                (group_id, creator_id, now_ms),
            )
            await self._insert_members(cur, group_id, everyone)

        await self._shards.transaction(self._db(group_id), body)

    @staticmethod
    async def _insert_members(cur: Cursor, group_id: str, members: Sequence[str]) -> int:
        rows = ", ".join(["(%s, %s)"] * len(members))
        return await cur.execute(
            f"INSERT INTO t_group_member (group_id, user_id) VALUES {rows} ON DUPLICATE KEY UPDATE user_id = user_id",
            [v for m in members for v in (group_id, m)],
        )

    async def add_members(self, group_id: str, members: Sequence[str]) -> int:
        """Add members; returns how many were new."""
        if not members:
            return 0
        return await self._shards.transaction(
            self._db(group_id), lambda cur: self._insert_members(cur, group_id, members)
        )

    async def remove_member(self, group_id: str, user_id: str) -> bool:
        """Remove one member; False if absent."""
        return (
            await self._shards.execute(
                self._db(group_id),
                "DELETE FROM t_group_member WHERE group_id = %s AND user_id = %s",
                (group_id, user_id),
            )
            == 1
        )

    async def creator(self, group_id: str) -> str | None:
        """The creator, or None for an unknown group."""
        row = await self._shards.fetchone(
            self._db(group_id), "SELECT creator_id FROM t_group WHERE group_id = %s", (group_id,)
        )
        return None if row is None else str(row[0])

    async def is_member(self, group_id: str, user_id: str) -> bool:
        """Whether the user is a member now."""
        return (
            await self._shards.fetchone(
                self._db(group_id),
                "SELECT 1 FROM t_group_member WHERE group_id = %s AND user_id = %s",
                (group_id, user_id),
            )
            is not None
        )

    def held_member(self, group_id: str, user_id: str) -> bool | None:
        """None: this store keeps no copy of a group in memory (every answer is the database's)."""
        return None

    async def members(self, group_id: str) -> list[str]:
        """Every member, sorted."""
        rows = await self._shards.fetchall(
            self._db(group_id), "SELECT user_id FROM t_group_member WHERE group_id = %s ORDER BY user_id", (group_id,)
        )
        return [str(r[0]) for r in rows]

    async def of_member(self, user_id: str, offset: int, limit: int) -> list[tuple[str, str]]:
        """(group_id, creator_id) of the user's groups by group id, ``offset`` skipped, at most
        ``limit``: the first ``offset + limit`` of every database at once (index by_user), merged."""
        found = await asyncio.gather(
            *(
                self._shards.fetchall(
                    db,
                    "SELECT m.group_id, g.creator_id FROM t_group_member m JOIN t_group g ON g.group_id = m.group_id "
                    "WHERE m.user_id = %s ORDER BY m.group_id LIMIT %s",
                    (user_id, offset + limit),
                )
                for db in range(self._shards.layout.n_dbs)
            )
        )
        merged = sorted((str(g), str(c)) for rows in found for g, c in rows)
        return merged[offset : offset + limit]


class MysqlSequenceSource(BlockSequence):
    """The DB block allocator (source 1) on db_00.t_seq_block: the order-id source while Redis is down."""

    __slots__ = ("_shards",)

    def __init__(self, shards: MysqlShards) -> None:
        super().__init__()
        self._shards = shards

    async def take_block(self, region: int, yymmdd: int) -> int:
        """Advance the day's counter by one block; returns the block's end."""

        async def body(cur: Cursor) -> int:
            await cur.execute(
                "INSERT INTO t_seq_block (region, yymmdd, next_seq) VALUES (%s, %s, %s) "
                "ON DUPLICATE KEY UPDATE next_seq = next_seq + %s",
                (region, yymmdd, SEQUENCE_BLOCK, SEQUENCE_BLOCK),
            )
            await cur.execute("SELECT next_seq FROM t_seq_block WHERE region = %s AND yymmdd = %s", (region, yymmdd))
            return int((await cur.fetchone())[0])

        return await self._shards.transaction(0, body)


class MysqlFlags:
    """Flags in db_00.t_meta under the ``flag:`` prefix."""

    __slots__ = ("_shards",)

    def __init__(self, shards: MysqlShards) -> None:
        self._shards = shards

    async def get(self, name: str) -> str | None:
        """The flag's value, or None."""
        row = await self._shards.fetchone(0, "SELECT value FROM t_meta WHERE name = %s", (f"flag:{name}",))
        return None if row is None else str(row[0])

    async def set(self, name: str, value: str) -> None:
        """Set the flag."""
        await self._shards.execute(
            0,
            "INSERT INTO t_meta (name, value) VALUES (%s, %s) ON DUPLICATE KEY UPDATE value = VALUES(value)",
            (f"flag:{name}", value),
        )
