"""LedgerStore on the sharded MySQL/MariaDB schema: ``t_account_{t}`` and ``t_ledger_{t}`` on the
user's shard, each movement applied exactly once.

The (kind, ref) unique key of the user's ledger table is the idempotency of every movement
(DESIGN.md section 5). A ref always belongs to one user (the order id to its sender, a receipt
to its receiver, a top-up key is prefixed with its user), so a key unique per shard is unique.
The account row is locked (SELECT ... FOR UPDATE) before it changes, and the ``balance_fen >= 0``
CHECK backs the overdraft test.
"""

from __future__ import annotations

from asyncmy.cursors import Cursor

from hongbao.core.adapters.mysql_db import MysqlShards
from hongbao.core.errors import InsufficientBalance
from hongbao.core.ports import LedgerEntry


class MysqlLedgerStore:
    """The production LedgerStore (see hongbao.core.ports.LedgerStore for the contract)."""

    __slots__ = ("_shards",)

    def __init__(self, shards: MysqlShards) -> None:
        self._shards = shards

    async def post(self, entry: LedgerEntry) -> bool:
        """Apply ``entry`` once; False if already applied. Raises InsufficientBalance on overdraft
        (and changes nothing)."""
        db, t = self._shards.layout.key_shard(entry.user_id)

        async def body(cur: Cursor) -> bool:
            inserted = await cur.execute(
                f"INSERT INTO t_ledger_{t:02} (user_id, kind, ref, amount_fen, created_at) VALUES (%s, %s, %s, %s, %s) "
                "ON DUPLICATE KEY UPDATE id = id", (entry.user_id, entry.kind, entry.ref, entry.amount_fen, entry.created_at_ms))
            if inserted != 1:
                return False
            await cur.execute(f"SELECT balance_fen FROM t_account_{t:02} WHERE user_id = %s FOR UPDATE", (entry.user_id,))
            row = await cur.fetchone()
            balance = 0 if row is None else int(row[0])
            if balance + entry.amount_fen < 0:
                raise InsufficientBalance(f"balance of {entry.user_id} is below {-entry.amount_fen} fen")
            if row is None:  # a first credit; a concurrent first credit of the same user may insert the row first
                await cur.execute(f"INSERT INTO t_account_{t:02} (user_id, balance_fen) VALUES (%s, %s) "
                                  "ON DUPLICATE KEY UPDATE balance_fen = balance_fen + VALUES(balance_fen)", (entry.user_id, entry.amount_fen))
            else:
                await cur.execute(f"UPDATE t_account_{t:02} SET balance_fen = balance_fen + %s WHERE user_id = %s",
                                  (entry.amount_fen, entry.user_id))
            return True

        return await self._shards.transaction(db, body)

    async def balance(self, user_id: str) -> int:
        """The balance in fen; 0 for a user with no account row."""
        db, t = self._shards.layout.key_shard(user_id)
        row = await self._shards.fetchone(db, f"SELECT balance_fen FROM t_account_{t:02} WHERE user_id = %s", (user_id,))
        return 0 if row is None else int(row[0])

    async def entries(self, user_id: str, offset: int, limit: int) -> list[LedgerEntry]:
        """The user's entries, newest first."""
        db, t = self._shards.layout.key_shard(user_id)
        rows = await self._shards.fetchall(
            db, f"SELECT user_id, kind, ref, amount_fen, created_at FROM t_ledger_{t:02} WHERE user_id = %s "
            "ORDER BY id DESC LIMIT %s OFFSET %s", (user_id, limit, offset))
        return [LedgerEntry(str(u), str(k), str(r), int(a), int(c)) for u, k, r, a, c in rows]
