"""Push across real server nodes (``hongbao serve --redis-url``) on one real Redis: delivery from
one node to another, a crashed node (P-07, P-13), a stale route cache (P-14) with the old node's
late cleanup (P-09), zombie-free teardown of 1000 clients, group pushes of embedded nodes, a
connection kill during a group push (P-05, with readiness while Redis is unreachable)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
from websockets.asyncio.client import ClientConnection

from tests.integration.redis_nodes import (
    NODE_TTL_S,
    RedisNodes,
    admin,
    connect,
    eventually,
    frozen,
    logged_in,
    push,
    receive,
    token,
)


def test_push_crosses_nodes_then_queues_for_a_dead_node(redis_nodes: RedisNodes) -> None:
    """A push from A reaches u1 on B; with B SIGKILLed, pushes queue (within the forward bound) and
    replay in order when u1 comes back on A."""
    forward_timeout_s = 1.5  # a first forward opens a connection: room for a busy machine
    a, b = redis_nodes.start("a", "b", extra_config=f"push_forward_timeout_s = {forward_timeout_s}\n")

    async def scenario() -> None:
        async with admin(a) as pusher:
            ws = await logged_in(b, "u1")
            assert (redis_nodes.session_node("u1") or "").startswith("b/")
            first = await push(pusher, user_id="u1", event="hello", data=1)
            assert (first["result"], first["offset"]) == ("delivered_to_socket", 1)
            assert [(m["offset"], m["data"]) for m in await receive(ws, 1)] == [(1, 1)]
            redis_nodes.kill(b)
            started = time.monotonic()
            queued = [await push(pusher, user_id="u1", event="hello", data=i) for i in (2, 3, 4)]
            assert [(q["result"], q["offset"]) for q in queued] == [("queued", 2), ("queued", 3), ("queued", 4)]
            assert time.monotonic() - started < 3 * forward_timeout_s  # at most one forward timeout per push
            async with await connect(a, "u1", offset=1, epoch=first["epoch"]) as back:
                assert [(m["offset"], m["data"]) for m in await receive(back, 3)] == [(2, 2), (3, 3), (4, 4)]
                live = await push(pusher, user_id="u1", event="hello", data=5)
                assert live["result"] == "delivered_to_socket"
                assert [m["offset"] for m in await receive(back, 1)] == [5]
            await ws.close()

    asyncio.run(scenario())


def test_crashed_nodes_sessions_are_swept(standalone_nodes: RedisNodes) -> None:
    """P-07: 200 users on B; B SIGKILLed: within the liveness window its sessions, routes and online
    entries are gone from Redis, and pushes to those users are queued."""
    a, b = standalone_nodes.start("a", "b")

    async def scenario() -> None:
        sockets = await asyncio.gather(*(connect(b, f"p{i}") for i in range(200)))
        await eventually(
            lambda: standalone_nodes.online() == 200 and len(standalone_nodes.keys("route:*")) == 200, 10, "logins"
        )
        standalone_nodes.kill(b)
        await eventually(
            lambda: (
                not (
                    standalone_nodes.keys("route:*") or standalone_nodes.online() or standalone_nodes.keys("session:*")
                )
            ),
            NODE_TTL_S + 4,
            "a dead node's sessions swept within the liveness window",
        )
        assert standalone_nodes.keys("nodesessions:*") == []
        async with admin(a) as pusher:
            assert (await push(pusher, user_id="p7", event="late", data=0))["result"] == "queued"
        for ws in sockets:
            ws.transport.abort()

    asyncio.run(scenario())


def test_stale_route_cache_and_late_cleanup(standalone_nodes: RedisNodes) -> None:
    """P-14 and P-09: C caches u1 on A; u1 moves to B (A closes the old socket with 4001 and cleans
    up late); C's next push reaches B, A never delivers it, and u1's session, route and online entry
    on B stay intact."""
    a, b, c = standalone_nodes.start("a", "b", "c")

    async def scenario() -> None:
        async with admin(c) as pusher:
            old = await logged_in(a, "u1")
            assert (standalone_nodes.session_node("u1") or "").startswith("a/")
            assert (await push(pusher, user_id="u1", event="e", data=1))["result"] == "delivered_to_socket"
            assert [m["data"] for m in await receive(old, 1)] == [1]
            new = await connect(b, "u1", offset=1)
            await asyncio.wait_for(old.wait_closed(), 10)
            assert old.close_code == 4001
            answer = await push(pusher, user_id="u1", event="e", data=2)
            assert answer["result"] == "delivered_to_socket"
            assert [m["data"] for m in await receive(new, 1)] == [2]
            await eventually(lambda: len(standalone_nodes.keys("route:*")) == 1, 5, "A's late cleanup of the old route")
            assert (standalone_nodes.session_node("u1") or "").startswith("b/")
            with standalone_nodes.target.sync_client() as redis:
                sid = redis.hget("session:{u1}", "sessionId")
                assert sid is not None and (redis.get(f"route:{{{sid.decode()}}}") or b"").decode().startswith("b/")
            assert standalone_nodes.online() == 1 and standalone_nodes.keys("route:*") == [f"route:{{{sid.decode()}}}"]
            await new.close()

    asyncio.run(scenario())


def test_no_zombies_after_1000_clients_vanish(standalone_nodes: RedisNodes) -> None:
    """1000 clients connect (app pings keep them alive meanwhile); 500 close cleanly, 500 go silent
    (a dropped link): after the idle timeout no session, route, online or index entry is left."""
    [node] = standalone_nodes.start("a", extra_config="ws_idle_timeout_s = 3.0\nws_close_timeout_s = 1.0\n")

    async def scenario() -> None:
        sockets: list[ClientConnection] = []
        vanish = asyncio.Event()

        async def keep_alive() -> None:
            while not vanish.is_set():
                await asyncio.gather(*(ws.send('{"type":"ping"}') for ws in list(sockets)))
                await asyncio.sleep(1.0)

        pinging = asyncio.create_task(keep_alive())
        for batch in range(10):
            sockets += await asyncio.gather(*(connect(node, f"z{batch * 100 + i}") for i in range(100)))
        await eventually(lambda: standalone_nodes.online() == 1000, 15, "1000 logins")
        vanish.set()
        await pinging
        await asyncio.gather(*(ws.close() for ws in sockets[:500]))
        silent = sockets[500:]
        for ws in silent:
            ws.transport.pause_reading()  # never reads, never answers: the server sees a dead link
        await eventually(
            lambda: (
                not (
                    standalone_nodes.keys("session:*") or standalone_nodes.keys("route:*") or standalone_nodes.online()
                )
            ),
            15,
            "every session gone after the idle timeout",
        )
        assert standalone_nodes.keys("nodesessions:*") == []
        for ws in silent:
            ws.transport.abort()

    asyncio.run(scenario())


def test_a_live_session_redis_lost_is_written_back(standalone_nodes: RedisNodes) -> None:
    """Redis flushed under a connected user: the refresh after the user's next frame writes the
    session, route and online entry back (the connection still lives), and pushes reach it after
    a reset to the stream's new epoch."""
    [node] = standalone_nodes.start("a")

    async def scenario() -> None:
        async with await connect(node, "u1") as ws:
            await eventually(lambda: (standalone_nodes.session_node("u1") or "").startswith("a/"), 10, "u1 logged in")
            standalone_nodes.target.flush()
            await ws.ping()
            await eventually(
                lambda: (standalone_nodes.session_node("u1") or "").startswith("a/"), 10, "u1's session written back"
            )
            assert standalone_nodes.online() == 1 and len(standalone_nodes.keys("route:*")) == 1
            async with admin(node) as pusher:
                assert (await push(pusher, user_id="u1", event="back", data=1))["result"] == "delivered_to_socket"
            reset, event = await receive(ws, 2)  # the flush took u1's stream too: a new epoch, announced first
            assert reset == {"type": "reset", "epoch": event["epoch"]}
            assert (event["event"], event["data"], event["offset"]) == ("back", 1, 1)

    asyncio.run(scenario())


def test_a_push_missed_while_redis_lost_the_route_arrives_once_written_back(standalone_nodes: RedisNodes) -> None:
    """Redis lost u1's session, route and online entry (not its stream) while u1 stays connected to
    node a: a push through node b meanwhile is logged but finds u1 offline; the refresh after u1's
    next frame writes the session back and sends u1 what it missed, with no other push to wake it."""
    a, b = standalone_nodes.start("a", "b")

    async def scenario() -> None:
        async with await connect(a, "u1") as ws:
            await eventually(lambda: (standalone_nodes.session_node("u1") or "").startswith("a/"), 10, "u1 logged in")
            lost = [*standalone_nodes.keys("session:*"), *standalone_nodes.keys("route:*")]
            with standalone_nodes.target.sync_client() as client:
                client.delete(*lost, *standalone_nodes.keys("online:*"))
            async with admin(b) as pusher:
                assert (await push(pusher, user_id="u1", event="missed", data=1))["result"] == "queued"
            await ws.ping()
            [event] = await receive(ws, 1)
            assert (event["event"], event["data"], event["offset"]) == ("missed", 1, 1)

    asyncio.run(scenario())


def test_a_group_push_is_expanded_by_a_node_holding_the_group(standalone_nodes: RedisNodes) -> None:
    """Two embedded nodes on one Redis hold their groups in their own files: a group push made on A
    goes on A's queue, not on a stream every node on the Redis consumes (before: B claimed some of
    A's group pushes, found no such group in its file, and acked them to nobody; under load the
    ``packet_received`` of a pay on A never came). 20 pushes to A's group reach both members, on B,
    in order, and Redis holds no group stream."""
    a, b = standalone_nodes.start("a", "b")

    async def scenario() -> None:
        sockets = {uid: await connect(b, uid) for uid in ("u1", "u2")}
        async with httpx.AsyncClient(base_url=a.url, headers={"authorization": f"Bearer {token('u1')}"}) as owner:
            created = await owner.post("/v1/groups", json={"members": ["u1", "u2"]})
            assert created.status_code in (200, 201), created.text
            group = created.json()["group_id"]
        async with admin(a) as pusher:
            for i in range(20):
                assert (await push(pusher, group_id=group, event="g", data=i))["result"] == "queued"
        for ws in sockets.values():
            assert [m["data"] for m in await receive(ws, 20, timeout_s=15)] == list(range(20))
            await ws.close()

    asyncio.run(scenario())
    assert standalone_nodes.keys("*push_group*") == []


def test_a_frozen_node_does_not_hold_up_group_pushes_to_other_nodes(standalone_nodes: RedisNodes) -> None:
    """A group batch is sent in the background: while node B hangs (SIGSTOP), the forward of each
    group push to its member there waits out the forward timeout (5 s here), and A's own member
    still gets 10 pushes made one after the other within half that of the last (before, the next
    batch was claimed only once the forwards of the one before were answered: >= 5 s)."""
    forward_timeout_s = 5.0
    a, b = standalone_nodes.start("a", "b", extra_config=f"push_forward_timeout_s = {forward_timeout_s}\n")

    async def scenario() -> None:
        near, far = await logged_in(a, "u1"), await logged_in(b, "u2")
        async with httpx.AsyncClient(base_url=a.url, headers={"authorization": f"Bearer {token('u1')}"}) as owner:
            created = await owner.post("/v1/groups", json={"members": ["u1", "u2"]})
            assert created.status_code in (200, 201), created.text
            group = created.json()["group_id"]
        with frozen(b):  # pushed within B's node TTL (2 s), so its route still names it
            async with admin(a) as pusher:
                for i in range(10):
                    assert (await push(pusher, group_id=group, event="g", data=i))["result"] == "queued"
            pushed = time.monotonic()
            assert [m["data"] for m in await receive(near, 10, timeout_s=2 * forward_timeout_s)] == list(range(10))
            assert time.monotonic() - pushed < forward_timeout_s / 2
        for ws in (near, far):
            await ws.close()

    asyncio.run(scenario())


def test_group_push_survives_client_kill(standalone_nodes: RedisNodes) -> None:
    """P-05: the node's Redis connections are killed again and again during a 200-message group
    push: every member gets all 200, in order, each once; /readyz reports Redis degraded (200: the
    node still serves, DESIGN section 12) within a bound while Redis does not answer (its process
    stopped), and ready once it is back."""
    [node] = standalone_nodes.start("a")
    members = [f"g{i}" for i in range(10)]

    async def scenario() -> None:
        async with httpx.AsyncClient(
            base_url=node.url, headers={"authorization": f"Bearer {token(members[0])}"}
        ) as owner:
            created = await owner.post("/v1/groups", json={"members": members})
            assert created.status_code in (200, 201), created.text
            group = created.json()["group_id"]
        sockets = [await connect(node, uid) for uid in members]
        stop = asyncio.Event()

        async def killer() -> int:
            kills = 0
            with standalone_nodes.target.sync_client() as redis:
                while not stop.is_set():
                    kills += int(redis.client_kill_filter(_type="normal", skipme=True))
                    await asyncio.sleep(0.5)  # a blip at a time: redis-py retries each command 3 times
            return kills

        killing = asyncio.create_task(killer())
        async with admin(node) as pusher:
            for i in range(200):
                assert (await push(pusher, group_id=group, event="g", data=i))["result"] == "queued"
        got = await asyncio.gather(*(receive(ws, 200, timeout_s=15) for ws in sockets))
        stop.set()
        assert await killing >= 3
        for messages in got:
            assert [m["data"] for m in messages] == list(range(200))
            assert [m["offset"] for m in messages] == list(range(1, 201))
        for ws in sockets:
            await ws.close()

    asyncio.run(scenario())
    redis_pid = standalone_nodes.target.pids[0]
    assert httpx.get(f"{node.url}/readyz", timeout=10).json() == {"status": "ready", "degraded": []}
    os.kill(redis_pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        answer = httpx.get(f"{node.url}/readyz", timeout=10)
        assert answer.status_code == 200 and answer.json() == {"status": "degraded", "degraded": ["redis"]}
        assert time.monotonic() - started < 4.0
    finally:
        os.kill(redis_pid, signal.SIGCONT)
    deadline = time.monotonic() + 10
    while httpx.get(f"{node.url}/readyz", timeout=10).json()["status"] != "ready":
        assert time.monotonic() < deadline, "not ready again after Redis came back"
        time.sleep(0.2)
