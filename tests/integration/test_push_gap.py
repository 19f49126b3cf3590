"""A push gap is always told (docs/architecture.md section 7: a partial replay is never passed off as
complete): whenever a user's log may have lost entries -- Redis restarted from an older dump, or
events that could not be logged while Redis was down -- the client gets ``{"type": "reset"}``
before what follows, never new messages under offsets it already holds."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import redis
from hongbao.bench.services import redis_servers
from hongbao.server.push_client import PushClient

from tests.integration.redis_nodes import RedisNodes, admin, connect, push, receive, token
from tests.integration.test_redis_push_down import PrivateRedis, private_redis  # noqa: F401  (fixture)
from tests.server.conftest import Server

ROBUST = "push_store_failures = 1000\n"  # connections ride out the outage: the gap must be told on them


def _restart(redis_target: PrivateRedis) -> None:
    """SIGKILL the redis-server and start it again on its dump (the last SAVE), as a crash does."""
    assert redis_target.process is not None
    redis_target.process.kill()
    redis_target.process.wait()
    redis_target.process = redis_servers.start_on(redis_target.directory, redis_target.port)


def _save(redis_target: PrivateRedis) -> None:
    with redis.Redis(port=redis_target.port) as client:
        client.save()


async def _events(node: Server, uid: str, values: range) -> None:
    async with admin(node) as pusher:
        for value in values:
            await push(pusher, user_id=uid, event="e", data=value)


def _data(messages: list[dict[str, Any]]) -> list[Any]:
    return [m.get("data") if m.get("type") == "event" else m["type"] for m in messages]


def test_a_restart_from_an_older_dump_is_told_to_live_and_offline_clients(
    tmp_path: Path,
    private_redis: PrivateRedis,
) -> None:
    """Redis saved at offset 3, then 3 more events, then killed and restarted on that dump: a live
    client gets a reset then the next event (not an event at offset 4 dropped as a duplicate), and
    an offline client resuming at offset 6 gets a reset before the new events held."""
    nodes = RedisNodes(tmp_path, private_redis.target)
    [node] = nodes.start("a", extra_config=ROBUST)
    try:

        async def scenario() -> None:
            live, away = await connect(node, "u1"), await connect(node, "u2")
            for uid in ("u1", "u2"):
                await _events(node, uid, range(1, 4))
            assert [m["offset"] for m in await receive(live, 3)] == [1, 2, 3]
            await receive(away, 3)
            await asyncio.to_thread(_save, private_redis)
            for uid in ("u1", "u2"):
                await _events(node, uid, range(4, 7))
            got = await receive(live, 3)
            epoch = got[-1]["epoch"]
            assert [m["offset"] for m in got] == [4, 5, 6]
            away_last = (await receive(away, 3))[-1]
            await away.close()
            await asyncio.to_thread(_restart, private_redis)
            await asyncio.sleep(1.5)  # the node's tick notices the new Redis process
            await _events(node, "u1", range(7, 8))
            told = await receive(live, 2, timeout_s=10)
            assert _data(told) == ["reset", 7] and told[0]["epoch"] != epoch, told
            await _events(node, "u2", range(7, 11))
            back = await connect(node, "u2", offset=away_last["offset"], epoch=away_last["epoch"])
            replayed = await receive(back, 5)
            assert _data(replayed) == ["reset", 7, 8, 9, 10], replayed
            await live.close()
            await back.close()

        asyncio.run(scenario())
    finally:
        nodes.finish()


def test_events_lost_while_redis_was_down_are_told(tmp_path: Path, private_redis: PrivateRedis) -> None:
    """Redis frozen while m1 pays an exclusive packet for m2 and m2 opens it (their events --
    m2's ``packet_received`` and ``opened``, m1's ``finished`` -- cannot be logged), then thawed
    (the same process: nothing restarted): both live users get a reset within seconds, without
    waiting for a next message. (A group's events would not be lost here: an embedded node queues
    them in its own file, beside its groups, and appends them once Redis is back.)"""
    nodes = RedisNodes(tmp_path, private_redis.target)
    [node] = nodes.start("a", extra_config=ROBUST + "redis_timeout_ms = 100\n")
    try:

        async def scenario() -> None:
            sockets = [await connect(node, uid) for uid in ("m1", "m2")]
            for uid, ws in zip(("m1", "m2"), sockets, strict=True):
                await _events(node, uid, range(1, 2))
                assert _data(await receive(ws, 1)) == [1]
            async with admin(node) as pusher:
                assert (await pusher.post("/v1/admin/accounts/m1/topup", json={"amount_fen": 100})).status_code == 200
            sender = httpx.Client(base_url=node.url, headers={"authorization": f"Bearer {token('m1')}"})
            receiver = httpx.Client(base_url=node.url, headers={"authorization": f"Bearer {token('m2')}"})
            with sender, receiver:
                order_id = sender.post(
                    "/v1/packets", json={"kind": "exclusive", "total_fen": 10, "receiver_id": "m2"}
                ).json()["order_id"]
                assert private_redis.process is not None
                private_redis.process.send_signal(signal.SIGSTOP)
                try:
                    assert sender.post(f"/v1/packets/{order_id}/pay").status_code == 200
                    assert receiver.post(f"/v1/packets/{order_id}/open").status_code == 200
                    await asyncio.sleep(1.0)  # the appends time out; the breaker opens
                finally:
                    private_redis.process.send_signal(signal.SIGCONT)
            for ws in sockets:
                told = await receive(ws, 1, timeout_s=15)
                assert _data(told) == ["reset"], told
                await ws.close()

        asyncio.run(scenario())
    finally:
        nodes.finish()


def test_an_event_lost_for_one_user_resets_that_user_only(tmp_path: Path, private_redis: PrivateRedis) -> None:
    """Redis frozen while node a posts u1's ``opened`` (its append fails), then thawed: u1, whose
    socket is on node b, gets a reset within seconds; u2, on node b too, gets none: its next event
    follows its last offset in the same epoch (a lost append renews the streams it names, not every
    stream of every node)."""
    nodes = RedisNodes(tmp_path, private_redis.target)
    a, b = nodes.start("a", "b", extra_config=ROBUST + "redis_timeout_ms = 100\n")
    try:

        async def scenario() -> None:
            sockets = {uid: await connect(b, uid) for uid in ("u1", "u2")}
            for uid, ws in sockets.items():
                await _events(b, uid, range(1, 2))
                assert _data(await receive(ws, 1)) == [1]
            with httpx.Client(base_url=a.url, headers={"authorization": f"Bearer {token('s')}"}) as sender:
                gid = sender.post("/v1/groups", json={"members": ["u1", "u2"]}).json()["group_id"]
                async with admin(a) as pusher:
                    assert (
                        await pusher.post("/v1/admin/accounts/s/topup", json={"amount_fen": 100})
                    ).status_code == 200
                order_id = sender.post("/v1/packets", json={"count": 2, "total_fen": 20, "group_id": gid}).json()[
                    "order_id"
                ]
                assert sender.post(f"/v1/packets/{order_id}/pay").status_code == 200
            heard = {uid: await receive(ws, 1) for uid, ws in sockets.items()}
            assert all(got[0]["event"] == "packet_received" for got in heard.values()), heard
            assert private_redis.process is not None
            private_redis.process.send_signal(signal.SIGSTOP)
            try:
                with httpx.Client(base_url=a.url, headers={"authorization": f"Bearer {token('u1')}"}) as opener:
                    assert opener.post(f"/v1/packets/{order_id}/open").status_code == 200
                await asyncio.sleep(1.0)  # the append times out
            finally:
                private_redis.process.send_signal(signal.SIGCONT)
            told = await receive(sockets["u1"], 1, timeout_s=15)
            assert _data(told) == ["reset"], told
            await asyncio.sleep(2.0)  # two ticks of every node: a renewal of every stream would be told by now
            await _events(b, "u2", range(2, 3))
            after = await receive(sockets["u2"], 1)
            assert _data(after) == [2] and after[0]["epoch"] == heard["u2"][0]["epoch"], after
            assert after[0]["offset"] == heard["u2"][0]["offset"] + 1, after
            for ws in sockets.values():
                await ws.close()

        asyncio.run(scenario())
    finally:
        nodes.finish()


def test_events_lost_while_redis_was_down_are_told_to_clients_that_reconnect(
    tmp_path: Path,
    private_redis: PrivateRedis,
) -> None:
    """As above, with the node dropping its connections (three store failures) while Redis is
    frozen: the members' PushClients reconnect with their cursors once it is back, and each is told
    (reset) or gets the packet's announcement."""
    nodes = RedisNodes(tmp_path, private_redis.target)
    [node] = nodes.start("a", extra_config="redis_timeout_ms = 100\n")
    url = node.url.replace("http://", "ws://") + "/v1/ws"
    try:

        async def scenario() -> None:
            members = [f"m{i}" for i in range(6)]
            heard: dict[str, list[str]] = {uid: [] for uid in members}
            clients = [
                PushClient(
                    url,
                    lambda uid=uid: token(uid),
                    on_event=lambda e, uid=uid: heard[uid].append(e.event),
                    on_reset=lambda uid=uid: heard[uid].append("reset"),
                    backoff_base_s=0.1,
                    backoff_cap_s=0.5,
                )
                for uid in members
            ]
            for client in clients:
                await client.__aenter__()
                await client.wait_connected()
            with httpx.Client(base_url=node.url, headers={"authorization": f"Bearer {token('m0')}"}) as m0:
                gid = m0.post("/v1/groups", json={"members": members[1:]}).json()["group_id"]
                async with admin(node) as pusher:
                    assert (
                        await pusher.post("/v1/admin/accounts/m0/topup", json={"amount_fen": 100})
                    ).status_code == 200
                order_id = m0.post("/v1/packets", json={"count": 1, "total_fen": 10, "group_id": gid}).json()[
                    "order_id"
                ]
                assert private_redis.process is not None
                private_redis.process.send_signal(signal.SIGSTOP)
                try:
                    await asyncio.sleep(2.5)  # store failures: the node drops its connections
                    assert m0.post(f"/v1/packets/{order_id}/pay").status_code == 200
                    await asyncio.sleep(1.0)
                finally:
                    private_redis.process.send_signal(signal.SIGCONT)
            deadline = asyncio.get_running_loop().time() + 20
            while any(not ({"reset", "packet_received"} & set(h)) for h in heard.values()):
                assert asyncio.get_running_loop().time() < deadline, heard
                await asyncio.sleep(0.2)
            for client in clients:
                await client.close()

        asyncio.run(scenario())
    finally:
        nodes.finish()


def test_a_crashed_worker_s_replacement_tells_every_client(tmp_path: Path, private_redis: PrivateRedis) -> None:
    """The only worker SIGKILLed (the events it had not logged yet died with it): its replacement
    starts every stream anew, so the client, back on it, is told (reset)."""
    nodes = RedisNodes(tmp_path, private_redis.target)
    [node] = nodes.start("a")
    url = node.url.replace("http://", "ws://") + "/v1/ws"
    try:

        async def scenario() -> None:
            heard: list[str] = []
            client = PushClient(
                url,
                lambda: token("m1"),
                on_event=lambda e: heard.append(e.event),
                on_reset=lambda: heard.append("reset"),
                backoff_base_s=0.1,
                backoff_cap_s=0.5,
            )
            async with client:
                await client.wait_connected()
                await _events(node, "m1", range(1, 3))
                deadline = asyncio.get_running_loop().time() + 10
                while heard != ["e", "e"]:
                    assert asyncio.get_running_loop().time() < deadline, heard
                    await asyncio.sleep(0.05)
                [worker] = _workers(node)
                os.kill(worker, signal.SIGKILL)
                while "reset" not in heard:
                    assert asyncio.get_running_loop().time() < deadline + 20, heard
                    await asyncio.sleep(0.1)
                assert client.stats.connects >= 2

        asyncio.run(scenario())
    finally:
        nodes.finish()


def _workers(server: Server) -> list[int]:
    path = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
    return [int(pid) for pid in path.read_text().split()]
