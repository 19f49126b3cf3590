"""M-23 on the production backend (MariaDB + the credit queue on Redis Streams, standalone and the
3-master cluster): a credit worker that dies after its ledger writes but before its acks credits
nothing twice once another worker reclaims its messages; a receipt whose message was lost is
credited by the reconciler; every user's credits equal their receipts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson
import pytest
from hongbao.bench.services.redis_servers import RedisTarget
from hongbao.core.clock import ManualClock
from hongbao.core.messages import CREDIT_STREAM
from hongbao.core.ports import LedgerEntry
from hongbao.core.services.crediting import CreditingMode
from hongbao.server.composition import Backend

from tests.core import test_service as suite
from tests.core.conftest import admission, clock  # noqa: F401  (fixtures)
from tests.integration.mariadb import make_backend  # noqa: F401  (fixture)

LEASE_MS = 200


@pytest.fixture(params=["standalone", "cluster"])
def service_redis(request: pytest.FixtureRequest) -> RedisTarget:
    """Both Redis modes for make_backend."""
    target: RedisTarget = request.getfixturevalue(f"redis_{request.param}")
    return target


async def test_m23_credit_worker_dies_before_its_acks(
    make_backend: Callable[..., Backend],
    clock: ManualClock,
) -> None:
    """M-23: worker one dies after crediting (one even before marking the receipt), unacked; worker
    two reclaims: each receipt credited once, a lost message is reconciled."""
    one, two = make_backend(), make_backend()
    for worker in (one, two):
        worker.services.crediting.mode = CreditingMode.QUEUED
    svc = one.services
    users = [f"u{i}" for i in range(6)]
    await suite._group(svc, "g", ["S", *users])
    order_id = await suite._paid(svc, "S", {"count": 6, "total_fen": 600, "group_id": "g"}, fund=600)
    amounts = {u: (await svc.opening.open(u, order_id))[0].amount_fen for u in users}
    assert sum(amounts.values()) == 600

    held = await svc.ports.queue.claim(CREDIT_STREAM, 100, LEASE_MS, clock.now_ms())
    assert len(held) == 6
    bodies = [orjson.loads(body) for _, body in held]
    for message in bodies[:3]:  # ledger written and receipt marked, then the worker dies before acking
        assert await svc.crediting.credit(message["o"], message["u"])
    ledger_only = bodies[3]["u"]  # dies between the ledger write and the receipt's mark
    await svc.ports.ledger.post(
        LedgerEntry(ledger_only, "credit", f"{order_id}:{ledger_only}", amounts[ledger_only], clock.now_ms())
    )
    lost_id, lost = held[5][0], bodies[5]["u"]
    await svc.ports.queue.ack(CREDIT_STREAM, lost_id)  # this message is lost: only the reconciler can credit it

    await asyncio.sleep(LEASE_MS / 1000 + 0.1)  # the dead worker's lease runs out (Redis's clock)
    assert await two.services.settlement.drain_credits(lease_ms=LEASE_MS) == 5
    assert await two.services.settlement.drain_credits(lease_ms=LEASE_MS) == 0
    assert await svc.ports.queue.depth(CREDIT_STREAM) == 0
    assert await svc.ports.ledger.balance(lost) == 0
    clock.advance_ms(60_001)
    assert await two.services.settlement.reconcile(window_ms=60_000) == 1
    for user in users:
        credits = [e for e in await svc.ports.ledger.entries(user, 0, 10) if e.kind == "credit"]
        assert [(e.ref, e.amount_fen) for e in credits] == [(f"{order_id}:{user}", amounts[user])]
        assert await svc.ports.ledger.balance(user) == amounts[user]
    assert all(r.credited for r in await svc.ports.packets.receipts(order_id))
    assert await two.services.settlement.reconcile(window_ms=60_000) == 0
