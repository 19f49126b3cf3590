"""The embedded backend's shared state: pre-orders, groups, sequence blocks and the queue, in SQLite.

State shared between worker processes lives in the database file, never in process memory, so
``--workers N`` stays correct on the embedded backend (docs/architecture.md section 5).
"""

from __future__ import annotations

from collections.abc import Sequence

from hongbao.core.adapters.sql import SEQUENCE_BLOCK, BlockSequence
from hongbao.core.adapters.sqlite.db import SqliteDb

_LIVE = "(expires_at > ? OR state = 'paying')"  # a pre-order get answers: pending before pay_by (ms), or paying
MANY_PER_QUERY = 500  # ids in one query of SqlitePreOrderStore.get_many (SQLite's bound on parameters is 32766)


class SqlitePreOrderStore:
    """PreOrderStore on the t_preorder table (state pending or paying). Lapsed pending rows read
    as absent, and each put deletes the pending rows that lapsed before it."""

    __slots__ = ("_db",)

    def __init__(self, db: SqliteDb) -> None:
        self._db = db

    async def put(self, order_id: str, body: bytes, expires_at_ms: int, now_ms: int) -> None:
        """Store the pre-order, pending until ``expires_at_ms``; drop those lapsed by ``now_ms``."""

        def put() -> None:
            with self._db.immediate() as conn:
                conn.execute("DELETE FROM t_preorder WHERE state = 'pending' AND expires_at <= ?", (now_ms,))
                conn.execute(
                    "INSERT OR REPLACE INTO t_preorder (order_id, body, expires_at, state) VALUES (?, ?, ?, 'pending')",
                    (order_id, body.decode(), expires_at_ms),
                )

        await self._db.run(put)

    async def get(self, order_id: str, now_ms: int) -> bytes | None:
        """The body of a live pending pre-order or of one being paid, or None."""

        def get() -> bytes | None:
            row = self._db.reader.execute(
                f"SELECT body FROM t_preorder WHERE order_id = ? AND {_LIVE}",
                (order_id, now_ms),
            ).fetchone()
            return None if row is None else str(row[0]).encode()

        return self._db.read(get)

    async def get_many(self, order_ids: Sequence[str], now_ms: int) -> list[bytes | None]:
        """``get`` of each of ``order_ids``, in order, read in one pass (queries of at most
        ``MANY_PER_QUERY`` ids: SQLite bounds a statement's parameters)."""

        def get_many() -> list[bytes | None]:
            bodies: dict[str, bytes] = {}
            for start in range(0, len(order_ids), MANY_PER_QUERY):
                ids = list(order_ids[start : start + MANY_PER_QUERY])
                marks = ", ".join("?" * len(ids))
                sql = f"SELECT order_id, body FROM t_preorder WHERE order_id IN ({marks}) AND {_LIVE}"
                for order_id, body in self._db.reader.execute(sql, (*ids, now_ms)):
                    bodies[str(order_id)] = str(body).encode()
            return [bodies.get(order_id) for order_id in order_ids]

        return self._db.read(get_many)

    async def claim_for_pay(self, order_id: str, now_ms: int) -> bytes | None:
        """pending (before expiry) or paying -> paying; the body, or None."""

        def claim() -> bytes | None:
            with self._db.immediate() as conn:
                row = conn.execute(
                    "UPDATE t_preorder SET state = 'paying' "
                    "WHERE order_id = ? AND (state = 'paying' OR expires_at > ?) RETURNING body",
                    (order_id, now_ms),
                ).fetchone()
            return None if row is None else str(row[0]).encode()

        return await self._db.run(claim)

    async def release(self, order_id: str) -> None:
        """paying -> pending."""

        def release() -> None:
            with self._db.immediate() as conn:
                conn.execute(
                    "UPDATE t_preorder SET state = 'pending' WHERE order_id = ? AND state = 'paying'", (order_id,)
                )

        await self._db.run(release)

    async def cancel(self, order_id: str, now_ms: int) -> bool:
        """Delete a live pending pre-order; False if a pay claimed it or it is gone."""

        def cancel() -> bool:
            with self._db.immediate() as conn:
                return (
                    conn.execute(
                        "DELETE FROM t_preorder WHERE order_id = ? AND state = 'pending' AND expires_at > ?",
                        (order_id, now_ms),
                    ).rowcount
                    == 1
                )

        return await self._db.run(cancel)

    async def delete(self, order_id: str) -> bool:
        """Remove the pre-order; False if absent."""

        def delete() -> bool:
            with self._db.immediate() as conn:
                return conn.execute("DELETE FROM t_preorder WHERE order_id = ?", (order_id,)).rowcount == 1

        return await self._db.run(delete)


class SqliteGroupStore:
    """GroupStore on t_group and t_group_member."""

    __slots__ = ("_db",)

    def __init__(self, db: SqliteDb) -> None:
        self._db = db

    async def create(self, group_id: str, creator_id: str, members: Sequence[str], now_ms: int) -> None:
        """Create the group with its members (the creator included)."""

        def create() -> None:
            with self._db.immediate() as conn:
                conn.execute(
                    "INSERT INTO t_group (group_id, creator_id, created_at) VALUES (?, ?, ?)",
                    (group_id, creator_id, now_ms),
                )
                conn.executemany(
                    "INSERT OR IGNORE INTO t_group_member (group_id, user_id) VALUES (?, ?)",
                    [(group_id, m) for m in {creator_id, *members}],
                )

        await self._db.run(create)

    async def add_members(self, group_id: str, members: Sequence[str]) -> int:
        """Add members; returns how many were new."""

        def add() -> int:
            with self._db.immediate() as conn:
                before = conn.total_changes
                conn.executemany(
                    "INSERT OR IGNORE INTO t_group_member (group_id, user_id) VALUES (?, ?)",
                    [(group_id, m) for m in members],
                )
                return conn.total_changes - before

        return await self._db.run(add)

    async def remove_member(self, group_id: str, user_id: str) -> bool:
        """Remove one member; False if absent."""

        def remove() -> bool:
            with self._db.immediate() as conn:
                return (
                    conn.execute(
                        "DELETE FROM t_group_member WHERE group_id = ? AND user_id = ?", (group_id, user_id)
                    ).rowcount
                    == 1
                )

        return await self._db.run(remove)

    async def creator(self, group_id: str) -> str | None:
        """The creator, or None for an unknown group."""

        def get() -> str | None:
            row = self._db.reader.execute("SELECT creator_id FROM t_group WHERE group_id = ?", (group_id,)).fetchone()
            return None if row is None else str(row[0])

        return self._db.read(get)

    async def is_member(self, group_id: str, user_id: str) -> bool:
        """Whether the user is a member now."""
        sql = "SELECT 1 FROM t_group_member WHERE group_id = ? AND user_id = ?"
        return self._db.read(lambda: self._db.reader.execute(sql, (group_id, user_id)).fetchone() is not None)

    def held_member(self, group_id: str, user_id: str) -> bool | None:
        """None: this store keeps no copy of a group in memory (every answer is the database's)."""
        return None

    async def members(self, group_id: str) -> list[str]:
        """Every member, sorted."""
        sql = "SELECT user_id FROM t_group_member WHERE group_id = ? ORDER BY user_id"
        return self._db.read(lambda: [str(r[0]) for r in self._db.reader.execute(sql, (group_id,))])

    async def of_member(self, user_id: str, offset: int, limit: int) -> list[tuple[str, str]]:
        """(group_id, creator_id) of the user's groups by group id, ``offset`` skipped, at most ``limit``."""
        sql = (
            "SELECT m.group_id, g.creator_id FROM t_group_member m JOIN t_group g ON g.group_id = m.group_id "
            "WHERE m.user_id = ? ORDER BY m.group_id LIMIT ? OFFSET ?"
        )
        return self._db.read(
            lambda: [(str(g), str(c)) for g, c in self._db.reader.execute(sql, (user_id, limit, offset))]
        )


class SqliteSequenceSource(BlockSequence):
    """The DB block allocator (source 1) on t_seq_block: each worker takes blocks of 1000 in a transaction."""

    __slots__ = ("_db",)

    def __init__(self, db: SqliteDb) -> None:
        super().__init__()
        self._db = db

    async def take_block(self, region: int, yymmdd: int) -> int:
        """Advance the day's counter by one block; returns the block's end."""

        def take() -> int:
            with self._db.immediate() as conn:
                row = conn.execute(
                    "INSERT INTO t_seq_block (region, yymmdd, next_seq) VALUES (?, ?, ?) "
                    "ON CONFLICT (region, yymmdd) DO UPDATE SET next_seq = next_seq + ? RETURNING next_seq",
                    (region, yymmdd, SEQUENCE_BLOCK, SEQUENCE_BLOCK),
                ).fetchone()
                return int(row[0])

        return await self._db.run(take)


class SqliteQueue:
    """Queue on t_queue: a claim leases messages (visible_at moves ahead); ack deletes."""

    __slots__ = ("_db",)

    def __init__(self, db: SqliteDb) -> None:
        self._db = db

    async def publish(self, messages: Sequence[tuple[str, bytes]]) -> None:
        """Append the (stream, body) messages in one transaction, visible at once."""
        rows = [(stream, body.decode()) for stream, body in messages]

        def publish() -> None:
            with self._db.immediate() as conn:
                conn.executemany("INSERT INTO t_queue (stream, body, visible_at) VALUES (?, ?, 0)", rows)

        await self._db.run(publish)

    async def claim(self, stream: str, count: int, lease_ms: int, now_ms: int) -> list[tuple[int, bytes]]:
        """Lease up to ``count`` visible messages for ``lease_ms``."""

        def claim() -> list[tuple[int, bytes]]:
            with self._db.immediate() as conn:
                rows = conn.execute(
                    "UPDATE t_queue SET visible_at = ?, attempts = attempts + 1 WHERE id IN "
                    "(SELECT id FROM t_queue WHERE stream = ? AND visible_at <= ? ORDER BY id LIMIT ?) "
                    "RETURNING id, body",
                    (now_ms + lease_ms, stream, now_ms, count),
                ).fetchall()
            return sorted((int(i), str(b).encode()) for i, b in rows)

        return await self._db.run(claim)

    async def ack(self, stream: str, *message_ids: int) -> None:
        """Delete handled messages, in one transaction."""

        def ack() -> None:
            with self._db.immediate() as conn:
                conn.executemany("DELETE FROM t_queue WHERE id = ? AND stream = ?", [(m, stream) for m in message_ids])

        if message_ids:
            await self._db.run(ack)

    async def depth(self, stream: str) -> int:
        """Messages in ``stream`` not acked yet."""
        sql = "SELECT COUNT(*) FROM t_queue WHERE stream = ?"
        return self._db.read(lambda: int(self._db.reader.execute(sql, (stream,)).fetchone()[0]))


class SqliteFlags:
    """Flags on the t_meta table, under the ``flag:`` prefix."""

    __slots__ = ("_db",)

    def __init__(self, db: SqliteDb) -> None:
        self._db = db

    async def get(self, name: str) -> str | None:
        """The flag's value, or None."""

        def get() -> str | None:
            row = self._db.reader.execute("SELECT value FROM t_meta WHERE key = ?", (f"flag:{name}",)).fetchone()
            return None if row is None else str(row[0])

        return self._db.read(get)

    async def set(self, name: str, value: str) -> None:
        """Set the flag."""

        def put() -> None:
            with self._db.immediate() as conn:
                conn.execute(
                    "INSERT INTO t_meta (key, value) VALUES (?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (f"flag:{name}", value),
                )

        await self._db.run(put)


class SqliteLeases:
    """The embedded backend's leases: every worker holds every one (its jobs are idempotent, and
    SQLite's write lock serialises their writes), so nothing is written to share them."""

    __slots__ = ()

    async def hold(self, name: str, ttl_ms: int) -> bool:
        """Always True."""
        return True


class SqliteExpiryIndex:
    """The embedded backend keeps no expiry index: its refund job scans the day tables of its one
    local file (``due`` answers None)."""

    __slots__ = ()

    async def add(self, order_id: str, expires_at_ms: int) -> None:
        """Nothing to index."""

    async def due(self, now_ms: int, limit: int) -> list[str] | None:
        """None: scan the database."""
        return None

    async def remove(self, order_ids: Sequence[str]) -> None:
        """Nothing to drop."""
