"""A MySQL bound that passes while the worker's own loop was stalled is overload, not evidence of a
frozen server: on a machine out of CPU both the worker and MariaDB run late. The call answers Busy
(429) and the database's breaker stays shut, so one starved moment does not turn into 503s for
every request to that database; the same slow statements with the loop running on time trip the
breaker, as a frozen server does. Real MariaDB (``SELECT SLEEP`` past the bound for a server
that answers late); the stall is the worker's loop blocked (time.sleep) while a statement is out."""

from __future__ import annotations

import asyncio
import time

import pytest
import uvloop
from hongbao.core.adapters.mysql.db import TIMEOUTS_TO_TRIP, MysqlShards
from hongbao.core.errors import Busy, Degraded
from hongbao.core.loop_lag import LoopLag

from tests.integration.mariadb import SERVICE_LAYOUT, MariaDb, migrated

BOUND_S = 0.3
LATE_SQL = "SELECT SLEEP(0.5)"  # a server answering after the bound


async def _late_call(shards: MysqlShards, stall_s: float) -> None:
    """A statement answered after the bound, the loop stalled ``stall_s`` meanwhile."""
    call = asyncio.ensure_future(shards.fetchone(0, LATE_SQL))
    await asyncio.sleep(0.02)  # the statement is on its way
    time.sleep(stall_s)
    await call


def test_bounds_passed_while_the_loop_stalled_are_busy_and_leave_the_breaker_shut(mariadb: MariaDb) -> None:
    """TIMEOUTS_TO_TRIP + 1 late statements while the loop stalled 0.4 s each: each Busy, the
    breaker shut, the next call served; TIMEOUTS_TO_TRIP late ones with the loop on time:
    Degraded, and the breaker open."""
    migrated(mariadb, SERVICE_LAYOUT)

    async def scenario() -> None:
        lag = LoopLag()
        lag.start()
        shards = MysqlShards(mariadb.dsn, SERVICE_LAYOUT, pool_size=2, timeout_s=BOUND_S, lag=lag)
        try:
            assert await shards.fetchone(0, "SELECT 1") == (1,)
            for _ in range(TIMEOUTS_TO_TRIP + 1):
                with pytest.raises(Busy):
                    await _late_call(shards, stall_s=0.4)
            assert not any(shards.breakers().values())
            assert await shards.fetchone(0, "SELECT 1") == (1,)
            for _ in range(TIMEOUTS_TO_TRIP):
                with pytest.raises(Degraded):
                    await _late_call(shards, stall_s=0.0)
            assert shards.breakers()[SERVICE_LAYOUT.db_name(0)]
        finally:
            lag.stop()
            await shards.close()

    uvloop.run(scenario())  # the worker's loop


def test_callers_queued_behind_busy_connections_leave_the_breaker_shut(mariadb: MariaDb) -> None:
    """A pool of 2 with one connection busy: 3 callers arrive in one tick (the pool could grow, so
    each may dial); one dials the second connection, which stays busy too, the other two wait for a
    release past the connect bound. Their connect went through: that is congestion, so they get
    Degraded "busy" and the breaker stays shut (it opened, failing every call for 0.5 s, when
    any caller that arrived with room in the pool timed out as if its connect hung)."""
    migrated(mariadb, SERVICE_LAYOUT)

    async def scenario() -> None:
        shards = MysqlShards(mariadb.dsn, SERVICE_LAYOUT, pool_size=2, timeout_s=5.0)
        try:
            assert await shards.fetchone(0, "SELECT 1") == (1,)  # one connection, free
            busy = [asyncio.ensure_future(shards.fetchone(0, "SELECT SLEEP(1.6)"))]
            await asyncio.sleep(0.05)  # it holds the pool's only connection
            queued = [asyncio.ensure_future(shards.fetchone(0, "SELECT SLEEP(1.6)")) for _ in range(3)]
            outcomes = await asyncio.gather(*queued, return_exceptions=True)
            await asyncio.gather(*busy)
            refused = [o for o in outcomes if isinstance(o, BaseException)]
            assert len(refused) == 2 and all(isinstance(o, Degraded) and "busy" in str(o) for o in refused), outcomes
            assert not any(shards.breakers().values())
            assert await shards.fetchone(0, "SELECT 1") == (1,)
        finally:
            await shards.close()

    uvloop.run(scenario())
