"""The hot-packet benchmark: opens per second on one 100-share packet, refilled in a
loop, with 300 concurrent openers, batched transactions vs one transaction per open, on the same
MySQL/MariaDB in one run (the ratio is the result; absolute numbers follow the machine).

- batched: the service's OpenBatcher over MysqlPacketStore.open_batches (at most ``max_in_db``
  transactions per packet at once, each carrying every opener waiting: one row lock, one
  multi-row insert, one update);
- per open: every opener runs its own open transaction for itself alone, all at once,
  queueing on the packet's row lock.

Both use the same pool size. Each round pays a fresh packet (``shares`` shares, 1..``shares``
fen each), lets ``openers`` distinct users open it at once, and checks it: exactly ``shares``
receipts summing to the total, the packet finished. A round that is not exactly right makes the
run incorrect (``HotResult.correct``), whatever its speed.

Usage: ``python -m hongbao.bench.mysql_hot --mysql-dsn mysql://user:pass@host:port`` on a layout
of its own, migrated first (``hongbao migrate`` with ``mysql_prefix = "bench_"``; ``--prefix``,
``--dbs``, ``--tables`` as migrated): its packets take DB-sequence order ids of 2026-01-01.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass
from itertools import count

import hongbao_native
from hongbao.core.adapters.mysql.db import MysqlShards
from hongbao.core.adapters.mysql.packets import MysqlPacketStore
from hongbao.core.batching import OpenBatcher
from hongbao.core.packet import Kind, Packet, Status
from hongbao.core.ports import OpenResult
from hongbao.core.sharding import Layout

DAY_MS = 24 * 3600 * 1000
_sequence = count(int(time.time()) % 10_000_000 * 1000)


@dataclass(frozen=True, slots=True)
class HotResult:
    """One mode's run: ``opens`` receipts in ``seconds`` (wall clock), and whether every round was right."""

    mode: str
    opens: int
    seconds: float
    correct: bool

    @property
    def opens_per_s(self) -> float:
        """Receipts per second of wall-clock time."""
        return self.opens / self.seconds


def _packet(now_ms: int, shares: int) -> Packet:
    order_id = hongbao_native.encode_order_id(1, 260101, 1, next(_sequence))
    total = shares * (shares + 1) // 2
    return Packet(
        order_id,
        "bench-sender",
        Kind.LUCKY,
        shares,
        total,
        "bench",
        None,
        total,
        shares,
        Status.ACTIVE,
        now_ms,
        now_ms,
        now_ms + DAY_MS,
    )


async def run_mode(
    shards: MysqlShards, batched: bool, *, rounds: int, openers: int = 300, shares: int = 100, max_in_db: int = 2
) -> HotResult:
    """``rounds`` fresh packets, each opened by ``openers`` users at once; the time covers the opens only."""
    store = MysqlPacketStore(shards)
    now_ms = int(time.time() * 1000)
    admission = hongbao_native.AdmissionTable.create(f"bench-hot-{os.getpid()}-{int(batched)}", 1024)
    batcher = OpenBatcher(
        lambda batches: store.open_batches(batches, now_ms, hongbao_native.split_lucky),
        store.database,
        admission,
        max_in_db=max_in_db,
    )
    users = [f"bench-user-{i}" for i in range(openers)]
    opens, seconds, correct = 0, 0.0, True
    try:
        for _ in range(rounds):
            packet = _packet(now_ms, shares)
            await store.insert_packet(packet)
            started = time.perf_counter()
            if batched:
                results = await asyncio.gather(*(batcher.open(packet.order_id, u) for u in users))
            else:
                alone = await asyncio.gather(
                    *(store.open_batches([(packet.order_id, [u])], now_ms, hongbao_native.split_lucky) for u in users)
                )
                results = [r for [outcome] in alone for r in outcome]
            seconds += time.perf_counter() - started
            opens += sum(r.receipt is not None for r in results)
            correct = correct and await _right(store, packet, results)
    finally:
        admission.unlink()
    return HotResult("batched" if batched else "per open", opens, seconds, correct)


async def _right(store: MysqlPacketStore, packet: Packet, results: list[OpenResult]) -> bool:
    receipts = await store.receipts(packet.order_id)
    stored = await store.get_packet(packet.order_id)
    return (
        sum(r.receipt is not None for r in results) == packet.count == len(receipts)
        and sum(r.amount_fen for r in receipts) == packet.total_fen
        and min(r.amount_fen for r in receipts) >= 1
        and all(r.refusal == "finished" for r in results if r.receipt is None)
        and stored is not None
        and stored.status is Status.FINISHED
    )


async def compare(dsn: str, layout: Layout, *, rounds: int = 10, pool_size: int = 10) -> tuple[HotResult, HotResult]:
    """(batched, per open) on the same server and pool size, one warm-up round each first."""
    # The per-open side queues every opener's transaction on one row lock, by design: the product's
    # bound on a transaction (which would cut it short with Degraded) is lifted for both sides.
    shards = MysqlShards(dsn, layout, pool_size=pool_size, transaction_timeout_s=120.0)
    try:
        await shards.connect()
        for batched in (True, False):
            await run_mode(shards, batched, rounds=1)
        return await run_mode(shards, True, rounds=rounds), await run_mode(shards, False, rounds=rounds)
    finally:
        await shards.close()


def main(argv: list[str] | None = None) -> int:
    """Print both rates and the ratio; exit 1 when a run was incorrect or the ratio is below ``--floor``."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--mysql-dsn", required=True)
    args.add_argument("--prefix", default="bench_")
    args.add_argument("--dbs", type=int, default=4)
    args.add_argument("--tables", type=int, default=4)
    args.add_argument("--rounds", type=int, default=10)
    args.add_argument("--floor", type=float, default=10.0, help="minimum batched / per-open ratio (default 10)")
    ns = args.parse_args(argv)
    batched, single = asyncio.run(compare(ns.mysql_dsn, Layout(ns.dbs, ns.tables, ns.prefix), rounds=ns.rounds))
    ratio = batched.opens_per_s / single.opens_per_s
    for result in (batched, single):
        print(
            f"{result.mode:>9}: {result.opens_per_s:10.0f} opens/s ({result.opens} opens in {result.seconds:.2f} s, "
            f"{'correct' if result.correct else 'INCORRECT'})"
        )
    print(f"    ratio: {ratio:.1f}x (floor {ns.floor}x)")
    return 0 if batched.correct and single.correct and ratio >= ns.floor else 1


if __name__ == "__main__":
    sys.exit(main())
