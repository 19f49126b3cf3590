"""The money audit over MySQL shards while credits still land: it must read one consistent cut of
the books, so a credit whose ledger row is on one database and whose receipt is on another is
seen either whole or not yet, never as a receipt marked credited without its ledger entry."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hongbao.core.adapters.mysql.audit import audit_mysql
from hongbao.core.clock import ManualClock
from hongbao.server.composition import Backend

from tests.core.conftest import admission, clock  # noqa: F401  (fixtures)
from tests.core.test_service import _group, _paid
from tests.integration.mariadb import SERVICE_LAYOUT, MariaDb, make_backend  # noqa: F401  (fixture)

SHARES = 60


async def test_an_audit_during_credits_sees_each_credit_whole(
    mariadb: MariaDb, make_backend: Callable[..., Backend], clock: ManualClock
) -> None:
    """A packet on database 1 opened by users whose ledger is on database 0, then credited one
    receipt at a time (ledger row on 0, then the receipt's mark on 1) while audits (not drained)
    run back to back: every audit is clean. Reading database 0 and then database 1 in two snapshots
    would see some receipt marked credited whose ledger row came after the first read."""
    svc = make_backend().services
    layout = SERVICE_LAYOUT
    users = [u for u in (f"u{i}" for i in range(10 * SHARES)) if layout.key_shard(u)[0] == 0][:SHARES]
    await _group(svc, "g", ["sender", *users])
    order_id = await _paid(svc, "sender", {"count": SHARES, "total_fen": 100 * SHARES, "group_id": "g"})
    while svc.ports.packets.database(order_id) != 1:
        order_id = await _paid(svc, "sender", {"count": SHARES, "total_fen": 100 * SHARES, "group_id": "g"})
    for user in users:
        await svc.opening.open(user, order_id)
    crediting = asyncio.Event()

    async def credit_each() -> None:
        for user in users:  # one credit at a time: its ledger row on database 0, then its mark on 1
            assert await svc.crediting.credit(order_id, user)
            crediting.set()
            await asyncio.sleep(0)
        crediting.clear()

    async def audit_while_crediting() -> list[str]:
        await crediting.wait()
        audits, violations = 0, []
        while crediting.is_set():
            violations += (await audit_mysql(mariadb.dsn, layout, drained=False)).violations
            audits += 1
        assert audits >= 3, "the audits did not overlap the credits"
        return violations

    _, violations = await asyncio.gather(credit_each(), audit_while_crediting())
    assert violations == []
    report = await audit_mysql(mariadb.dsn, layout)
    assert report.ok and report.counts["receipts"] == SHARES, report.lines()
