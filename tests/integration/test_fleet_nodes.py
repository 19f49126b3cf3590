"""Two nodes of one region (docs/architecture.md section 9), each a real `hongbao serve` with two
workers on the same MariaDB and redis-server: every request for a packet is served by the node
``node_of(order id, live nodes)`` names, the other node relays it; a node killed mid-storm hands
its packets to the survivor, and the money stays whole."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hongbao.core.adapters.mysql.audit import audit_mysql
from hongbao.server.auth import KEY_FILE, embedded_secret
from hongbao_native import node_of

from tests.integration.conftest import RedisTarget
from tests.integration.mariadb import MariaDb
from tests.integration.production import SERVE_LAYOUT, production_config, start_production
from tests.server.conftest import Server, kill_server, start_server, stop_server
from tests.server.crowd import Crowd, fan_out
from tests.server.flows import eventually, group, ok, paid_packet, scraped

pytestmark = pytest.mark.timeout(240)


def metric(server: Server, name: str) -> float:
    """The value of the unlabelled series ``name`` on ``server``'s /metrics (0 when absent)."""
    return scraped(server, name) or 0.0


def owner_of(order_id: str, nodes: list[Server]) -> Server:
    """The node that owns ``order_id``: jump hash over the nodes' URLs, sorted (server/fleet.py)."""
    ordered = sorted(nodes, key=lambda node: node.url)
    return ordered[node_of(order_id, len(ordered))]


@pytest.fixture
def two_nodes(mariadb: MariaDb, redis_standalone: RedisTarget, tmp_path: Path) -> Iterator[list[Server]]:
    """Nodes A and B (two workers each, one token key), both seeing two live nodes."""
    redis_standalone.flush()
    embedded_secret(tmp_path / "a")
    (tmp_path / "b").mkdir()
    shutil.copy(tmp_path / "a" / KEY_FILE, tmp_path / "b" / KEY_FILE)  # the same tokens and internal secret
    a = start_production(tmp_path / "a", mariadb, redis_standalone.url)
    nodes = [a]
    try:
        nodes.append(start_server(tmp_path / "b", 2, production_config(mariadb, redis_standalone.url)))
        eventually(lambda: [metric(node, "hongbao_fleet_nodes") for node in nodes] == [2.0, 2.0], timeout_s=15)
        time.sleep(2.5)  # every worker has beaten since: each sees both nodes
        yield nodes
    finally:
        for node in nodes:
            if node.process.poll() is None:
                stop_server(node)


def test_a_hot_packet_is_opened_on_its_owner_only(two_nodes: list[Server], mariadb: MariaDb) -> None:
    """300 openers of one 100-share packet, half through each node: exactly 100 receipts, every
    one made on the owner (the other node relayed its 150 and opened nothing), the audit clean."""
    a, b = two_nodes
    members = [f"u{i:03}" for i in range(300)]
    gid = group(a, "S", members[:299])  # 300 with the sender: the most a group may have is 500
    order_id = paid_packet(a, "S", {"count": 100, "total_fen": 10_000, "group_id": gid}, fund_fen=10_000)
    owner, other = (a, b) if owner_of(order_id, two_nodes) is a else (b, a)

    async def storm() -> list[httpx.Response]:
        async with Crowd(other, 150) as via_other, Crowd(owner, 150) as via_owner:
            path = f"/v1/packets/{order_id}/open"
            got_other, got_owner = await asyncio.gather(  # the other node's openers first
                fan_out(other, via_other, "POST", path, members[0:299:2]),
                fan_out(owner, via_owner, "POST", path, members[1:299:2]),
            )
            return [*got_other, *got_owner]

    answers = asyncio.run(storm())
    won = [ok(r)["amount_fen"] for r in answers if r.status_code == 200]
    assert sorted({r.status_code for r in answers}) == [200, 410] and len(won) == 100 and sum(won) == 10_000

    def counted() -> None:
        assert metric(owner, "hongbao_opens_total") == 100 and metric(other, "hongbao_opens_total") == 0
        assert metric(other, "hongbao_fleet_forwarded_total") >= 149  # its half, less the sender's pay
        assert metric(owner, "hongbao_fleet_forward_failures_total") == 0

    eventually(counted, timeout_s=10)
    report = asyncio.run(audit_mysql(mariadb.dsn, SERVE_LAYOUT, drained=False))
    assert report.ok and report.counts["receipts"] == 100, report.lines()


def test_a_node_killed_mid_storm_hands_its_packets_to_the_survivor(two_nodes: list[Server], mariadb: MariaDb) -> None:
    """At least six 20-share packets (some owned by each node), 60 members opening each through both
    nodes; node B is killed (SIGKILL, master and workers) while they open, and whoever B did not
    answer asks A. Every packet ends with exactly 20 receipts, every 200 a user got is the amount
    the packet kept for them, and once credited the audit over the shards is clean."""
    a, b = two_nodes
    members = [f"m{i:02}" for i in range(60)]
    gid = group(a, "S", members)
    shares_per_packet, total_fen = 20, 2_000
    packets: list[str] = []
    while len(packets) < 6 or {owner_of(p, two_nodes).url for p in packets} != {a.url, b.url}:
        body = {"count": shares_per_packet, "total_fen": total_fen, "group_id": gid}
        packets.append(paid_packet(a, "S", body, fund_fen=total_fen))
    packets.sort(key=lambda order_id: owner_of(order_id, two_nodes) is b)  # A opens a packet of B's after the kill
    first: dict[tuple[str, str], int] = {}  # (order id, user) -> amount of a 200

    async def open_all(node: Server, crowd: Crowd, users: list[str], halfway: asyncio.Event) -> list[tuple[str, str]]:
        """Open every packet as each of ``users`` through ``node`` (``halfway`` set after two
        packets); the opens it did not answer."""
        unanswered = []
        for done, order_id in enumerate(packets):
            if done == 2:
                halfway.set()
            try:
                got = await fan_out(node, crowd, "POST", f"/v1/packets/{order_id}/open", users)
            except httpx.TransportError:
                unanswered += [(order_id, user) for user in users]
                continue
            for user, answer in zip(users, got, strict=True):
                if answer.status_code == 200:
                    first.setdefault((order_id, user), ok(answer)["amount_fen"])
        return unanswered

    async def storm() -> list[tuple[str, str]]:
        halfway, ignored = asyncio.Event(), asyncio.Event()

        async def killer() -> None:
            await halfway.wait()
            await asyncio.get_running_loop().run_in_executor(None, kill_server, b)

        async with Crowd(a, 30) as via_a, Crowd(b, 30) as via_b:
            _, lost, _ = await asyncio.gather(
                open_all(a, via_a, members[0::2], halfway), open_all(b, via_b, members[1::2], ignored), killer()
            )
            return lost

    lost = asyncio.run(storm())
    assert b.process.poll() is not None and lost  # B died with opens of its half still to answer
    eventually(lambda: metric(a, "hongbao_fleet_forward_failures_total") >= 1)  # A's relays to B failed: A served them

    async def again() -> list[httpx.Response]:
        async with Crowd(a, 30) as via_a:
            return [
                answer
                for order_id in packets
                for answer in await fan_out(a, via_a, "POST", f"/v1/packets/{order_id}/open", members)
            ]

    answers = asyncio.run(again())  # everyone again through A: the opens B lost, and repeats of the rest
    keys = [(order_id, user) for order_id in packets for user in members]
    amounts = {key: ok(r)["amount_fen"] for key, r in zip(keys, answers, strict=True) if r.status_code == 200}
    assert {r.status_code for r in answers} <= {200, 410}
    assert all(amounts[key] == amount for key, amount in first.items())  # a 200 is never taken back or changed
    for order_id in packets:
        shares = [amount for (packet, _), amount in amounts.items() if packet == order_id]
        assert len(shares) == shares_per_packet and sum(shares) == total_fen, order_id

    def clean() -> None:
        report = asyncio.run(audit_mysql(mariadb.dsn, SERVE_LAYOUT))
        assert report.ok and report.counts["receipts"] == shares_per_packet * len(packets), report.lines()

    eventually(clean, timeout_s=30)
