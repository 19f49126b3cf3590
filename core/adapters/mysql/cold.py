"""``hongbao migrate --cold``: move closed packets older than the hot window to the cold databases.

For each database ``db_NN`` the cold database ``db_NN_cold`` (same server) gets the same day
tables. A packet moves with its receipts when it was created before the hot window
(``hot_days`` business days), is finished or refunded, and has no receipt still waiting for its
credit, so the refund job and the reconciler never need the cold side. Each batch is one
transaction over both databases (one InnoDB instance): a packet is in exactly one of them at
every moment, and a rerun after a crash simply continues. The day tables of the hot window
themselves are left alone (their old rows move once those days leave the window).
"""

from __future__ import annotations

import asyncio

import asyncmy
from asyncmy.connection import Connection
from hongbao.core.adapters.mysql.db import connect_args, marks
from hongbao.core.adapters.mysql.schema import day_tables
from hongbao.core.sharding import Layout, parse_dsn
from hongbao.core.times import business_yymmdd

DAY_MS = 24 * 3600 * 1000
BATCH = 500  # packets per transaction


def hot_days_of_month(now_ms: int, hot_days: int) -> set[int]:
    """The days of month (1..31) of the last ``hot_days`` business days, today included."""
    return {business_yymmdd(now_ms - k * DAY_MS) % 100 for k in range(hot_days)}


async def move_cold(dsn: str, layout: Layout, now_ms: int) -> int:
    """Move every closed packet created before ``now_ms - hot_days`` days (with its receipts)
    out of the day tables outside the hot window; returns how many packets moved. Idempotent."""
    servers = parse_dsn(dsn)
    moved = await asyncio.gather(
        *(_move_db(servers[db % len(servers)], layout, db, now_ms) for db in range(layout.n_dbs))
    )
    return sum(moved)


async def _move_db(server: dict[str, object], layout: Layout, db: int, now_ms: int) -> int:
    hot, cold = layout.db_name(db), layout.cold_name(db)
    cutoff = now_ms - layout.hot_days * DAY_MS
    skip = hot_days_of_month(now_ms, layout.hot_days)
    conn = await asyncmy.connect(**connect_args(server, connect_timeout_s=10.0))
    moved = 0
    try:
        async with conn.cursor() as cur:
            await cur.execute("SET SESSION sql_notes = 0")
            await cur.execute(f"CREATE DATABASE IF NOT EXISTS `{cold}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        for ptable, rtable in day_tables(layout):
            if int(ptable[-2:]) in skip:
                continue
            async with conn.cursor() as cur:
                for table in (ptable, rtable):
                    await cur.execute(f"CREATE TABLE IF NOT EXISTS `{cold}`.{table} LIKE `{hot}`.{table}")
            while batch := await _move_batch(
                conn, f"`{hot}`.{ptable}", f"`{hot}`.{rtable}", f"`{cold}`.{ptable}", f"`{cold}`.{rtable}", cutoff
            ):
                moved += batch
    finally:
        conn.close()
    return moved


async def _move_batch(conn: Connection, ptable: str, rtable: str, cold_p: str, cold_r: str, cutoff: int) -> int:
    """One transaction: lock up to BATCH movable packets, copy them and their receipts, delete them."""
    await conn.begin()
    try:
        async with conn.cursor() as cur:
            await cur.execute(
                f"SELECT order_id FROM {ptable} p WHERE created_at < %s AND status IN ('finished', 'refunded') "
                f"AND NOT EXISTS (SELECT 1 FROM {rtable} r WHERE r.order_id = p.order_id "
                "AND r.credit_status = 'pending') "
                "LIMIT %s FOR UPDATE",
                (cutoff, BATCH),
            )
            ids = [str(row[0]) for row in await cur.fetchall()]
            if ids:
                where = f"order_id IN ({marks(ids)})"
                for source, target in ((rtable, cold_r), (ptable, cold_p)):
                    await cur.execute(f"INSERT INTO {target} SELECT * FROM {source} WHERE {where}", ids)
                    await cur.execute(f"DELETE FROM {source} WHERE {where}", ids)
        await conn.commit()
    except BaseException:
        await conn.rollback()
        raise
    return len(ids)
