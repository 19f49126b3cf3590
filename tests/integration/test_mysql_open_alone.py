"""A lone opener's single round trip (MysqlPacketStore._open_alone) on a real MariaDB, against
stale state: two stores (two workers, each with its own memory of the packet) open one packet
at once, user by user, with repeats; the shares, the remainder and best luck add up as the
locked read's would. A store whose memory is stale answers from the state it reads back, a
repeat with the first amount, an expired packet with its refusal, and credits a large share in
its one round trip."""

from __future__ import annotations

import asyncio
import random
import time

import hongbao_native
from hongbao.core.adapters.mysql.db import MysqlShards
from hongbao.core.adapters.mysql.ledger import MysqlLedgerStore
from hongbao.core.adapters.mysql.packets import MysqlPacketStore
from hongbao.core.packet import Kind, Packet, Status
from hongbao.core.times import business_yymmdd
from hongbao.core.vocabulary import Refusal

from tests.e2e.proxy import ThreadProxy
from tests.integration.mariadb import SERVICE_LAYOUT, MariaDb, migrated

DAY_MS = 24 * 3600_000


def _packet(order_id: str, shares: int, total_fen: int, now: int, kind: Kind = Kind.LUCKY) -> Packet:
    status, expires = Status.ACTIVE, now + DAY_MS
    return Packet(order_id, "S", kind, shares, total_fen, "g", None, total_fen, shares, status, now, now, expires)


def test_two_stores_opening_one_packet_at_once_keep_every_fen(mariadb: MariaDb) -> None:
    """30 users (some twice, on the other store) open a 20-share lucky packet through two stores
    at once, one opener a call: 20 receipts, one per user, whose sum is the total; every answer
    matches its receipt and every repeat the first amount; the packet is finished with best luck
    on the largest share (earliest on ties)."""
    migrated(mariadb, SERVICE_LAYOUT)

    async def run() -> None:
        now = int(time.time() * 1000)
        order_id = hongbao_native.encode_order_id(1, business_yymmdd(now), 1, 7600)
        shards = [MysqlShards(mariadb.dsn, SERVICE_LAYOUT, pool_size=4, timeout_s=10) for _ in range(2)]
        stores = [MysqlPacketStore(s) for s in shards]
        rng = random.Random(7)
        users = [f"u{i}" for i in range(30)]
        calls = [(stores[i % 2], u) for i, u in enumerate(users)] + [(stores[1], u) for u in rng.sample(users, 10)]
        rng.shuffle(calls)
        try:
            assert await stores[0].insert_packet(_packet(order_id, 20, 5_000, now))

            async def open_one(store: MysqlPacketStore, user: str) -> tuple[str, int | None, bool]:
                await asyncio.sleep(rng.random() * 0.05)
                [[result]] = await store.open_batches([(order_id, [user])], now, hongbao_native.split_lucky)
                return user, None if result.receipt is None else result.receipt.amount_fen, result.repeat

            answers = await asyncio.gather(*(open_one(store, user) for store, user in calls))
            receipts = {r.user_id: r.amount_fen for r in await stores[0].receipts(order_id)}
            assert len(receipts) == 20 and sum(receipts.values()) == 5_000
            for user, amount, _ in answers:
                assert amount is None or amount == receipts[user], user
            assert {u for u, amount, repeat in answers if amount is not None and not repeat} == set(receipts)
            packet = await stores[0].get_packet(order_id)
            assert packet is not None and (packet.status, packet.remaining_fen, packet.remaining_count) == (
                Status.FINISHED,
                0,
                0,
            )
            in_order = [r for r in await stores[0].receipts(order_id)]
            best = max(in_order, key=lambda r: (r.amount_fen, -in_order.index(r)))
            assert await stores[0].best_luck(order_id) == best.user_id
        finally:
            for s in shards:
                await s.close()

    asyncio.run(run())


def test_a_stale_store_answers_from_the_state_it_reads_back(mariadb: MariaDb) -> None:
    """Store A paid the packet (it knows its first state); store B opens a share. A's next lone
    opener sends two requests (the UPDATE that finds the row changed, reading it back; then the
    same from that state) and gets the right share; a user B opened gets their first amount as
    a repeat in one request; once the packet has expired, the answer is "expired"."""
    migrated(mariadb, SERVICE_LAYOUT)
    with ThreadProxy(mariadb.port) as proxy:
        port = proxy.start()

        async def run() -> None:
            now = int(time.time() * 1000)
            order_id = hongbao_native.encode_order_id(1, business_yymmdd(now), 1, 7700)
            shards_a = MysqlShards(
                mariadb.dsn.rsplit(":", 1)[0] + f":{port}", SERVICE_LAYOUT, pool_size=1, timeout_s=10
            )
            shards_b = MysqlShards(mariadb.dsn, SERVICE_LAYOUT, pool_size=1, timeout_s=10)
            a, b = MysqlPacketStore(shards_a), MysqlPacketStore(shards_b)
            try:
                assert await a.insert_packet(_packet(order_id, 5, 500, now, Kind.EQUAL))
                await a.open_batches([(order_id, ["W"])], now, hongbao_native.split_lucky)  # a warm connection
                [[first]] = await b.open_batches([(order_id, ["B"])], now, hongbao_native.split_lucky)
                assert first.receipt is not None and first.receipt.amount_fen == 100
                for user, requests, repeat in (("C", 2, False), ("B", 1, True)):
                    before = proxy.proxy.requests
                    [[result]] = await a.open_batches([(order_id, [user])], now, hongbao_native.split_lucky)
                    assert proxy.proxy.requests - before == requests, user
                    assert result.receipt is not None and (result.receipt.amount_fen, result.repeat) == (100, repeat)
                packet = await a.get_packet(order_id)
                assert packet is not None and (packet.remaining_fen, packet.remaining_count) == (200, 2)
                assert sorted(r.user_id for r in await a.receipts(order_id)) == ["B", "C", "W"]
                later = now + DAY_MS
                [[expired]] = await a.open_batches([(order_id, ["D"])], later, hongbao_native.split_lucky)
                assert (expired.receipt, expired.refusal) == (None, Refusal.EXPIRED)
            finally:
                await shards_a.close()
                await shards_b.close()

        asyncio.run(run())


def test_a_lone_large_share_is_credited_in_its_one_round_trip(mariadb: MariaDb) -> None:
    """With the ledger here, a lone opener's share at or above credit_from is credited in the
    same request as its receipt: the balance holds it, the receipt is marked, and a small share
    after it is left pending."""
    migrated(mariadb, SERVICE_LAYOUT)
    with ThreadProxy(mariadb.port) as proxy:
        port = proxy.start()

        async def run() -> None:
            now = int(time.time() * 1000)
            order_id = hongbao_native.encode_order_id(1, business_yymmdd(now), 1, 7800)
            shards = MysqlShards(mariadb.dsn.rsplit(":", 1)[0] + f":{port}", SERVICE_LAYOUT, pool_size=1, timeout_s=10)
            store, ledger = MysqlPacketStore(shards, ledger_here=True), MysqlLedgerStore(shards)
            amounts = iter((1, 5_000, 10))
            try:
                assert await store.insert_packet(_packet(order_id, 4, 6_000, now))
                await store.open_batches([(order_id, ["W"])], now, lambda fen, count: next(amounts), 3_000)  # warm
                before = proxy.proxy.requests
                [[large]] = await store.open_batches([(order_id, ["A"])], now, lambda fen, count: next(amounts), 3_000)
                assert proxy.proxy.requests - before == 1
                assert large.receipt is not None and (large.receipt.amount_fen, large.receipt.credited) == (5_000, True)
                [[small]] = await store.open_batches([(order_id, ["B"])], now, lambda fen, count: next(amounts), 3_000)
                assert small.receipt is not None and (small.receipt.amount_fen, small.receipt.credited) == (10, False)
                assert (await ledger.balance("A"), await ledger.balance("B")) == (5_000, 0)
                stored = {r.user_id: r.credited for r in await store.receipts(order_id)}
                assert stored == {"W": False, "A": True, "B": False}
                packet = await store.get_packet(order_id)
                assert packet is not None and (packet.remaining_fen, packet.remaining_count) == (989, 1)
            finally:
                await shards.close()

        asyncio.run(run())
