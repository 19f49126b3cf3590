"""An open that credits its large receipts in its own transaction, on a real MariaDB: with the
ledger in the packet's shards (``ledger_here``), the receipts at or above ``credit_from`` get
their ledger entry and balance, and come back credited, in the open's two round trips, whichever
database their receiver's account is on; smaller ones stay pending. A credit already in the
ledger reruns the open without credits (nothing counted twice); stores without ``ledger_here``
credit nothing."""

from __future__ import annotations

import asyncio
import time
from itertools import count

import hongbao_native
from hongbao.core.adapters.mysql.db import MysqlShards
from hongbao.core.adapters.mysql.ledger import MysqlLedgerStore
from hongbao.core.adapters.mysql.packets import MysqlPacketStore
from hongbao.core.packet import Kind, Packet, Receipt, Status
from hongbao.core.ports import Draw, credit_entry
from hongbao.core.times import business_yymmdd
from hongbao.core.vocabulary import EntryKind

from tests.e2e.proxy import ThreadProxy
from tests.integration.mariadb import SERVICE_LAYOUT, MariaDb, migrated

DAY_MS = 24 * 3600_000


def _shares(*amounts: int) -> Draw:
    """A draw that hands out ``amounts`` in turn (the split under test is not the draw)."""
    left = iter(amounts)
    return lambda remaining_fen, remaining_count: next(left)


def _packet(order_id: str, shares: int, total_fen: int, now: int) -> Packet:
    status, expires = Status.ACTIVE, now + DAY_MS
    return Packet(order_id, "S", Kind.LUCKY, shares, total_fen, "g", None, total_fen, shares, status, now, now, expires)


def _users_by_database() -> tuple[str, str]:
    """A user whose account is on database 0 and one on database 1 of SERVICE_LAYOUT."""
    users: dict[int, str] = {}
    for i in count():
        users.setdefault(SERVICE_LAYOUT.key_shard(f"oc{i}")[0], f"oc{i}")
        if len(users) == 2:
            return users[0], users[1]
    raise AssertionError("unreachable")


def test_large_receipts_are_credited_in_the_open_transaction(mariadb: MariaDb) -> None:
    """A batch of three openers, two at or above credit_from (their accounts on both databases):
    two requests to the server as before; those two come back credited, their ledger entries and
    balances written and their rows marked; the small one is pending with no entry. A later
    credit of the same receipts applies nothing (one credit each)."""
    migrated(mariadb, SERVICE_LAYOUT)
    with ThreadProxy(mariadb.port) as proxy:
        port = proxy.start()

        async def run() -> None:
            now = int(time.time() * 1000)
            shards = MysqlShards(mariadb.dsn.rsplit(":", 1)[0] + f":{port}", SERVICE_LAYOUT, pool_size=1, timeout_s=10)
            store, ledger = MysqlPacketStore(shards, ledger_here=True), MysqlLedgerStore(shards)
            home, away = _users_by_database()
            order_id = hongbao_native.encode_order_id(1, business_yymmdd(now), 1, 7300)
            try:
                assert await store.insert_packet(_packet(order_id, 4, 10_000, now))
                await store.open_batches([(order_id, ["W"])], now, _shares(1), 3000)  # a warm connection; 1 < 3000
                before = proxy.proxy.requests
                batch = [(order_id, [home, "small", away])]
                [results] = await store.open_batches(batch, now, _shares(3000, 999, 5000), 3000)
                assert proxy.proxy.requests - before == 2
                got = {r.receipt.user_id: (r.receipt.amount_fen, r.receipt.credited) for r in results if r.receipt}
                assert got == {home: (3000, True), "small": (999, False), away: (5000, True)}
                assert (await ledger.balance(home), await ledger.balance(away), await ledger.balance("small")) == (
                    3000,
                    5000,
                    0,
                )
                assert await ledger.amount(away, EntryKind.CREDIT, f"{order_id}:{away}") == 5000
                assert await ledger.amount("small", EntryKind.CREDIT, f"{order_id}:small") is None
                stored = {r.user_id: r.credited for r in await store.receipts(order_id)}
                assert stored == {"W": False, home: True, "small": False, away: True}
                receipts = [r.receipt for r in results if r.receipt]
                assert await ledger.post_many([credit_entry(r, now) for r in receipts]) == [False, True, False]
                assert (await ledger.balance(home), await ledger.balance(away), await ledger.balance("small")) == (
                    3000,
                    5000,
                    999,
                )
            finally:
                await shards.close()

        asyncio.run(run())


def test_a_credit_already_in_the_ledger_reruns_the_open_without_credits(mariadb: MariaDb) -> None:
    """The receipt's ledger row is there before the open (DUP_ENTRY in the open's transaction):
    the open is rerun without credits, so the receipt is written once, pending, the balance keeps
    only the earlier entry, and the remainder counts the share once."""
    migrated(mariadb, SERVICE_LAYOUT)

    async def run() -> None:
        now = int(time.time() * 1000)
        shards = MysqlShards(mariadb.dsn, SERVICE_LAYOUT, pool_size=1, timeout_s=10)
        store, ledger = MysqlPacketStore(shards, ledger_here=True), MysqlLedgerStore(shards)
        order_id = hongbao_native.encode_order_id(1, business_yymmdd(now), 1, 7400)
        try:
            assert await store.insert_packet(_packet(order_id, 2, 8000, now))
            assert await ledger.post_many([credit_entry(Receipt(order_id, "A", 7, now), now)]) == [True]
            [[result]] = await store.open_batches([(order_id, ["A"])], now, _shares(5000, 5000), 1)
            assert result.receipt is not None and (result.receipt.amount_fen, result.receipt.credited) == (5000, False)
            assert await ledger.balance("A") == 7
            [stored] = await store.receipts(order_id)
            assert (stored.amount_fen, stored.credited) == (5000, False)
            packet = await store.get_packet(order_id)
            assert packet is not None and (packet.remaining_fen, packet.remaining_count) == (3000, 1)
        finally:
            await shards.close()

    asyncio.run(run())


def test_a_store_without_the_ledger_credits_nothing(mariadb: MariaDb) -> None:
    """``ledger_here`` off (the ledger in another region's shards): credit_from is ignored."""
    migrated(mariadb, SERVICE_LAYOUT)

    async def run() -> None:
        now = int(time.time() * 1000)
        shards = MysqlShards(mariadb.dsn, SERVICE_LAYOUT, pool_size=1, timeout_s=10)
        store, ledger = MysqlPacketStore(shards), MysqlLedgerStore(shards)
        order_id = hongbao_native.encode_order_id(1, business_yymmdd(now), 1, 7500)
        try:
            assert await store.insert_packet(_packet(order_id, 1, 8000, now))
            [[result]] = await store.open_batches([(order_id, ["A"])], now, _shares(8000), 1)
            assert result.receipt is not None and not result.receipt.credited
            assert await ledger.balance("A") == 0
        finally:
            await shards.close()

    asyncio.run(run())
