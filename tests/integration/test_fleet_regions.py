"""Two regions of two nodes each (docs/architecture.md section 9), every node a real `hongbao
serve` made from one fleet description (server/fleet_config.py): north on its own MariaDB and
redis-server, south on the session's, which also holds the home region's user data. Orders of
the other region are relayed to its entry, the traffic switch moves new packets, and the north
packet database stopped mid-storm sends new packets south while north's answer 503 degraded;
the audit over both regions is one conservation law."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from hongbao.bench.services import redis_servers
from hongbao.bench.services.mariadb import MariaDb
from hongbao.core.adapters.mysql.audit import audit_mysql
from hongbao.core.adapters.mysql.db import MysqlShards
from hongbao.core.adapters.mysql.packets import MysqlPacketStore
from hongbao.server.auth import KEY_FILE, embedded_secret
from hongbao.server.fleet_config import Fleet, Region

from tests.integration.conftest import RedisTarget
from tests.integration.mariadb import migrated
from tests.integration.production import SERVE_LAYOUT
from tests.integration.test_fleet_nodes import metric
from tests.server.conftest import Server, kill_server, start_server, stop_server
from tests.server.flows import balance, eventually, group, ok, paid_packet, topup, user_list

pytestmark = pytest.mark.timeout(300)
SETTINGS = {"mysql_dbs": 2, "mysql_tables": 2, "mysql_prefix": "srv_", "mysql_pool_size": 4}


@dataclass
class Regions:
    """The running fleet: the nodes of each region (the first is its entry) and the north MariaDB."""

    north: list[Server]
    south: list[Server]
    north_db: MariaDb
    south_db: MariaDb


@pytest.fixture(scope="module")
def regions(
    mariadb: MariaDb, redis_standalone: RedisTarget, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Regions]:
    """The fleet, started node by node from its description; stopped (gracefully) at the end."""
    base = tmp_path_factory.mktemp("regions")
    north_db = MariaDb(base / "north-db")
    north_db.start()
    redis_standalone.flush()
    (redis_port, *ports) = redis_servers.free_ports(5)
    north_redis = redis_servers.start_on(base / "north-redis", redis_port)
    migrated(north_db, SERVE_LAYOUT)
    migrated(mariadb, SERVE_LAYOUT)
    fleet = Fleet(
        (
            Region(1, north_db.dsn, f"redis://127.0.0.1:{redis_port}", tuple(ports[:2])),
            Region(2, mariadb.dsn, redis_standalone.url, tuple(ports[2:])),
        ),
        home=2,
        workers=1,
        host="127.0.0.1",
        settings=SETTINGS,
    )
    embedded_secret(base)
    nodes: list[Server] = []
    try:
        for node in fleet.nodes():
            (base / node.name).mkdir()
            shutil.copy(base / KEY_FILE, base / node.name / KEY_FILE)
            nodes.append(start_server(base / node.name, 1, node.toml, port=node.port))
        for node in nodes:
            eventually(lambda node=node: metric(node, "hongbao_fleet_nodes") == 2.0, timeout_s=15)  # type: ignore[misc]
        time.sleep(1.5)
        yield Regions(nodes[:2], nodes[2:], north_db, mariadb)
    finally:
        for node in nodes:
            stop_server(node)
        redis_servers.stop(north_redis)
        north_db.stop()


def _stored(db: MariaDb, order_id: str) -> bool:
    """Whether the packet's row is in ``db``'s shards."""

    async def look() -> bool:
        shards = MysqlShards(db.dsn, SERVE_LAYOUT, pool_size=1, timeout_s=5.0)
        try:
            return await MysqlPacketStore(shards).get_packet(order_id) is not None
        finally:
            await shards.close()

    return asyncio.run(look())


def _send(entry: Server, sender: str, gid: str, total_fen: int = 100) -> httpx.Response:
    with entry.client(sender) as client:
        return client.post("/v1/packets", json={"count": 2, "total_fen": total_fen, "group_id": gid})


def test_an_order_is_served_by_its_region_whichever_entry_it_reaches(regions: Regions) -> None:
    """A packet sent through the north entry is a north order (region digit 1, its row in the
    north shards only), one sent through the south entry a south one; a south user opens the
    north packet through the south entry and a north user the south packet through the north
    entry (each relayed once, answered); balances and lists of both, kept in the home region,
    are right whichever region paid them."""
    north, south = regions.north[0], regions.south[0]
    gid = group(north, "S", ["alice", "bob"])
    topup(south, "S", 1000)
    up = paid_packet(north, "S", {"count": 2, "total_fen": 300, "group_id": gid})
    down = paid_packet(south, "S", {"count": 2, "total_fen": 200, "group_id": gid})
    assert up[0] == "1" and down[0] == "2"
    assert _stored(regions.north_db, up) and not _stored(regions.south_db, up)
    assert _stored(regions.south_db, down) and not _stored(regions.north_db, down)
    before = metric(south, "hongbao_fleet_region_forwarded_total")
    with south.client("alice") as alice, north.client("bob") as bob:
        got = {
            "alice": ok(alice.post(f"/v1/packets/{up}/open"))["amount_fen"]
            + ok(alice.post(f"/v1/packets/{down}/open"))["amount_fen"],
            "bob": ok(bob.post(f"/v1/packets/{up}/open"))["amount_fen"]
            + ok(bob.post(f"/v1/packets/{down}/open"))["amount_fen"],
        }
        assert ok(bob.get(f"/v1/packets/{up}"))["status"] == "finished"
    assert sum(got.values()) == 500 and balance(north, "S") == 500
    eventually(lambda: metric(south, "hongbao_fleet_region_forwarded_total") >= before + 1)

    def credited() -> None:
        assert {user: balance(entry, user) for user, entry in (("alice", north), ("bob", south))} == got

    eventually(credited, timeout_s=20)
    year = int("20" + up[1:3])
    eventually(lambda: {i["order_id"] for i in user_list(south, "alice", "received", year)["items"]} == {up, down})


def test_the_traffic_switch_moves_new_packets_within_a_second(regions: Regions) -> None:
    """Switched north (through a south node), a send through the south entry is a north order
    within a second, paid and opened through the south entry; switched back to auto, south again."""
    south = regions.south[1]
    gid = group(south, "T", ["carol"])
    topup(south, "T", 1000)
    with south.client("admin", admin=True) as admin:
        assert ok(admin.post("/v1/admin/traffic", json={"new_packets": "north"})) == {"new_packets": "north"}
        eventually(lambda: _send(regions.south[0], "T", gid).json()["order_id"][0] == "1", timeout_s=2)
        order_id = paid_packet(regions.south[0], "T", {"count": 1, "total_fen": 10, "group_id": gid})
        assert order_id[0] == "1" and _stored(regions.north_db, order_id)
        with regions.south[0].client("carol") as carol:
            assert ok(carol.post(f"/v1/packets/{order_id}/open"))["amount_fen"] == 10
        assert ok(admin.post("/v1/admin/traffic", json={"new_packets": "auto"})) == {"new_packets": "auto"}
        eventually(lambda: _send(regions.south[0], "T", gid).json()["order_id"][0] == "2", timeout_s=2)


@pytest.fixture
def access_layer(regions: Regions, tmp_path: Path) -> Iterator[str]:
    """Debian's nginx running deploy/nginx-fleet.conf as shipped, its ports moved to this fleet's;
    its URL."""
    (port,) = redis_servers.free_ports(1)
    conf = (Path(__file__).parents[2] / "deploy" / "nginx-fleet.conf").read_text()
    shipped = ["127.0.0.1:8080", "127.0.0.1:8081", "127.0.0.1:8082", "127.0.0.1:9081", "127.0.0.1:9082"]
    ours = [f"127.0.0.1:{port}", *(node.url.removeprefix("http://") for node in (*regions.north, *regions.south))]
    for old, new in zip(shipped, ours, strict=True):
        assert old in conf
        conf = conf.replace(old, new)
    (tmp_path / "nginx.conf").write_text(conf)
    nginx = subprocess.Popen(["nginx", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-g", "daemon off;"])
    try:
        eventually(lambda: _reaches(f"http://127.0.0.1:{port}/healthz"))
        yield f"http://127.0.0.1:{port}"
    finally:
        nginx.terminate()
        nginx.wait(10)


def _reaches(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_the_access_layer_routes_a_packet_by_its_region_digit(regions: Regions, access_layer: str) -> None:
    """Through nginx with the shipped configuration a send lands in the nearest region (north),
    and a south packet's pay, open and details land on south nodes directly: no node relays
    anything across regions."""
    south = regions.south[0]
    gid = group(south, "V", ["fay"])
    topup(south, "V", 100)
    relays = sum(metric(node, "hongbao_fleet_region_forwarded_total") for node in (*regions.north, *regions.south))
    headers = {"authorization": f"Bearer {south.token('V')}"}
    with httpx.Client(base_url=access_layer, timeout=30) as http:
        assert ok(http.post("/v1/packets", json={"count": 1, "total_fen": 5, "group_id": gid}, headers=headers), 201)[
            "order_id"
        ].startswith("1")
        with south.client("V") as direct:
            order_id = ok(direct.post("/v1/packets", json={"count": 1, "total_fen": 5, "group_id": gid}), 201)[
                "order_id"
            ]
        assert ok(http.post(f"/v1/packets/{order_id}/pay", headers=headers))["status"] == "active"
        opened = http.post(f"/v1/packets/{order_id}/open", headers={"authorization": f"Bearer {south.token('fay')}"})
        assert ok(opened)["amount_fen"] == 5
        assert ok(http.get(f"/v1/packets/{order_id}", headers=headers))["status"] == "finished"
    time.sleep(1.2)  # the workers' counters reach /metrics once a second
    assert (
        sum(metric(node, "hongbao_fleet_region_forwarded_total") for node in (*regions.north, *regions.south)) == relays
    )


def test_the_north_packet_database_stopped_mid_storm(regions: Regions) -> None:
    """While sends go on through both entries, the north packet MariaDB stops: within seconds the
    north entry's sends are south orders (auto), a north packet answers 503 degraded with
    Retry-After and the south entry keeps answering; once it is back, the north packet opens to
    the end and the audit over both regions is clean and drained."""
    north, south = regions.north[0], regions.south[0]
    gid = group(north, "U", ["dan", "erin"])
    topup(south, "U", 100_000)
    held = paid_packet(north, "U", {"count": 2, "total_fen": 50, "group_id": gid})
    answers: dict[str, list[tuple[int, str]]] = {"north": [], "south": []}
    storming = threading.Event()

    def storm() -> None:
        while not storming.is_set():
            for name, entry in (("north", north), ("south", south)):
                answer = _send(entry, "U", gid, 10)
                answers[name].append((answer.status_code, answer.json().get("order_id", "")))
            time.sleep(0.05)

    sender = threading.Thread(target=storm)
    sender.start()
    try:
        time.sleep(0.5)
        regions.north_db.stop()
        eventually(
            lambda: answers["north"][-1] == (201, answers["north"][-1][1]) and answers["north"][-1][1][0] == "2",
            timeout_s=15,
        )
        with south.client("dan") as dan:
            shed = dan.post(f"/v1/packets/{held}/open")
            assert (
                shed.status_code == 503
                and shed.json()["error"]["code"] == "degraded"
                and int(shed.headers["retry-after"]) >= 1
            )
    finally:
        regions.north_db.start()
        storming.set()
        sender.join()
    assert answers["south"] and all(status == 201 and order[0] == "2" for status, order in answers["south"])
    for user in ("dan", "erin"):
        with north.client(user) as client:
            eventually(lambda client=client: client.post(f"/v1/packets/{held}/open").status_code == 200, timeout_s=20)  # type: ignore[misc]

    def clean() -> None:
        report = asyncio.run(audit_mysql([regions.north_db.dsn, regions.south_db.dsn], SERVE_LAYOUT))
        assert report.ok, report.lines()

    eventually(clean, timeout_s=30)


def test_a_regions_first_entry_killed_the_other_region_reaches_it_through_the_next(regions: Regions) -> None:
    """North's first node (its first entry) SIGKILLed: a south user still opens a north packet
    through the south entry (relayed to north's other node, which serves the dead node's packets
    too), and the traffic switch still moves sends north."""
    north, south = regions.north, regions.south[0]
    gid = group(north[1], "W", ["gus", "hal"])
    topup(south, "W", 100)
    order_id = paid_packet(north[1], "W", {"count": 2, "total_fen": 20, "group_id": gid})
    kill_server(north[0])
    with south.client("gus") as gus:
        assert ok(gus.post(f"/v1/packets/{order_id}/open"))["amount_fen"] > 0
    with south.client("admin", admin=True) as admin:
        ok(admin.post("/v1/admin/traffic", json={"new_packets": "north"}))
        try:
            eventually(lambda: _send(south, "W", gid).json().get("order_id", "")[:1] == "1", timeout_s=5)
        finally:
            ok(admin.post("/v1/admin/traffic", json={"new_packets": "auto"}))
    with regions.south[1].client("hal") as hal:
        assert ok(hal.post(f"/v1/packets/{order_id}/open"))["amount_fen"] > 0
