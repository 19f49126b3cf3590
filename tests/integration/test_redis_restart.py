"""redis-server killed in the middle of a storm of sends, grabs and opens against `hongbao serve
--backend production` (2 workers, real MariaDB), then started again EMPTY: no open is
lost or doubled, every receipt is credited once the reconciler has run (the credit stream died with
Redis), the state Redis held is rebuilt from the DB (a user who opened before the flush opens and
grabs again and is told the same amount), and `hongbao audit` (docs/architecture.md section 11) passes."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import redis
from hongbao.bench.services import redis_servers

from tests.integration.mariadb import MariaDb
from tests.integration.production import audit_cli, start_production
from tests.server.conftest import Server, stop_server
from tests.server.crowd import Crowd, auth, balances, eventually_async
from tests.server.flows import group, ok, paid_packet, topup
from tests.server.test_money_cases import open_as

MEMBERS = [f"m{i:02}" for i in range(30)]
SENDERS = ["S", "T"]
PACKET = {"count": 6, "total_fen": 600}
OUTAGE_S = (1.0, 1.5, 2.5)  # storm alone, Redis dead, storm on the restarted Redis


class Storm:
    """What the storm saw: order ids paid, every open's amount (fen), answers by (operation, status)."""

    def __init__(self, server: Server, gid: str) -> None:
        self.server, self.gid = server, gid
        self.paid: list[str] = []
        self.opened: dict[tuple[str, str], int] = {}
        self.answers: Counter[tuple[str, int]] = Counter()
        self.done = asyncio.Event()

    async def call(
        self, client: httpx.AsyncClient, op: str, user: str, method: str, path: str, **kwargs: Any
    ) -> httpx.Response:
        """One request as ``user``, its answer counted."""
        response = await client.request(method, path, headers=auth(self.server, user), **kwargs)
        self.answers[op, response.status_code] += 1
        return response

    async def sender(self, client: httpx.AsyncClient, user: str) -> None:
        """Send and pay packets to the group until the storm ends."""
        while not self.done.is_set():
            sent = await self.call(client, "send", user, "POST", "/v1/packets", json={**PACKET, "group_id": self.gid})
            order_id = ok(sent, 201)["order_id"]
            if (await self.call(client, "pay", user, "POST", f"/v1/packets/{order_id}/pay")).status_code == 200:
                self.paid.append(order_id)
            await asyncio.sleep(0.05)

    async def member(self, client: httpx.AsyncClient, user: str) -> None:
        """Grab, then open, every packet paid so far (newest first) until the storm ends."""
        tried: set[str] = set()
        while not self.done.is_set():
            todo = [o for o in reversed(self.paid) if o not in tried]
            if not todo:
                await asyncio.sleep(0.02)
                continue
            order_id = todo[0]
            tried.add(order_id)
            await self.call(client, "grab", user, "POST", f"/v1/packets/{order_id}/grab")
            opened = await self.call(client, "open", user, "POST", f"/v1/packets/{order_id}/open")
            if opened.status_code == 200:
                self.opened[order_id, user] = opened.json()["amount_fen"]


async def _storm(server: Server, gid: str, process: list[Any], redis_dir: Path, port: int) -> Storm:
    """The storm over ``OUTAGE_S``: redis-server (``process[0]``) SIGKILLed after the first span,
    started empty after the second."""
    storm = Storm(server, gid)

    async def chaos() -> None:
        await asyncio.sleep(OUTAGE_S[0])
        process[0].kill()
        await asyncio.to_thread(process[0].wait)
        await asyncio.sleep(OUTAGE_S[1])
        process[0] = await asyncio.to_thread(redis_servers.start_on, redis_dir, port)
        await asyncio.sleep(OUTAGE_S[2])
        storm.done.set()

    async with Crowd(server, len(MEMBERS) + len(SENDERS)) as crowd:
        await asyncio.gather(
            chaos(),
            *(storm.sender(crowd[i], s) for i, s in enumerate(SENDERS)),
            *(storm.member(crowd[len(SENDERS) + i], m) for i, m in enumerate(MEMBERS)),
        )
    return storm


async def _again(
    server: Server, opened: dict[tuple[str, str], int]
) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], Any]]:
    """Every (order, user) of ``opened`` opens and grabs again: (amounts the opens answer, the grabs' bodies)."""
    async with Crowd(server, 20) as crowd:
        pairs = list(opened)
        opens = await crowd.run(
            [lambda c, o=o, u=u: c.post(f"/v1/packets/{o}/open", headers=auth(server, u)) for o, u in pairs]
        )
        grabs = await crowd.run(
            [lambda c, o=o, u=u: c.post(f"/v1/packets/{o}/grab", headers=auth(server, u)) for o, u in pairs]
        )
    return (
        {p: ok(r)["amount_fen"] for p, r in zip(pairs, opens, strict=True)},
        {p: ok(r) for p, r in zip(pairs, grabs, strict=True)},
    )


async def _receipts(server: Server, orders: list[str]) -> dict[tuple[str, str], int]:
    """Every receipt of ``orders``, from their details (the DB), as (order, user) -> amount_fen."""
    async with Crowd(server, 10) as crowd:
        got = await crowd.run([lambda c, o=o: c.get(f"/v1/packets/{o}", headers=auth(server, "S")) for o in orders])
    return {(o, r["user_id"]): r["amount_fen"] for o, d in zip(orders, got, strict=True) for r in ok(d)["receipts"]}


def test_redis_killed_mid_storm_and_restarted_empty(mariadb: MariaDb, tmp_path: Path) -> None:
    """redis-server SIGKILLed under sends, grabs and opens, back empty: each open answered once is
    one receipt, reopens and grabs give the same amounts, all credited, audit clean."""
    (port,) = redis_servers.free_ports(1)
    redis_dir = tmp_path / "redis"
    process = [redis_servers.start_on(redis_dir, port)]
    server = start_production(tmp_path / "srv", mariadb, f"redis://127.0.0.1:{port}")
    try:
        gid = group(server, "S", [*MEMBERS, "T"])
        for sender in SENDERS:
            topup(server, sender, 1_000_000)
        before = paid_packet(server, "S", {**PACKET, "group_id": gid})
        early = {(before, u): open_as(server, before, u)["amount_fen"] for u in MEMBERS[:3]}
        storm = asyncio.run(_storm(server, gid, process, redis_dir, port))
        assert storm.answers["open", 200] > 3 * PACKET["count"], storm.answers
        assert set(storm.answers) <= {
            ("send", 201),
            ("pay", 200),
            ("pay", 404),  # its pre-order died with Redis, asked once Redis is back empty
            ("pay", 503),  # its pre-order is in the dead Redis: nothing can tell it from an unknown one
            ("grab", 200),
            ("grab", 410),
            ("open", 200),
            ("open", 410),
        }, storm.answers

        orders = [before, *storm.paid]
        assert len(set(orders)) == len(orders)
        opened = {**early, **storm.opened}
        with server.client(
            MEMBERS[-1]
        ) as client:  # has not opened `before`: its grab state comes from the DB into the empty Redis
            assert ok(client.post(f"/v1/packets/{before}/grab")) == {"status": "ok"}
        with redis.Redis(port=port) as fresh:
            state = fresh.hgetall(f"grab:{{{before}}}")
        assert state[b"n"] == str(PACKET["count"] - len(early)).encode() and b"p" in state, state  # rebuilt after opens
        receipts = asyncio.run(_receipts(server, orders))
        assert receipts == opened  # no open lost, none doubled, none the client was not told of
        reopened, grabbed = asyncio.run(_again(server, opened))
        assert reopened == opened
        assert grabbed == {p: {"status": "opened", "amount_fen": a} for p, a in opened.items()}

        won = Counter[str]()
        for (_, user), amount in receipts.items():
            won[user] += amount

        async def all_credited() -> None:
            async with Crowd(server, 10) as crowd:
                assert await balances(server, crowd, MEMBERS) == {u: won[u] for u in MEMBERS}

        asyncio.run(eventually_async(all_credited, timeout_s=20))  # the reconciler credits what the lost stream held
    finally:
        status = stop_server(server)
        redis_servers.stop(process[0])
    assert status == 0 and "Traceback" not in server.log(), (
        server.log()
    )  # an outage is logged by the breaker, not per call
    report = audit_cli(server)
    assert f"receipts: {len(receipts)}" in report and report.endswith("audit: 0 violations\n"), report
