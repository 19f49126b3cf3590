""" "Queue down at open" (docs/architecture.md section 10) on the production backend, with the queue's
redis-server stopped and started again for real: opens commit their receipts and answer at once
(the Redis breaker skips the dead queue instead of waiting out connection retries), the reconciler
credits them, and once Redis is back the queue carries credits again, the ones the opens could not
queue first (held by the outbox)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from hongbao.bench.services import redis_servers
from hongbao.core.clock import ManualClock
from hongbao.core.messages import CREDIT_STREAM
from hongbao.core.services import Services
from hongbao.core.services.crediting import CreditingMode

from tests.core import test_service as suite
from tests.core.conftest import admission, clock  # noqa: F401  (fixtures)
from tests.integration.test_redis_money import Open, open_on  # noqa: F401  (fixture)

OPENS = 20


async def _paid_with_queue_down(
    open_on: Open, tmp_path: Path, loop_cleanups: list[Callable[[], Awaitable[None]]], users: list[str]
) -> tuple[Services, str, dict[str, int], int]:
    """A packet for ``users`` paid on the production backend in the queued crediting mode, then
    its queue's redis-server stopped: the services, the order id, the backend's counters, the port."""
    (port,) = redis_servers.free_ports(1)
    process = redis_servers.start_on(tmp_path, port)
    loop_cleanups.append(lambda: asyncio.to_thread(redis_servers.stop, process))
    backend, counts = await open_on(f"redis://127.0.0.1:{port}", False)
    svc = backend.services
    svc.crediting.mode = CreditingMode.QUEUED
    await suite._group(svc, "g", ["S", *users])
    order_id = await suite._paid(
        svc, "S", {"count": len(users), "total_fen": 100 * len(users), "group_id": "g"}, fund=10_000
    )
    await asyncio.to_thread(redis_servers.stop, process)
    return svc, order_id, counts, port


async def test_queue_down_at_open(
    open_on: Open,
    clock: ManualClock,
    tmp_path: Path,
    loop_cleanups: list[Callable[[], Awaitable[None]]],
) -> None:
    """Redis stopped: 20 opens commit in well under a second (breaker), nothing is queued, the
    reconciler credits each once; Redis back: credits queue again."""
    users = [f"u{i:02}" for i in range(OPENS + 4)]
    svc, order_id, counts, port = await _paid_with_queue_down(open_on, tmp_path, loop_cleanups, users)

    # the first two find Redis gone
    amounts = {u: (await suite._open_followed(svc, u, order_id))[0].amount_fen for u in users[:2]}
    started = time.perf_counter()
    amounts |= {u: (await suite._open_followed(svc, u, order_id))[0].amount_fen for u in users[2 : OPENS + 2]}
    assert time.perf_counter() - started < 0.5  # no connect retries per open: ~1 s each without the breaker
    assert counts["redis_breaker_opens"] == 1 and counts["redis_fallback_queue"] >= OPENS
    assert {r.user_id: r.amount_fen for r in await svc.ports.packets.receipts(order_id)} == amounts
    assert await svc.ports.ledger.balance(users[0]) == 0
    clock.advance_ms(1)
    assert await svc.settlement.reconcile(window_ms=0) == OPENS + 2
    assert {u: await svc.ports.ledger.balance(u) for u in amounts} == amounts
    assert await svc.settlement.reconcile(window_ms=0) == 0

    process = redis_servers.start_on(tmp_path, port)
    loop_cleanups.append(lambda: asyncio.to_thread(redis_servers.stop, process))
    await asyncio.sleep(1.1)  # the breaker's cooldown: the next call is the trial
    late = {u: (await suite._open_followed(svc, u, order_id))[0].amount_fen for u in users[OPENS + 2 :]}
    assert await svc.ports.queue.depth(CREDIT_STREAM) == 2
    assert await svc.settlement.drain_credits() == 2
    assert {u: await svc.ports.ledger.balance(u) for u in late} == late


async def test_held_credits_follow_once_the_queue_is_back(
    open_on: Open,
    clock: ManualClock,
    tmp_path: Path,
    loop_cleanups: list[Callable[[], Awaitable[None]]],
) -> None:
    """Redis stopped: the opens' credits and list rows are held; while it is down a redrive
    queues nothing and keeps them; Redis back (empty): one redrive queues them all and the credit
    drain credits every receipt once, with no reconciler pass."""
    users = [f"u{i:02}" for i in range(OPENS)]
    svc, order_id, _, port = await _paid_with_queue_down(open_on, tmp_path, loop_cleanups, users)
    amounts = {u: (await suite._open_followed(svc, u, order_id))[0].amount_fen for u in users}
    assert await svc.outbox.redrive() == 0
    process = redis_servers.start_on(tmp_path, port)
    loop_cleanups.append(lambda: asyncio.to_thread(redis_servers.stop, process))
    await asyncio.sleep(1.1)  # the breaker's cooldown: the next call is the trial
    assert await svc.outbox.redrive() == 2 * OPENS + 1  # a credit and a list row per open, best luck once
    assert await svc.outbox.redrive() == 0
    assert await svc.ports.queue.depth(CREDIT_STREAM) == OPENS
    assert await svc.settlement.drain_credits() == OPENS
    assert {u: await svc.ports.ledger.balance(u) for u in users} == amounts
    clock.advance_ms(1)
    assert await svc.settlement.reconcile(window_ms=0) == 0
