"""LedgerStore on the sharded MySQL/MariaDB schema: ``t_account_{t}`` and ``t_ledger_{t}`` on the
user's shard, each movement applied exactly once.

The (kind, ref) unique key of the user's ledger table is the idempotency of every movement
(docs/architecture.md section 5). A ref always belongs to one user (the order id to its sender, a receipt
to its receiver, a top-up key is prefixed with its user), so a key unique per shard is unique.
A debit is one conditional UPDATE of its account row (it locks the row, tests the balance and
changes it), and the ``balance_fen >= 0`` CHECK backs the overdraft test; credits go to their
accounts in one upsert per table at the end of the transaction (a balance only grows there, so
nothing needs checking). A batch's transaction is one multi-statement: its ledger rows (one
INSERT per table), its debits, its credits, and with credits only the COMMIT too (one round trip;
with a debit, the COMMIT follows once every debit changed its row). When it meets a ledger row
already there (a retried pay, a redelivered credit message), the transaction is rolled back and
the batch replayed entry by entry, which tells which were new.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import defaultdict
from collections.abc import Sequence

from asyncmy.constants.ER import DUP_ENTRY
from asyncmy.cursors import Cursor
from asyncmy.errors import IntegrityError
from hongbao.core.adapters.mysql.db import (
    SCAN_TIMEOUT_S,
    Committed,
    MysqlShards,
    affected_rows,
    commit_with,
    run_statement,
)
from hongbao.core.errors import InsufficientBalance
from hongbao.core.ports import LedgerEntry
from hongbao.core.sharding import Layout
from hongbao.core.vocabulary import EntryKind


class _SeenBefore(Exception):
    """A multi-row ledger insert met an entry already applied (its transaction rolls back)."""


#: A ledger table's INSERT, before its rows' VALUES (``_ROW`` each); ``d``: "" or a database and a dot.
_INSERT = "INSERT INTO {d}t_ledger_{t:02} (user_id, kind, ref, amount_fen, created_at) VALUES "
_ROW = "(%s, %s, %s, %s, %s)"
#: A debit (its amount negative): one statement locks the account row, tests the balance and changes it.
_DEBIT = "UPDATE t_account_{t:02} SET balance_fen = balance_fen + %s WHERE user_id = %s AND balance_fen + %s >= 0"


def _row(entry: LedgerEntry) -> tuple[object, ...]:
    return (entry.user_id, entry.kind, entry.ref, entry.amount_fen, entry.created_at_ms)


def _tables(layout: Layout, user_ids: Sequence[str], qualified: bool) -> list[tuple[str, int, list[int]]]:
    """``user_ids``' ledger and account tables: per table, in order (by database, then number),
    (database prefix, table number, the indices of ``user_ids`` there, in order). The prefix is ""
    (``qualified`` False: the transaction's own database) or the database's name and a dot."""
    by_table: dict[tuple[str, int], list[int]] = defaultdict(list)
    for i, user_id in enumerate(user_ids):
        db, t = layout.key_shard(user_id)
        by_table[(f"`{layout.db_name(db)}`." if qualified else "", t)].append(i)
    return [(d, t, indices) for (d, t), indices in sorted(by_table.items())]


def _upserts(layout: Layout, gains: dict[str, int], qualified: bool) -> tuple[list[str], list[object]]:
    """The statements adding ``gains`` (user id -> fen) to the accounts, one multi-row upsert per
    account table (tables as ``_tables``, users in order within; a first credit of a user inserts
    the account row), and their values; ([], []) when none."""
    users = sorted(gains)
    tables = _tables(layout, users, qualified)
    upserts = [
        f"INSERT INTO {d}t_account_{t:02} (user_id, balance_fen) VALUES {', '.join(['(%s, %s)'] * len(rows))} "
        "ON DUPLICATE KEY UPDATE balance_fen = balance_fen + VALUES(balance_fen)"
        for d, t, rows in tables
    ]
    return upserts, [v for _, _, rows in tables for i in rows for v in (users[i], gains[users[i]])]


def credit_statements(layout: Layout, credits: Sequence[LedgerEntry]) -> tuple[list[str], list[object]]:
    """The statements (and their values) that apply ``credits`` (credit entries, none applied
    before) from a transaction on any database of their server: their ledger rows, one INSERT
    per table, then one account upsert per table, every table named with its database, in the
    lock order of MysqlLedgerStore's own transactions (ledger keys, then accounts; tables in
    order, users in order). A (kind, ref) already in the ledger fails its INSERT (DUP_ENTRY),
    which rolls the whole transaction back."""
    tables = _tables(layout, [entry.user_id for entry in credits], True)
    inserts = [_INSERT.format(d=d, t=t) + ", ".join([_ROW] * len(rows)) for d, t, rows in tables]
    values = [v for _, _, rows in tables for i in rows for v in _row(credits[i])]
    gains: dict[str, int] = defaultdict(int)
    for entry in credits:
        gains[entry.user_id] += entry.amount_fen
    upserts, more = _upserts(layout, gains, True)
    return inserts + upserts, values + more


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
            try:
                done = await self._shards.transaction(db, lambda cur: self._apply_at_once(cur, batch))
            except _SeenBefore:
                done = await self._shards.transaction(db, lambda cur: self._apply_each(cur, batch))
            for i, ok in zip(mine, done, strict=True):
                applied[i] = ok

        await asyncio.gather(*(one_db(db, indices) for db, indices in by_db.items()))
        return applied

    async def _apply_at_once(self, cur: Cursor, entries: list[LedgerEntry]) -> list[bool] | Committed[list[bool]]:
        """In the caller's transaction, as one multi-statement: every ledger row (one plain INSERT
        per table: a (kind, ref) already there fails it, raising _SeenBefore), each debit (one
        conditional UPDATE of its account: the row lock, the balance test and the change), the
        credits (``_credit_upserts``). Credits only: the COMMIT goes with them (one round trip,
        then Committed). With a debit: the caller's COMMIT follows once every debit changed its
        row (two round trips), else InsufficientBalance (the transaction rolls back)."""
        statements: list[str] = []
        args: list[object] = []
        by_table: dict[int, list[LedgerEntry]] = defaultdict(list)
        for entry in entries:
            by_table[self._shards.layout.key_shard(entry.user_id)[1]].append(entry)
        for t, rows in sorted(by_table.items()):
            statements.append(_INSERT.format(d="", t=t) + ", ".join([_ROW] * len(rows)))
            args += [v for e in rows for v in _row(e)]
        debits = [entry for entry in entries if entry.amount_fen < 0]
        for entry in debits:
            statements.append(_DEBIT.format(t=self._shards.layout.key_shard(entry.user_id)[1]))
            args += [entry.amount_fen, entry.user_id, entry.amount_fen]
        upserts, values = self._credit_upserts(entries, [True] * len(entries))
        try:
            if not debits:
                await commit_with(cur, "; ".join(statements + upserts), args + values)
                return Committed([True] * len(entries))
            changed = await affected_rows(cur, "; ".join(statements + upserts), args + values)
        except IntegrityError as exc:
            if exc.args[0] != DUP_ENTRY:
                raise
            raise _SeenBefore(str(exc)) from None
        for entry, debited in zip(debits, changed[len(by_table) : len(by_table) + len(debits)], strict=True):
            if debited != 1:  # no account, or too little in it (credits of this batch are not counted yet)
                raise InsufficientBalance(f"balance of {entry.user_id} is below {-entry.amount_fen} fen")
        return [True] * len(entries)

    async def _apply_each(self, cur: Cursor, entries: list[LedgerEntry]) -> list[bool] | Committed[list[bool]]:
        """In the caller's transaction: each entry on its own (``_insert_each``: which are new,
        each new debit applied), then the new credits with the COMMIT (one round trip, then
        Committed); per entry, True if applied now. Raises InsufficientBalance on an overdraft."""
        applied = await self._insert_each(cur, entries)
        upserts, values = self._credit_upserts(entries, applied)
        if not upserts:
            return applied
        await commit_with(cur, "; ".join(upserts), values)
        return Committed(applied)

    def _credit_upserts(self, entries: list[LedgerEntry], applied: list[bool]) -> tuple[list[str], list[object]]:
        """The statements adding the applied credits of ``entries`` to their accounts (``_upserts``,
        in the transaction's own database) and their values; ([], []) when none."""
        gains: dict[str, int] = defaultdict(int)
        for entry, new in zip(entries, applied, strict=True):
            if new and entry.amount_fen >= 0:
                gains[entry.user_id] += entry.amount_fen
        return _upserts(self._shards.layout, gains, False)

    async def _insert_each(self, cur: Cursor, entries: list[LedgerEntry]) -> list[bool]:
        """Insert each entry's ledger row and apply each new debit under its account's row lock;
        per entry, True if its row is new. Raises InsufficientBalance on an overdraft."""
        applied: list[bool] = []
        for entry in entries:
            _, t = self._shards.layout.key_shard(entry.user_id)  # a (kind, ref) already there stays as it is
            inserted = await run_statement(
                cur, _INSERT.format(d="", t=t) + _ROW + " ON DUPLICATE KEY UPDATE id = id", _row(entry)
            )
            applied.append(inserted == 1)
            if inserted != 1 or entry.amount_fen >= 0:
                continue
            debited = await run_statement(cur, _DEBIT.format(t=t), (entry.amount_fen, entry.user_id, entry.amount_fen))
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
