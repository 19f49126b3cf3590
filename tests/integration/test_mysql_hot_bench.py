"""The hot-packet benchmark (bench/mysql_hot.py) runs once as a correctness test on the real MariaDB."""

from __future__ import annotations

import asyncio

from hongbao.bench.mysql_hot import compare
from hongbao.core.sharding import Layout

from tests.integration.mariadb import MariaDb, migrated


def test_batched_opens_beat_one_transaction_per_open(mariadb: MariaDb) -> None:
    """300 openers on 100-share packets: both modes exactly right, batching several times faster
    (10x is the bench's floor)."""
    layout = migrated(mariadb, Layout(2, 2, prefix="hot_"))
    batched, single = asyncio.run(compare(mariadb.dsn, layout, rounds=3))
    assert batched.correct and single.correct
    assert batched.opens == single.opens == 300
    ratio = batched.opens_per_s / single.opens_per_s
    print(
        f"hot packet: batched {batched.opens_per_s:.0f} opens/s, "
        f"per open {single.opens_per_s:.0f} opens/s, {ratio:.1f}x"
    )
    assert ratio >= 3, (batched, single)
