"""The crediting and list jobs on the embedded backend write a claimed batch in a fixed number of
trips to the write thread, however many messages it holds (the storm's finished-push tail was
three trips per credit and two per list row)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from hongbao.core.adapters.sqlite.db import SqliteDb
from hongbao.core.services.crediting import CreditingMode
from hongbao.server.composition import Backend

from tests.core.test_service import _group, _paid

T = TypeVar("T")


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the functions handed to SqliteDb.run (the write thread), in order."""
    seen: list[str] = []
    real = SqliteDb.run

    async def run(self: SqliteDb, fn: Callable[[], T]) -> T:
        seen.append(fn.__name__)
        return await real(self, fn)

    monkeypatch.setattr(SqliteDb, "run", run)
    yield seen


async def _opened(backend: Backend, users: int) -> str:
    svc = backend.services
    svc.crediting.mode = CreditingMode.QUEUED
    members = [f"u{i:02}" for i in range(users)]
    await _group(svc, "g", ["S", *members])
    order_id = await _paid(svc, "S", {"count": users, "total_fen": 100 * users, "group_id": "g"}, fund=100 * users)
    for user in members:
        await svc.opening.open(user, order_id)
    return order_id


async def test_a_batch_of_credits_takes_four_trips(backend: Backend, trips: list[str]) -> None:
    """30 queued credits: one claim, one ledger transaction, one mark of the receipts, one ack: 4 trips, not 90."""
    order_id = await _opened(backend, 30)
    trips.clear()
    assert await backend.services.settlement.drain_credits() == 30
    assert len(trips) == 4, trips
    assert all(r.credited for r in await backend.services.ports.packets.receipts(order_id))


async def test_a_batch_of_list_rows_takes_three_trips(backend: Backend, trips: list[str]) -> None:
    """1 sent row, 30 received rows and the best-luck mark: one claim, one write of the rows and the flag, one ack."""
    order_id = await _opened(backend, 30)
    svc = backend.services
    trips.clear()
    assert await svc.lists.drain() == 32
    assert len(trips) == 3, trips
    best = await svc.ports.packets.best_luck(order_id)
    assert best is not None
    now = svc.ports.clock.now_ms()
    assert [(i.order_id, i.best_luck) for i in await svc.ports.lists.page(best, "received", 0, now + 1, 0, 20)] == [
        (order_id, True)
    ]
    assert await svc.ports.lists.summary("S", "sent", 0, now + 1) == (1, 3000, 0)
