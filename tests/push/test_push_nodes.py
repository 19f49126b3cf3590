"""Several push nodes on one data directory (docs/architecture.md section 7): a crashed node (P-13) and its
sweep, a stale route cache (P-14), a login on another node replacing a session, the internal
listener's secret."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator

import httpx
import pytest
from hongbao.server.config import Settings
from hongbao.server.push_internal import SECRET_HEADER, internal_secret

from tests.push.conftest import Nodes, admin, connect, eventually, push
from tests.server.conftest import Server


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Nodes, Server, Server]]:
    """Nodes A and C (one worker each) on one data directory; tests add their own B."""
    nodes = Nodes(tmp_path_factory.mktemp("cluster"))
    yield nodes, nodes.start(), nodes.start()
    nodes.finish()


def sessions(nodes: Nodes, users: list[str]) -> int:
    """How many of ``users`` have a session in the shared push file (the embedded session store)."""
    with sqlite3.connect(nodes.data_dir / "push.db") as db:
        marks = ",".join("?" * len(users))
        return int(db.execute(f"SELECT COUNT(*) FROM t_push_session WHERE uid IN ({marks})", users).fetchone()[0])


def test_forward_to_a_crashed_node_queues_is_swept_and_replays_once(cluster: tuple[Nodes, Server, Server]) -> None:
    """P-13: u1's route names B; B is SIGKILLed; A's push answers "queued" within the forward bound;
    B's sessions are swept within its liveness TTL (2 s here); u1 gets the push once, after what
    it had, on reconnecting to another node."""
    nodes, a, _ = cluster
    b = nodes.start()
    users = ["u1", "z1", "z2", "z3"]

    async def scenario() -> None:
        ws, *_others = [await connect(b, uid) for uid in users]
        await eventually(lambda: sessions(nodes, users) == 4)
        async with admin(a) as client:
            first = await push(client, user_id="u1", event="e", data=1)
            assert first["result"] == "delivered_to_socket"
            assert [m["data"] for m in await ws.receive(1)] == [1]
            nodes.kill(b)
            started = time.monotonic()
            second = await push(client, user_id="u1", event="e", data=2)
            assert second["result"] == "queued" and time.monotonic() - started < 1.5
            third = await push(client, user_id="u1", event="e", data=3)  # the cached route is gone: looked up again
            assert third["result"] == "queued"
        await eventually(lambda: sessions(nodes, users) == 0, timeout_s=5.0)
        async with await connect(a, "u1", offset=1, epoch=first["epoch"]) as again:
            assert [(m["offset"], m["data"]) for m in await again.receive(2)] == [(2, 2), (3, 3)]
            assert await again.silent(0.5)

    asyncio.run(scenario())


def test_stale_route_cache_is_looked_up_again(cluster: tuple[Nodes, Server, Server]) -> None:
    """P-14: C caches u9 -> A; u9 logs in on B (A's session is closed with 4001 through a kick); C's
    next push is refused by A as not here, looked up again and delivered on B; A never delivers it."""
    nodes, a, c = cluster
    b = nodes.start()

    async def scenario() -> None:
        on_a = await connect(a, "u9")
        async with admin(c) as client:
            assert (await push(client, user_id="u9", event="e", data=1))["result"] == "delivered_to_socket"
            assert [m["data"] for m in await on_a.receive(1)] == [1]
            on_b = await connect(b, "u9", offset=1)
            await asyncio.wait_for(on_a.ws.wait_closed(), 5)
            assert on_a.ws.close_code == 4001
            assert (await push(client, user_id="u9", event="e", data=2))["result"] == "delivered_to_socket"
            assert [(m["offset"], m["data"]) for m in await on_b.receive(1)] == [(2, 2)]
            assert await on_b.silent(0.3)
            await on_b.close()

    asyncio.run(scenario())


def test_internal_listener_needs_the_shared_secret(cluster: tuple[Nodes, Server, Server]) -> None:
    """A node's internal listener answers 401 without the shared secret (derived from the data
    directory's key, never logged), and "not here" for a session it does not hold."""
    nodes, _, _ = cluster
    with sqlite3.connect(nodes.data_dir / "push.db") as db:
        addresses = [
            str(row[0])
            for row in db.execute("SELECT address FROM t_push_node WHERE expires_at > ?", (int(time.time() * 1000),))
        ]
    secret = internal_secret(Settings(data_dir=nodes.data_dir))
    message = {"messages": [["nobody", "s1", 1, "e1", '{"type":"event"}']]}
    with httpx.Client(timeout=5) as client:
        for address in addresses:
            url = f"http://{address}/internal"
            assert client.post(f"{url}/push", json=message).status_code == 401
            assert client.post(f"{url}/push", json=message, headers={SECRET_HEADER: "guess"}).status_code == 401
            answer = client.post(f"{url}/push", json=message, headers={SECRET_HEADER: secret})
            assert (answer.status_code, answer.json()) == (200, {"delivered": [False]})
            kick = client.post(f"{url}/kick", json={"uid": "nobody", "sid": "s1"}, headers={SECRET_HEADER: secret})
            assert (kick.status_code, kick.json()) == (200, {"closed": False})
    assert addresses and all(secret not in server.log() for server in nodes.started)
