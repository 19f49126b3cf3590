"""The hot-packet benchmark (bench/mysql_hot.py) runs once as a correctness test on the real MariaDB.

Its speed goal (batched / per open >= 10x, ``--floor``) is the benchmark's: a ratio of two wall
clocks under a third of a second is noise on a loaded 2-core machine, so this test checks that
both modes are exactly right and reports the ratio it saw.
"""

from __future__ import annotations

import asyncio

from hongbao.bench.mysql_hot import compare
from hongbao.core.sharding import Layout

from tests.integration.mariadb import MariaDb, migrated


def test_batched_and_per_open_modes_are_exactly_right(mariadb: MariaDb) -> None:
    """300 openers on 100-share packets, 3 rounds a mode: each round exactly 100 receipts summing to
    the total, every other opener refused 'finished', the packet finished."""
    layout = migrated(mariadb, Layout(2, 2, prefix="hot_"))
    batched, single = asyncio.run(compare(mariadb.dsn, layout, rounds=3))
    assert batched.correct and single.correct
    assert batched.opens == single.opens == 300
    assert batched.seconds > 0 and single.seconds > 0
    print(
        f"hot packet: batched {batched.opens_per_s:.0f} opens/s, per open {single.opens_per_s:.0f} opens/s, "
        f"{batched.opens_per_s / single.opens_per_s:.1f}x"
    )
