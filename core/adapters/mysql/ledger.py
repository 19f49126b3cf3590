"""LedgerStore on the sharded MySQL/MariaDB schema: ``t_account_{t}`` and ``t_ledger_{t}`` on the
user's shard, each movement applied exactly once.

The (kind, ref) unique key of the user's ledger table is the idempotency of every movement
(docs/architecture.md section 5). A ref always belongs to one user (the order id to its sender, a receipt
to its receiver, a top-up key is prefixed with its user), so a key unique per shard is unique.
A debit is one conditional UPDATE of its account row (it locks the row, tests the balance and
changes it), and the ``balance_fen >= 0`` CHECK backs the overdraft test; credits go to their
accounts in one upsert per table at the end of the transaction (a balance only grows there, so
nothing needs checking). A batch of credits only (the credit queue's) inserts its ledger rows in
one statement per table; when that meets a row already there (a redelivered message), the
transaction is rolled back and the batch replayed entry by entry, which tells which were new.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import defaultdict
from collections.abc import Sequence

from asyncmy.cursors import Cursor
from hongbao.core.adapters.mysql.db import SCAN_TIMEOUT_S, Committed, MysqlShards, commit_with, run_statement
from hongbao.core.errors import InsufficientBalance
from hongbao.core.ports import LedgerEntry
from hongbao.core.vocabulary import EntryKind


class _SeenBefore(Exception):
    """A multi-row ledger insert met an entry already applied (its transaction rolls back)."""


async def _insert_rows(cur: Cursor, table: int, entries: Sequence[LedgerEntry]) -> int:
    """Insert the ledger rows of ``entries`` (all on ledger table ``table``) in one statement, a
    (kind, ref) already there left as it is; returns how many rows are new. One row is a prepared
    statement, several a statement of their own (``run_statement``'s ``once``)."""
    marks = ", ".join(["(%s, %s, %s, %s, %s)"] * len(entries))
    sql = (
        f"INSERT INTO t_ledger_{table:02} (user_id, kind, ref, amount_fen, created_at) VALUES {marks} "
        "ON DUPLICATE KEY UPDATE id = id"
    )
    args = [v for e in entries for v in (e.user_id, e.kind, e.ref, e.amount_fen, e.created_at_ms)]
    return await run_statement(cur, sql, args, once=len(entries) > 1)


class MysqlLedgerStore:
    """The production LedgerStore (see hongbao.core.ports.LedgerStore for the contract)."""

    __slots__ = ("_shards",)

    def __init__(self, shards: MysqlShards) -> None:
        self._shards = shards

    async def post(self, entry: LedgerEntry) -> bool:
        """Apply ``entry`` once; False if already applied. Raises InsufficientBalance on overdraft
        (and changes nothing)."""
        return (await self.post_many([entry]))[0]

    async def post_many(self, entries: Sequence[LedgerEntry]) -> list[bool]:
        """Apply each entry once, in one transaction per database (every database at once); per
        entry, True if applied now. Raises InsufficientBalance on an overdraft (that database's
        entries roll back; another database's may have committed, which a retry finds applied)."""
        by_db: dict[int, list[int]] = defaultdict(list)
        for i, entry in enumerate(entries):
            by_db[self._shards.layout.key_shard(entry.user_id)[0]].append(i)
        applied = [False] * len(entries)

        async def one_db(db: int, indices: list[int]) -> None:
            # Locks in one order (ledger keys, then accounts by user); a batch inserting at once takes
            # its keys table by table, and a deadlock with one going entry by entry is retried.
            mine = sorted(indices, key=lambda i: (entries[i].kind, entries[i].ref))
            batch = [entries[i] for i in mine]
            at_once = len(batch) > 1 and all(e.amount_fen >= 0 for e in batch)  # several credits, no debit
            try:  # (the body commits with its last statement when it credits: one round trip less)
                done = await self._shards.transaction(db, lambda cur: self._apply(cur, batch, at_once=at_once))
            except _SeenBefore:
                done = await self._shards.transaction(db, lambda cur: self._apply(cur, batch, at_once=False))
            for i, ok in zip(mine, done, strict=True):
                applied[i] = ok

        await asyncio.gather(*(one_db(db, indices) for db, indices in by_db.items()))
        return applied

    async def _apply(
        self, cur: Cursor, entries: list[LedgerEntry], *, at_once: bool
    ) -> list[bool] | Committed[list[bool]]:
        """In the caller's transaction: insert each ledger row (a (kind, ref) already there is
        skipped), check and apply each debit under its account's row lock, then add the credits
        to their accounts in one multi-row upsert per account table, sent with the COMMIT in one
        round trip (then Committed); per entry, True if applied. ``at_once`` (credits only): one
        insert per ledger table, raising _SeenBefore when any row was there already."""
        if at_once:
            await self._insert_all(cur, entries)
            applied = [True] * len(entries)
        else:
            applied = await self._insert_each(cur, entries)
        gains: dict[str, int] = defaultdict(int)
        for entry, new in zip(entries, applied, strict=True):
            if new and entry.amount_fen >= 0:
                gains[entry.user_id] += entry.amount_fen
        by_table: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for user_id in sorted(gains):
            by_table[self._shards.layout.key_shard(user_id)[1]].append((user_id, gains[user_id]))
        if not by_table:
            return applied
        tables = sorted(by_table.items())
        upserts = [  # a first credit of a user inserts the account row
            f"INSERT INTO t_account_{t:02} (user_id, balance_fen) VALUES {', '.join(['(%s, %s)'] * len(rows))} "
            "ON DUPLICATE KEY UPDATE balance_fen = balance_fen + VALUES(balance_fen)"
            for t, rows in tables
        ]
        values = [v for _, rows in tables for row in rows for v in row]
        await commit_with(cur, "; ".join(upserts), values)
        return Committed(applied)

    async def _insert_all(self, cur: Cursor, entries: list[LedgerEntry]) -> None:
        """Insert every entry's ledger row, one statement per table (tables in order, each in the
        entries' order); _SeenBefore when a (kind, ref) was there already."""
        by_table: dict[int, list[LedgerEntry]] = defaultdict(list)
        for entry in entries:
            by_table[self._shards.layout.key_shard(entry.user_id)[1]].append(entry)
        for t, rows in sorted(by_table.items()):
            inserted = await _insert_rows(cur, t, rows)
            if inserted != len(rows):
                raise _SeenBefore(f"{len(rows) - inserted} of {len(rows)} entries were applied before")

    async def _insert_each(self, cur: Cursor, entries: list[LedgerEntry]) -> list[bool]:
        """Insert each entry's ledger row and apply each new debit under its account's row lock;
        per entry, True if its row is new. Raises InsufficientBalance on an overdraft."""
        applied: list[bool] = []
        for entry in entries:
            _, t = self._shards.layout.key_shard(entry.user_id)
            inserted = await _insert_rows(cur, t, [entry])
            applied.append(inserted == 1)
            if inserted != 1 or entry.amount_fen >= 0:
                continue
            debited = await cur.execute(  # one statement: the row lock, the test and the change
                f"UPDATE t_account_{t:02} SET balance_fen = balance_fen + %s "
                "WHERE user_id = %s AND balance_fen + %s >= 0",
                (entry.amount_fen, entry.user_id, entry.amount_fen),
            )
            if debited != 1:  # no account, or too little in it (credits of this batch are not counted yet)
                raise InsufficientBalance(f"balance of {entry.user_id} is below {-entry.amount_fen} fen")
        return applied

    async def balance(self, user_id: str) -> int:
        """The balance in fen; 0 for a user with no account row."""
        db, t = self._shards.layout.key_shard(user_id)
        row = await self._shards.fetchone(
            db, f"SELECT balance_fen FROM t_account_{t:02} WHERE user_id = %s", (user_id,)
        )
        return 0 if row is None else int(row[0])

    async def amount(self, user_id: str, kind: EntryKind, ref: str) -> int | None:
        """The signed amount in fen of the user's entry (kind, ref); None if there is none."""
        db, t = self._shards.layout.key_shard(user_id)
        row = await self._shards.fetchone(
            db,
            f"SELECT amount_fen FROM t_ledger_{t:02} WHERE kind = %s AND ref = %s AND user_id = %s",
            (kind, ref, user_id),
        )
        return None if row is None else int(row[0])

    async def entries(self, user_id: str, offset: int, limit: int) -> list[LedgerEntry]:
        """The user's entries, newest first."""
        db, t = self._shards.layout.key_shard(user_id)
        rows = await self._shards.fetchall(
            db,
            f"SELECT user_id, kind, ref, amount_fen, created_at FROM t_ledger_{t:02} WHERE user_id = %s "
            "ORDER BY id DESC LIMIT %s OFFSET %s",
            (user_id, limit, offset),
        )
        return [LedgerEntry(str(u), EntryKind(k), str(r), int(a), int(c)) for u, k, r, a, c in rows]

    async def entries_between(self, kind: EntryKind, start_ms: int, end_ms: int, limit: int) -> list[LedgerEntry]:
        """Entries of ``kind`` created in [start_ms, end_ms), oldest first, at most ``limit``: one
        UNION ALL over the ledger tables of each database (index ``by_kind``), every database at once."""
        parts = [
            f"(SELECT created_at, user_id, kind, ref, amount_fen FROM t_ledger_{t:02} "
            "WHERE kind = %s AND created_at >= %s AND created_at < %s ORDER BY created_at LIMIT %s)"
            for t in range(self._shards.layout.n_tables)
        ]
        sql = f"SELECT * FROM ({' UNION ALL '.join(parts)}) AS due ORDER BY created_at LIMIT %s"
        values = [*[v for _ in parts for v in (kind, start_ms, end_ms, limit)], limit]
        found = await asyncio.gather(
            *(
                self._shards.fetchall(db, sql, values, timeout_s=SCAN_TIMEOUT_S)
                for db in range(self._shards.layout.n_dbs)
            )
        )
        rows = list(heapq.merge(*found, key=lambda row: int(row[0])))[:limit]
        return [LedgerEntry(str(u), EntryKind(k), str(r), int(a), int(c)) for c, u, k, r, a in rows]
