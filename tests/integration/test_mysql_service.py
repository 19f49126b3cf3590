"""The service suites of tests/core/test_service.py, test_half_done_pay.py and test_reads.py, unchanged,
on the production backend: the MySQL/MariaDB adapters over a real MariaDB (2 x 2 shards), the queue
on Redis Streams and the order-id sequence, pre-orders, greetings and profiles on a real standalone
Redis and on a 3-master Redis Cluster, all emptied before each test; then what only a real server
shows: the batched open under 300 concurrent openers across two workers, and refunds racing on three."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from hongbao.bench.services.redis_servers import RedisTarget
from hongbao.core import errors
from hongbao.core.clock import ManualClock
from hongbao.core.packet import Status
from hongbao.server.composition import Backend

from tests.core import test_half_done_pay as half_done
from tests.core import test_reads as reads
from tests.core import test_service as suite
from tests.core.conftest import admission, clock  # noqa: F401  (fixtures of the suite)
from tests.core.counting import Counting
from tests.integration.mariadb import backend, make_backend  # noqa: F401  (fixtures)

# On Redis a lapsed pre-order is dropped by its key's TTL, not by the next send: that case is
# test_lapsed_pre_order_key_expires in tests/integration/test_redis_money.py.
globals().update(
    {
        name: test
        for module in (suite, half_done, reads)
        for name, test in vars(module).items()
        if name.startswith("test_") and name != "test_lapsed_pre_orders_are_dropped"
    }
)

DAY_MS = suite.DAY_MS


@pytest.fixture(params=["standalone", "cluster"])
def service_redis(request: pytest.FixtureRequest) -> RedisTarget:
    """The suite runs on a standalone Redis and on the 3-master cluster (M-16: no CROSSSLOT on any path)."""
    target: RedisTarget = request.getfixturevalue(f"redis_{request.param}")
    return target


async def test_hot_packet_300_openers_on_two_workers(make_backend: Callable[..., Backend]) -> None:
    """M-21: 300 concurrent openers over two workers on N=100: exactly 100 receipts, sum == total, no lock errors."""
    workers = [make_backend(max_in_db=2) for _ in range(2)]
    svc = workers[0].services
    users = [f"u{i:03}" for i in range(300)]
    await suite._group(svc, "g", ["S", *users])
    order_id = await suite._paid(svc, "S", {"count": 100, "total_fen": 20000, "group_id": "g"}, fund=20000)
    outcomes = await asyncio.gather(
        *(workers[i % 2].services.opening.open(u, order_id) for i, u in enumerate(users)), return_exceptions=True
    )
    winners = {u: o[0].amount_fen for u, o in zip(users, outcomes, strict=True) if isinstance(o, tuple)}
    assert len(winners) == 100 and sum(winners.values()) == 20000 and min(winners.values()) >= 1
    assert all(isinstance(o, errors.Finished) for o in outcomes if not isinstance(o, tuple))
    receipts = await svc.ports.packets.receipts(order_id)
    assert {r.user_id: r.amount_fen for r in receipts} == winners
    packet = await svc.ports.packets.get_packet(order_id)
    assert packet is not None and (packet.status, packet.remaining_fen, packet.remaining_count) == (
        Status.FINISHED,
        0,
        0,
    )
    best = max(receipts, key=lambda r: r.amount_fen).amount_fen
    assert await svc.ports.packets.best_luck(order_id) == next(r.user_id for r in receipts if r.amount_fen == best)


async def test_refunds_race_on_three_workers(make_backend: Callable[..., Backend], clock: ManualClock) -> None:
    """M-11: twelve expired packets, the refund job on 3 workers at once: each refunded exactly once, to its sender."""
    workers = [make_backend() for _ in range(3)]
    svc = workers[0].services
    senders = [f"s{i}" for i in range(12)]
    await suite._group(svc, "g", ["B", *senders])
    orders = [
        await suite._paid(svc, s, {"count": 3, "total_fen": 90 + i, "group_id": "g"}, fund=90 + i)
        for i, s in enumerate(senders)
    ]
    for order_id in orders[::2]:
        await svc.opening.open("B", order_id)
    clock.advance_ms(DAY_MS)
    counts = await asyncio.gather(*(w.services.settlement.refund_due(limit=5) for w in workers for _ in range(3)))
    while sum(await asyncio.gather(*(w.services.settlement.refund_due(limit=5) for w in workers))):
        pass
    assert sum(counts) <= 12
    opened = {o: sum(r.amount_fen for r in await svc.ports.packets.receipts(o)) for o in orders}
    for sender, order_id, total in zip(senders, orders, range(90, 102), strict=True):
        refunds = [e for e in await svc.ports.ledger.entries(sender, 0, 10) if e.kind == "refund"]
        assert [e.amount_fen for e in refunds] == [total - opened[order_id]]
        packet = await svc.ports.packets.get_packet(order_id)
        assert (
            packet is not None and packet.status is Status.REFUNDED and packet.refunded_fen == total - opened[order_id]
        )


#: The fields of a packet that never change once it is paid.
FIXED = ("order_id", "sender_id", "kind", "count", "total_fen", "group_id", "receiver_id", "created_at_ms")
FIXED += ("pay_by_ms", "expires_at_ms")


async def test_a_packets_fixed_fields_come_from_redis_before_the_database(
    make_backend: Callable[..., Backend],
) -> None:
    """Another worker's first open of a paid packet reads its fixed fields (sender, group, kind,
    count, total, times) from Redis, not from its database row."""
    first, second = make_backend().services, make_backend().services
    await suite._group(first, "g", ["S", "A"])
    order_id = await suite._paid(first, "S", {"count": 3, "total_fen": 300, "group_id": "g"}, fund=300)
    row = await first.ports.packets.get_packet(order_id)
    counted = Counting(second.audience.packets)
    second.audience.packets = counted  # type: ignore[assignment]
    assert (await second.opening.open("A", order_id))[0].amount_fen >= 1
    fixed = await second.audience.fixed_packet(order_id)
    assert counted.calls["get_packet"] == 0
    assert row is not None and fixed is not None
    assert [getattr(fixed, f) for f in FIXED] == [getattr(row, f) for f in FIXED]
