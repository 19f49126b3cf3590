"""MariaDB stopped under load and started again (docs/architecture.md section 10): requests fail fast with
Degraded (503) while it is gone, nothing half-written survives, and the service resumes."""

from __future__ import annotations

import asyncio
import time

from hongbao.core import errors
from hongbao.core.adapters.mysql.audit import audit_mysql
from hongbao.core.adapters.mysql.db import BREAKER_S
from hongbao.core.packet import Status
from hongbao.server.composition import Backend

from tests.core.conftest import admission, clock  # noqa: F401  (fixtures)
from tests.core.test_service import _drain, _group
from tests.integration.mariadb import SERVICE_LAYOUT, MariaDb, backend, make_backend  # noqa: F401  (fixtures)


async def test_outage_fails_fast_and_heals(mariadb: MariaDb, backend: Backend) -> None:
    """Opens keep coming while MariaDB stops: each fails in milliseconds with a 503; after the
    restart they succeed and the books balance."""
    svc = backend.services
    users = [f"u{i:02}" for i in range(40)]
    await _group(svc, "g", ["S", *users])
    await svc.accounts.topup("S", 9000, "fund")
    orders = [
        (
            await svc.sending.pay(
                "S", (await svc.sending.send("S", {"count": 30, "total_fen": 3000, "group_id": "g"}))[0]
            )
        ).order_id
        for _ in range(3)
    ]
    stopping = asyncio.ensure_future(asyncio.to_thread(mariadb.stop))
    seen: set[str] = set()

    async def opener(user: str) -> None:
        for order_id in orders:
            while not stopping.done():
                try:
                    await svc.opening.open(user, order_id)
                    seen.add("ok")
                    break
                except errors.Degraded as exc:
                    assert exc.status == 503
                    seen.add("degraded")
                except errors.Finished:
                    break
                await asyncio.sleep(0.01)

    try:
        await asyncio.gather(stopping, *(opener(u) for u in users))
        started = time.perf_counter()
        for user in users:
            try:
                await svc.opening.open(user, orders[-1])
            except errors.Degraded:
                seen.add("down")
        assert "down" in seen and time.perf_counter() - started < 0.5  # 40 refusals, no connect timeouts
    finally:
        await asyncio.wait([stopping])  # the server is down before it is started again, whatever failed
        await asyncio.to_thread(mariadb.start)
    await asyncio.sleep(BREAKER_S)
    for user in users:  # back: every user gets (or already had) a share of the last packet or is told it is finished
        try:
            receipt, _ = await svc.opening.open(user, orders[-1])
            assert receipt.amount_fen >= 1
        except errors.Finished:
            pass
    await _drain(svc)
    await svc.settlement.reconcile(window_ms=0)
    report = await audit_mysql(mariadb.dsn, SERVICE_LAYOUT)
    assert report.ok, report.lines()
    last = await svc.ports.packets.get_packet(orders[-1])
    assert last is not None and last.status is Status.FINISHED  # (an earlier one may have finished before the stop)
    assert report.counts["packets finished"] >= 1 and report.counts["receipts"] >= 30
