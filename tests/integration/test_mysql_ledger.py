"""The ledger's batched credits on a real MariaDB: a batch of credits inserts its ledger rows in
one statement per table, and a batch that meets entries applied before is replayed entry by
entry, applying only the new ones, exactly once."""

from __future__ import annotations

import asyncio
from itertools import count, islice

import asyncmy
from hongbao.core.adapters.mysql.db import MysqlShards, connect_args
from hongbao.core.adapters.mysql.ledger import MysqlLedgerStore
from hongbao.core.ports import LedgerEntry
from hongbao.core.sharding import parse_dsn
from hongbao.core.vocabulary import EntryKind

from tests.integration.mariadb import SERVICE_LAYOUT, MariaDb, migrated


async def _com_insert(dsn: str) -> int:
    """The server's count of INSERT statements run so far (every connection's)."""
    conn = await asyncmy.connect(**connect_args(parse_dsn(dsn)[0]))
    try:
        async with conn.cursor() as cur:
            await cur.execute("SHOW GLOBAL STATUS LIKE 'Com_insert'")
            row = await cur.fetchone()
    finally:
        conn.close()
    return int(row[1])


def _users_on_one_table(n: int) -> list[str]:
    """``n`` user ids whose accounts and ledger rows share one table of database 0."""
    names = (f"u{i}" for i in count())
    return list(islice((u for u in names if SERVICE_LAYOUT.key_shard(u) == (0, 0)), n))


def _credit(user: str, ref: str, fen: int) -> LedgerEntry:
    return LedgerEntry(user, EntryKind.CREDIT, ref, fen, 1)


def test_credits_go_in_at_once_and_a_redelivered_batch_applies_only_the_new(mariadb: MariaDb) -> None:
    """Six credits on one ledger table cost the server two INSERTs (ledger rows, account rows);
    the same six again with two new ones apply the two only, and a third time nothing."""
    migrated(mariadb, SERVICE_LAYOUT)

    async def run() -> None:
        shards = MysqlShards(mariadb.dsn, SERVICE_LAYOUT, pool_size=2, timeout_s=5.0)
        try:
            ledger = MysqlLedgerStore(shards)
            users = _users_on_one_table(8)
            first = [_credit(u, f"o1:{u}", 10 + i) for i, u in enumerate(users[:6])]
            before = await _com_insert(mariadb.dsn)
            assert await ledger.post_many(first) == [True] * 6
            assert await _com_insert(mariadb.dsn) - before == 2  # one ledger insert, one account upsert
            again = [*first, *(_credit(u, f"o1:{u}", 100) for u in users[6:])]
            assert await ledger.post_many(again) == [False] * 6 + [True] * 2
            assert [await ledger.balance(u) for u in users] == [10, 11, 12, 13, 14, 15, 100, 100]
            assert await ledger.post_many(again) == [False] * 8
            assert [await ledger.balance(u) for u in users] == [10, 11, 12, 13, 14, 15, 100, 100]
        finally:
            await shards.close()

    asyncio.run(run())
