"""What keeps the periodic jobs' load off the databases on the production backend (real MariaDB,
real standalone Redis): the jobs' leases, the flags' copies in Redis, and the expiry index the
refund job reads instead of scanning every day table."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hongbao.bench.services.redis_servers import RedisTarget
from hongbao.core.adapters.redis.state import EXPIRIES_KEY
from hongbao.core.clock import ManualClock
from hongbao.core.packet import Status
from hongbao.server.composition import Backend

from tests.core import test_service as suite
from tests.core.conftest import admission, clock  # noqa: F401  (fixtures)
from tests.integration.mariadb import make_backend  # noqa: F401  (fixture)


async def test_one_worker_holds_a_lease_until_it_lapses(make_backend: Callable[..., Backend]) -> None:
    """A takes the lease, B is refused while A renews it; once A stops renewing it lapses and B
    takes it, and then A is refused."""
    a, b = make_backend(), make_backend()
    assert await a.leases.hold("refunds", 400) is True
    assert await b.leases.hold("refunds", 400) is False
    assert await a.leases.hold("refunds", 400) is True  # renewed
    assert await b.leases.hold("reconcile", 400) is True  # another job, another lease
    await asyncio.sleep(0.6)
    assert await b.leases.hold("refunds", 400) is True
    assert await a.leases.hold("refunds", 400) is False


async def test_flags_are_read_from_their_copy_in_redis_and_survive_its_loss(
    make_backend: Callable[..., Backend], service_redis: RedisTarget
) -> None:
    """A flag set by one worker is read by another from Redis; a flag known unset is cached as
    unset; Redis emptied, the value comes back from the database and its copy is put back."""
    a, b = make_backend(), make_backend()
    await a.services.ports.flags.set("crediting_mode", "all_queued")
    assert await b.services.ports.flags.get("crediting_mode") == "all_queued"
    assert await b.services.ports.flags.get("never_set") is None
    keys = service_redis.sync_keys()
    assert keys.get("flag:{never_set}") == b"-" and keys.get("flag:{crediting_mode}") == b"=all_queued"
    service_redis.flush()
    assert await b.services.ports.flags.get("crediting_mode") == "all_queued"
    assert keys.get("flag:{crediting_mode}") == b"=all_queued"


async def test_refunds_come_from_the_expiry_index_and_a_scan_finds_what_it_lost(
    make_backend: Callable[..., Backend], service_redis: RedisTarget, clock: ManualClock
) -> None:
    """Paid packets are indexed by expiry and a finished one leaves the index; between the
    database scans the refund job refunds what the index names; a packet the index lost (Redis
    lost it) waits for the next scan, which refunds it."""
    svc = make_backend().services
    await suite._group(svc, "g", ["A", "B"])
    assert await svc.settlement.refund_due() == 0  # the first run scans the databases
    kept = await suite._paid(svc, "A", {"count": 2, "total_fen": 100, "group_id": "g"}, fund=100)
    lost = await suite._paid(svc, "A", {"count": 2, "total_fen": 60, "group_id": "g"}, fund=60)
    finished = await suite._paid(svc, "A", {"count": 1, "total_fen": 10, "group_id": "g"}, fund=10)
    await suite._open_followed(svc, "B", finished)
    keys = service_redis.sync_keys()
    assert sorted(m.decode() for m in keys.zrange(EXPIRIES_KEY, 0, -1)) == sorted([kept, lost])
    keys.zrem(EXPIRIES_KEY, lost)
    clock.advance_ms(suite.DAY_MS)
    assert await svc.settlement.refund_due() == 1  # from the index: the scan is not due yet
    assert (await svc.ports.packets.get_packet(kept)).status is Status.REFUNDED  # type: ignore[union-attr]
    assert (await svc.ports.packets.get_packet(lost)).status is Status.ACTIVE  # type: ignore[union-attr]
    assert keys.zcard(EXPIRIES_KEY) == 0
    svc.settlement.scan_every_s = 0.0  # the scan is due
    assert await svc.settlement.refund_due() == 1
    assert (await svc.ports.packets.get_packet(lost)).status is Status.REFUNDED  # type: ignore[union-attr]
    entries = [e for e in await svc.ports.ledger.entries("A", 0, 10) if e.kind == "refund"]
    assert sorted(e.amount_fen for e in entries) == [60, 100]
