"""The open transaction's round trips on a real MariaDB: after the packet row's lock (one round
trip, the batch's receipts read with it), an open sends its receipts' INSERT, the packet's
UPDATE (with best luck when it takes the last share, and the best receipt read back) and the
COMMIT in one (``commit_with``), counted through a proxy that holds every chunk DELAY_S each
way; a multi-statement that fails half-way leaves nothing behind; and statements shaped by their
data (multi-row writes) are sent unprepared."""

from __future__ import annotations

import asyncio
import time
from itertools import count, islice

import asyncmy
import hongbao_native
import pytest
from asyncmy.cursors import Cursor
from asyncmy.errors import IntegrityError
from hongbao.core.adapters.mysql.db import Committed, MysqlShards, commit_with, connect_args
from hongbao.core.adapters.mysql.ledger import MysqlLedgerStore
from hongbao.core.adapters.mysql.lists import MysqlUserListStore
from hongbao.core.adapters.mysql.packets import MysqlPacketStore
from hongbao.core.adapters.mysql.state import MysqlPreOrderStore
from hongbao.core.errors import InsufficientBalance
from hongbao.core.packet import Kind, Packet, Status
from hongbao.core.ports import LedgerEntry, ListRow
from hongbao.core.sharding import parse_dsn
from hongbao.core.times import business_yymmdd
from hongbao.core.vocabulary import Direction, EntryKind

from tests.e2e.proxy import ThreadProxy
from tests.integration.mariadb import SERVICE_LAYOUT, MariaDb, migrated

DELAY_S = 0.15  # each way: a round trip costs 0.3 s through the proxy
DAY_MS = 24 * 3600_000
TWO_ROWS = "INSERT INTO t_scratch VALUES (%s); INSERT INTO t_scratch VALUES (%s)"


def _even(remaining_fen: int, remaining_count: int) -> int:
    return remaining_fen // remaining_count


def test_an_open_takes_two_round_trips_and_the_last_share_crowns_best_luck(mariadb: MariaDb) -> None:
    """A warm connection (its statements prepared), then opens of the second and the last of three
    equal shares through the slowed proxy: each under 3 round trips (the lock and read, then the
    rest with the commit), where statement by statement they took 4 and 6; the receipts, the
    remainder and best luck (equal shares: the earliest opener) are in the database."""
    migrated(mariadb, SERVICE_LAYOUT)
    with ThreadProxy(mariadb.port) as proxy:
        port = proxy.start()

        async def run() -> None:
            now = int(time.time() * 1000)
            order_id = hongbao_native.encode_order_id(1, business_yymmdd(now), 1, 7001)
            shards = MysqlShards(mariadb.dsn.rsplit(":", 1)[0] + f":{port}", SERVICE_LAYOUT, pool_size=1, timeout_s=10)
            store = MysqlPacketStore(shards)
            try:
                packet = Packet(
                    order_id, "S", Kind.LUCKY, 3, 300, "g", None, 300, 3, Status.ACTIVE, now, now, now + DAY_MS
                )
                assert await store.insert_packet(packet)
                assert (await store.open_batches([(order_id, ["A"])], now, _even))[0][0].receipt is not None  # warm
                proxy.slow(DELAY_S)
                started = time.monotonic()
                [(result,)] = await store.open_batches([(order_id, ["B"])], now, _even)
                took = time.monotonic() - started
                proxy.slow(0)
                assert result.receipt is not None and result.receipt.amount_fen == 100
                assert took < 3 * 2 * DELAY_S, f"{took:.2f} s: {took / (2 * DELAY_S):.1f} round trips"
                after = await store.get_packet(order_id)
                assert after is not None and (after.remaining_fen, after.remaining_count) == (100, 1)
                assert {r.user_id for r in await store.receipts(order_id)} == {"A", "B"}
                proxy.slow(DELAY_S)
                started = time.monotonic()
                [(last,)] = await store.open_batches([(order_id, ["C"])], now, _even)
                took = time.monotonic() - started
                proxy.slow(0)
                assert last.last and last.best is not None and (last.best.user_id, last.best.amount_fen) == ("A", 100)
                assert took < 3 * 2 * DELAY_S, f"{took:.2f} s: {took / (2 * DELAY_S):.1f} round trips"
                done = await store.get_packet(order_id)
                assert done is not None and (done.status, done.remaining_count) == (Status.FINISHED, 0)
                assert await store.best_luck(order_id) == "A"
            finally:
                await shards.close()

        asyncio.run(run())


def test_packets_of_one_database_open_in_one_transaction_of_two_round_trips(mariadb: MariaDb) -> None:
    """Three packets of one database and an unknown one, opened together: two requests to the
    server (the locks together, then every write with the commit), each
    packet's receipts and remainder right, the one whose last share went finished with best
    luck; the unknown one refused; results in the order given. Packets of two databases are
    refused before any statement."""
    migrated(mariadb, SERVICE_LAYOUT)
    with ThreadProxy(mariadb.port) as proxy:
        port = proxy.start()

        async def run() -> None:
            now = int(time.time() * 1000)
            shards = MysqlShards(mariadb.dsn.rsplit(":", 1)[0] + f":{port}", SERVICE_LAYOUT, pool_size=1, timeout_s=10)
            store = MysqlPacketStore(shards)
            ids = (hongbao_native.encode_order_id(1, business_yymmdd(now), 1, 7100 + n) for n in count())
            first = next(ids)
            same = [first, *islice((o for o in ids if store.database(o) == store.database(first)), 3)]
            other = next(o for o in ids if store.database(o) != store.database(first))
            try:
                for order_id, shares in zip(same[:3], (2, 3, 2), strict=True):
                    packet = Packet(
                        order_id, "S", Kind.LUCKY, shares, 100 * shares, "g", None, 100 * shares, shares,
                        Status.ACTIVE, now, now, now + DAY_MS,
                    )  # fmt: skip
                    assert await store.insert_packet(packet)
                await store.open_batches([(same[0], ["A"])], now, _even)  # warm
                batches = [(same[2], ["C", "D"]), (same[0], ["B", "A"]), (same[3], ["Z"]), (same[1], ["E"])]
                before = proxy.proxy.requests
                results = await store.open_batches(batches, now, _even)
                assert proxy.proxy.requests - before == 2
                outcome = [
                    [(r.receipt and r.receipt.user_id, r.refusal, r.repeat, r.last) for r in rs] for rs in results
                ]
                assert outcome == [
                    [("C", None, False, False), ("D", None, False, True)],
                    [("B", None, False, True), ("A", None, True, False)],
                    [(None, "not_found", False, False)],
                    [("E", None, False, False)],
                ]
                assert results[0][1].best is not None and results[0][1].best.user_id == "C"
                for order_id, remaining, status in [
                    (same[0], 0, Status.FINISHED),
                    (same[1], 2, Status.ACTIVE),
                    (same[2], 0, Status.FINISHED),
                ]:
                    packet = await store.get_packet(order_id)
                    assert packet is not None and (packet.remaining_count, packet.status) == (remaining, status)
                assert await store.best_luck(same[0]) == "A" and await store.best_luck(same[2]) == "C"
                with pytest.raises(ValueError, match="one database"):
                    await store.open_batches([(same[1], ["F"]), (other, ["F"])], now, _even)
                assert {r.user_id for r in await store.receipts(same[1])} == {"E"}
            finally:
                await shards.close()

        asyncio.run(run())


def test_a_credit_takes_one_round_trip_and_a_debit_two(mariadb: MariaDb) -> None:
    """On a warm connection: a credit sends its ledger row, the account's upsert and the COMMIT
    in one request to the server (entry by entry it took two); a debit its ledger row and the
    account's conditional UPDATE in one, then the COMMIT (three before). An overdraft, a debit of
    a user with no account and a repeat of either movement change nothing."""
    migrated(mariadb, SERVICE_LAYOUT)
    with ThreadProxy(mariadb.port) as proxy:
        port = proxy.start()

        async def run() -> None:
            shards = MysqlShards(mariadb.dsn.rsplit(":", 1)[0] + f":{port}", SERVICE_LAYOUT, pool_size=1, timeout_s=10)
            ledger = MysqlLedgerStore(shards)
            warm, payer, nobody = _users_on_one_table(3, "rt")  # one database: one warm connection
            try:
                assert await ledger.post(LedgerEntry(warm, EntryKind.CREDIT, f"w:{warm}", 1, 1))
                credit = LedgerEntry(payer, EntryKind.CREDIT, f"o1:{payer}", 500, 1)
                debit = LedgerEntry(payer, EntryKind.SEND, "o2", -200, 2)
                for entry, round_trips in ((credit, 1), (debit, 2)):
                    before = proxy.proxy.requests
                    assert await ledger.post(entry)
                    assert proxy.proxy.requests - before == round_trips, entry
                assert await ledger.balance(payer) == 300
                for entry in (
                    LedgerEntry(payer, EntryKind.SEND, "o3", -301, 3),
                    LedgerEntry(nobody, EntryKind.SEND, "o4", -1, 3),
                ):
                    with pytest.raises(InsufficientBalance):
                        await ledger.post(entry)
                    assert await ledger.amount(entry.user_id, entry.kind, entry.ref) is None
                assert not await ledger.post(credit) and not await ledger.post(debit)
                assert await ledger.balance(payer) == 300 and await ledger.balance(nobody) == 0
            finally:
                await shards.close()

        asyncio.run(run())


def test_a_multi_statement_that_fails_half_way_rolls_the_transaction_back(mariadb: MariaDb) -> None:
    """A statement before it, and the first of its two, are undone when its second fails (a
    duplicate key); the connection then commits the next transaction's rows as usual."""
    migrated(mariadb, SERVICE_LAYOUT)

    async def run() -> None:
        shards = MysqlShards(mariadb.dsn, SERVICE_LAYOUT, pool_size=1, timeout_s=5)
        try:
            await shards.execute(0, "CREATE TABLE IF NOT EXISTS t_scratch (k INT PRIMARY KEY)")
            await shards.execute(0, "DELETE FROM t_scratch")

            async def failing(cur: Cursor) -> Committed[None] | None:
                await cur.execute("INSERT INTO t_scratch VALUES (1)")
                await commit_with(cur, TWO_ROWS, [2, 1])  # the second is a duplicate of the first statement's
                return Committed(None)

            with pytest.raises(IntegrityError):
                await shards.transaction(0, failing)
            assert await shards.fetchall(0, "SELECT k FROM t_scratch") == []

            async def passing(cur: Cursor) -> str | Committed[str]:
                await commit_with(cur, TWO_ROWS, [3, 4])
                return Committed("done")

            assert await shards.transaction(0, passing) == "done"
            assert await shards.fetchall(0, "SELECT k FROM t_scratch ORDER BY k") == [(3,), (4,)]
        finally:
            await shards.execute(0, "DROP TABLE IF EXISTS t_scratch")
            await shards.close()

    asyncio.run(run())


async def _status(dsn: str, *names: str) -> list[int]:
    """The server's global counters ``names`` (SHOW GLOBAL STATUS), in order."""
    conn = await asyncmy.connect(**connect_args(parse_dsn(dsn)[0]))
    try:
        async with conn.cursor() as cur:
            await cur.execute("SHOW GLOBAL STATUS")
            found = {str(name): value for name, value in await cur.fetchall()}
    finally:
        conn.close()
    return [int(found[name]) for name in names]


def _users_on_one_table(n: int, prefix: str) -> list[str]:
    """``n`` user ids starting with ``prefix`` whose accounts, ledger and list rows share table 0 of database 0."""
    return list(islice((u for u in (f"{prefix}{i}" for i in count()) if SERVICE_LAYOUT.key_shard(u) == (0, 0)), n))


def test_batches_of_every_size_are_never_prepared(mariadb: MariaDb) -> None:
    """Credits and list rows in batches of 2 to 5 (each batch on one table): the server prepares no
    statement for them (a prepare is a round trip, and each size is a shape of its own)."""
    migrated(mariadb, SERVICE_LAYOUT)

    async def run() -> None:
        shards = MysqlShards(mariadb.dsn, SERVICE_LAYOUT, pool_size=2, timeout_s=5)
        ledger, lists = MysqlLedgerStore(shards), MysqlUserListStore(shards)
        try:
            await shards.connect()
            before = await _status(mariadb.dsn, "Com_stmt_prepare")
            for size in range(2, 6):
                users = _users_on_one_table(size, f"p{size}u")
                credits = [LedgerEntry(u, EntryKind.CREDIT, f"o{size}:{u}", 10, 1) for u in users]
                assert await ledger.post_many(credits) == [True] * size
                await lists.write([ListRow(u, Direction.RECEIVED, f"o{size}", 10, 1) for u in users], [])
            assert await _status(mariadb.dsn, "Com_stmt_prepare") == before
            five = _users_on_one_table(5, "p5u")
            assert [await ledger.balance(u) for u in five] == [10] * 5
        finally:
            await shards.close()

    asyncio.run(run())


def test_pre_orders_read_together_are_never_prepared(mariadb: MariaDb) -> None:
    """Pre-orders read together, 2 to 5 at a time (an IN list each size): the bodies asked for, in
    order (None for an unknown one), and no statement prepared for them."""
    migrated(mariadb, SERVICE_LAYOUT)

    async def run() -> None:
        shards = MysqlShards(mariadb.dsn, SERVICE_LAYOUT, pool_size=2, timeout_s=5)
        preorders = MysqlPreOrderStore(shards)
        candidates = (hongbao_native.encode_order_id(1, 261201, 0, n) for n in count(900))
        order_ids = list(
            islice((o for o in candidates if SERVICE_LAYOUT.order_shard(o)[0] == 0), 5)
        )  # one IN list each
        try:
            await shards.connect()
            for i, order_id in enumerate(order_ids[:4]):
                await preorders.put(order_id, f"body{i}".encode(), 2_000, 1_000)
            before = await _status(mariadb.dsn, "Com_stmt_prepare")
            for size in range(2, 6):
                asked = order_ids[:size][::-1]
                want = [f"body{order_ids.index(o)}".encode() if o != order_ids[4] else None for o in asked]
                assert await preorders.get_many(asked, 1_500) == want
            assert await _status(mariadb.dsn, "Com_stmt_prepare") == before
            assert await preorders.get_many(order_ids[:2], 2_000) == [None, None]  # past pay_by
        finally:
            await shards.close()

    asyncio.run(run())


def test_a_statement_runs_in_its_callers_task(mariadb: MariaDb) -> None:
    """A bounded call costs no Task of its own (a timer bounds it): the body of a transaction runs
    in the caller's task, and still answers within its bound."""
    migrated(mariadb, SERVICE_LAYOUT)

    async def run() -> None:
        shards = MysqlShards(mariadb.dsn, SERVICE_LAYOUT, pool_size=1, timeout_s=5)
        seen: list[asyncio.Task[object] | None] = []

        async def body(cur: Cursor) -> int:
            seen.append(asyncio.current_task())
            await cur.execute("SELECT 1")
            return 1

        try:
            assert await shards.transaction(0, body) == 1
            assert seen == [asyncio.current_task()]
        finally:
            await shards.close()

    asyncio.run(run())
