""" "Queue down at open" for the user lists (docs/architecture.md sections 5, 10): with the lists stream's
redis-server stopped for real, the sent and received rows (and the best-luck flag) that pay and
open could not queue are written by the periodic reconciler from the database, once."""

from __future__ import annotations

import asyncio

from hongbao.core.clock import ManualClock
from hongbao.core.services import Services

from tests.core import test_service as suite
from tests.core.conftest import admission, clock  # noqa: F401  (fixtures)
from tests.integration.private_redis import PrivateRedis, private_redis  # noqa: F401  (fixture)
from tests.integration.test_redis_money import Open, open_on  # noqa: F401  (fixture)


async def _rows(svc: Services, user: str, direction: str) -> list[tuple[str, int, bool]]:
    now = svc.ports.clock.now_ms()
    return sorted(
        (i.order_id, i.amount_fen, i.best_luck) for i in await svc.ports.lists.page(user, direction, 0, now + 1, 0, 20)
    )


async def test_reconciler_writes_the_list_rows_a_dead_queue_lost(
    open_on: Open, clock: ManualClock, private_redis: PrivateRedis
) -> None:
    """Redis stopped at pay and open: no list row is written then; the reconciler writes the sent
    row, every received row and the best-luck flag, and a second run writes nothing."""
    backend, counts = await open_on(private_redis.url, False)
    svc = backend.services
    await suite._group(svc, "g", ["S", "A", "B", "C"])
    before = await suite._paid(svc, "S", {"count": 3, "total_fen": 300, "group_id": "g"}, fund=1000)
    await svc.opening.open("A", before)  # queued while Redis is up
    await svc.lists.drain()
    await private_redis.stop()

    during = await suite._paid(svc, "S", {"count": 2, "total_fen": 200, "group_id": "g"})
    draw, svc.opening.draw = svc.opening.draw, suite._scripted([150, 50])
    amounts = {u: (await svc.opening.open(u, during))[0].amount_fen for u in ("A", "B")}
    svc.opening.draw = draw
    late = (await svc.opening.open("B", before))[0].amount_fen
    assert amounts == {"A": 150, "B": 50} and counts["redis_fallback_queue"] >= 3
    assert await _rows(svc, "S", "sent") == [(before, 300, False)]
    assert await _rows(svc, "B", "received") == []

    clock.advance_ms(1)
    await svc.settlement.reconcile(window_ms=0)
    assert await _rows(svc, "S", "sent") == sorted([(before, 300, False), (during, 200, False)])
    a_first = await svc.ports.packets.receipt(before, "A")
    assert a_first is not None
    assert await _rows(svc, "A", "received") == sorted([(before, a_first.amount_fen, False), (during, 150, True)])
    assert await _rows(svc, "B", "received") == sorted([(before, late, False), (during, 50, False)])
    assert await svc.lists.repair(window_ms=0) == 0


async def test_repair_goes_on_past_a_full_page_within_one_millisecond(
    open_on: Open, clock: ManualClock, private_redis: PrivateRedis
) -> None:
    """Five receipts opened in the same millisecond while the lists queue is down, repaired in
    pages of three: the first run stops at that millisecond, the second reads it whole and writes
    the last two rows (it stalled there: their openers' lists never showed them), a third nothing;
    every opener's row is there, one of them flagged best luck."""
    backend, _ = await open_on(private_redis.url, False)
    svc = backend.services
    users = [f"U{i}" for i in range(5)]
    await suite._group(svc, "g", ["S", *users])
    order_id = await suite._paid(svc, "S", {"count": 5, "total_fen": 500, "group_id": "g"}, fund=500)
    await svc.lists.drain()
    await private_redis.stop()
    await asyncio.gather(*(svc.opening.open(u, order_id) for u in users))
    clock.advance_ms(1)
    assert await svc.lists.repair(window_ms=0, limit=3) >= 3  # a page of rows (and the flag, if its row is in)
    assert await svc.lists.repair(window_ms=0, limit=3) >= 2
    assert await svc.lists.repair(window_ms=0, limit=3) == 0
    rows = [row for u in users for row in await _rows(svc, u, "received")]
    assert [o for o, _, _ in rows] == [order_id] * 5 and [best for _, _, best in rows].count(True) == 1
