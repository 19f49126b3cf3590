"""The money audit of the baseline (docs/architecture.md section 11, over its MySQL tables and Redis keys).

Checks, per packet: the shares opened in Redis plus the amounts left in its list equal its total;
every opened share (Redis) has its receipt in MySQL with the same amount (the asynchronous write
may lose it); at most ``count`` receipts, each at least 1 fen. Overall: every balance equals its
ledger, and balances plus what the lists still hold equal the top-ups (a receipt whose write was
lost is money the receiver never got). Same report shape as ``hongbao.core.audit``.
"""

from __future__ import annotations

from collections import defaultdict

import asyncmy
import redis.asyncio as aioredis
from hongbao.bench.baselines.app import DATABASE
from hongbao.core.audit import AuditReport
from hongbao.core.sharding import parse_dsn


async def audit_baseline(mysql_dsn: str, redis_url: str) -> AuditReport:
    """Audit the baseline's data behind ``mysql_dsn`` and ``redis_url``; read-only."""
    report = AuditReport()
    bad, counts = report.violations, report.counts
    async with asyncmy.connect(db=DATABASE, **parse_dsn(mysql_dsn)[0]) as conn, conn.cursor() as cur:
        await cur.execute("SELECT order_id, total_fen, count FROM b_packet")
        packets = {str(o): (int(t), int(c)) for o, t, c in await cur.fetchall()}
        await cur.execute("SELECT order_id, user_id, amount_fen FROM b_receipt")
        receipts: dict[str, dict[str, int]] = defaultdict(dict)
        for order_id, user_id, amount in await cur.fetchall():
            receipts[str(order_id)][str(user_id)] = int(amount)
        await cur.execute("SELECT user_id, balance_fen FROM b_account")
        balances = {str(u): int(b) for u, b in await cur.fetchall()}
        await cur.execute("SELECT user_id, SUM(amount_fen) FROM b_ledger GROUP BY user_id")
        ledger = {str(u): int(s) for u, s in await cur.fetchall()}
        await cur.execute("SELECT COALESCE(SUM(amount_fen), 0) FROM b_ledger WHERE kind = 'topup'")
        topups = int((await cur.fetchone())[0])
    client = aioredis.from_url(redis_url, decode_responses=True)
    left_total = 0
    try:
        for order_id, (total, count) in packets.items():
            left = [int(a) for a in await client.lrange(f"bl:amounts:{order_id}", 0, -1)]
            opened = {str(u): int(a) for u, a in (await client.hgetall(f"bl:opened:{order_id}")).items()}
            written = receipts.get(order_id, {})
            left_total += sum(left)
            counts["packets"] += 1
            counts["receipts"] += len(written)
            counts["shares opened"] += len(opened)
            if sum(opened.values()) + sum(left) != total:
                bad.append(f"{order_id}: opened {sum(opened.values())} + left {sum(left)} != total {total}")
            lost = {u: a for u, a in opened.items() if written.get(u) != a}
            counts["receipts lost"] += len(lost)
            for user_id, amount in sorted(lost.items()):
                bad.append(f"receipt {order_id}:{user_id} of {amount} fen opened but not in MySQL")
            if len(written) > count or any(a < 1 for a in written.values()):
                bad.append(f"{order_id}: {len(written)} receipts for count {count}, smallest {min(written.values())}")
    finally:
        await client.aclose()
    for user_id in set(balances) | set(ledger):
        if balances.get(user_id, 0) != ledger.get(user_id, 0):
            bad.append(f"{user_id}: balance {balances.get(user_id, 0)} != ledger sum {ledger.get(user_id, 0)}")
    held = sum(balances.values()) + left_total
    counts["top-ups fen"] = topups
    if held != topups:
        bad.append(
            f"money made or lost: balances {sum(balances.values())} + left in lists {left_total} = {held} "
            f"!= top-ups {topups}"
        )
    return report
