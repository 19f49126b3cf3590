"""Statements over many keys of a table on a real MariaDB: the list repair's check of which rows
are recorded and the credit marks of a page of receipts join their keys (``key_rows``), so a
page of thousands of keys is answered within the default statement bound (0.3 s), where the same
keys as an OR chain cost the server's range optimizer seconds (quadratic in their number) and the
call failed Degraded; keys match byte for byte, as the tables compare them."""

from __future__ import annotations

import asyncio
import time

import hongbao_native
from hongbao.core.adapters.mysql.db import MysqlShards
from hongbao.core.adapters.mysql.lists import MysqlUserListStore
from hongbao.core.adapters.mysql.packets import MysqlPacketStore
from hongbao.core.packet import Kind, Packet, Status
from hongbao.core.ports import ListRow
from hongbao.core.times import business_yymmdd
from hongbao.core.vocabulary import Direction

from tests.integration.mariadb import SERVICE_LAYOUT, MariaDb, migrated

KEYS = 4000  # one repair page (2 000 receipts and 2 000 packets) on one list table
DAY_MS = 24 * 3600_000


def test_a_page_of_list_keys_is_checked_within_the_statement_bound(mariadb: MariaDb) -> None:
    """4 000 received rows of one user (one list table), one of them best luck: ``recorded`` of
    those keys, of as many never written and of the user's id in another case answers within the
    default bound with exactly the rows written and their flags."""
    migrated(mariadb, SERVICE_LAYOUT)

    async def run() -> None:
        shards = MysqlShards(mariadb.dsn, SERVICE_LAYOUT, pool_size=2)
        lists = MysqlUserListStore(shards)
        try:
            rows = [ListRow("kj", Direction.RECEIVED, f"o{i:06}", 1, i) for i in range(KEYS)]
            await lists.write(rows, [("kj", "o000007")])
            written = [(r.user_id, r.direction, r.order_id) for r in rows]
            absent = [("kj", Direction.RECEIVED, f"x{i:06}") for i in range(KEYS)]
            other_case = [("KJ", Direction.RECEIVED, "o000001"), ("kj", Direction.SENT, "o000001")]
            recorded = await lists.recorded([*written, *absent, *other_case])
            assert recorded == {key: key[2] == "o000007" for key in written}
        finally:
            await shards.close()

    asyncio.run(run())


def test_a_page_of_receipts_is_marked_credited_within_the_statement_bound(mariadb: MariaDb) -> None:
    """A packet of 4 000 shares opened by 4 000 users in one batch: ``mark_credited`` of every
    receipt (one named twice, one of a user who opened nothing) answers within the default bound,
    and every receipt reads credited."""
    migrated(mariadb, SERVICE_LAYOUT)

    async def run() -> None:
        now = int(time.time() * 1000)
        order_id = hongbao_native.encode_order_id(1, business_yymmdd(now), 1, 7101)
        shards = MysqlShards(mariadb.dsn, SERVICE_LAYOUT, pool_size=2)
        store = MysqlPacketStore(shards)
        try:
            packet = Packet(
                order_id, "S", Kind.LUCKY, KEYS, KEYS, "g", None, KEYS, KEYS, Status.ACTIVE, now, now, now + DAY_MS
            )
            assert await store.insert_packet(packet)
            users = [f"u{i:05}" for i in range(KEYS)]
            [results] = await store.open_batches([(order_id, users)], now, hongbao_native.split_lucky)
            assert all(r.receipt is not None for r in results)
            await store.mark_credited([(order_id, u) for u in [*users, users[0], "nobody"]])
            receipts = await store.receipts(order_id)
            assert len(receipts) == KEYS and all(r.credited for r in receipts)
        finally:
            await shards.close()

    asyncio.run(run())
