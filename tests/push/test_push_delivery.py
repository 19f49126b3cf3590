"""Targeted, group and broadcast pushes on real servers: order, replay, resets, bounds (docs/architecture.md
section 7; push cases P-03, P-29)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import websockets

from tests.push.conftest import Nodes, admin, connect, eventually, metric, push
from tests.server.conftest import Server


def offsets(messages: list[dict[str, Any]]) -> list[int]:
    return [m["offset"] for m in messages]


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A 1-worker server whose connections may hold 128 KiB of output."""
    started = Nodes(tmp_path_factory.mktemp("one_worker"))
    yield started.start(extra_config="ws_max_output_bytes = 131072\n")
    started.finish()


def test_targeted_push_on_one_worker(one_worker: Server) -> None:
    """Pushes to a connected user reach its socket at once, in order, as the documented message."""
    server = one_worker

    async def scenario() -> None:
        async with await connect(server, "u1") as ws, admin(server) as client:
            answers = [await push(client, user_id="u1", event="hello", data={"i": i}) for i in range(3)]
            assert [(a["result"], a["offset"]) for a in answers] == [("delivered_to_socket", i) for i in (1, 2, 3)]
            epoch = answers[0]["epoch"]
            got = await ws.receive(3)
            assert got == [
                {"type": "event", "event": "hello", "data": {"i": i}, "offset": i + 1, "epoch": epoch} for i in range(3)
            ]

    asyncio.run(scenario())


def test_targeted_push_across_workers(two_workers: Server) -> None:
    """On 2 workers every push reaches its user, those held by the other worker through the internal forward."""
    server = two_workers

    async def scenario() -> None:
        users = [f"w{i}" for i in range(8)]
        sockets = [await connect(server, uid) for uid in users]
        try:
            for round_ in range(1, 6):  # each admin request lands on either worker
                for uid in users:
                    async with admin(server) as client:
                        answer = await push(client, user_id=uid, event="round", data=round_)
                    assert (answer["result"], answer["offset"]) == ("delivered_to_socket", round_)
            for ws in sockets:
                assert [m["data"] for m in await ws.receive(5)] == [1, 2, 3, 4, 5]
        finally:
            for ws in sockets:
                await ws.close()
        # each worker publishes its counters every second (App.metrics.flush): wait for the forwarder's
        await eventually(lambda: metric(server, "push_forwarded") > 0)

    asyncio.run(scenario())


def test_replay_comes_in_order_before_new_messages(two_workers: Server) -> None:
    """A reconnect gets what followed its offset, then the pushes racing it: consecutive offsets, no repeat."""
    server = two_workers

    async def scenario() -> None:
        async with admin(server) as client:
            first = [await push(client, user_id="r1", event="e", data=i) for i in range(1, 6)]
            assert {a["result"] for a in first} == {"queued"}

            async def racing() -> None:
                for i in range(6, 26):
                    await push(client, user_id="r1", event="e", data=i)

            pusher = asyncio.create_task(racing())
            async with await connect(server, "r1", offset=2, epoch=first[0]["epoch"]) as ws:
                await pusher
                got = await ws.receive(23)
                assert offsets(got) == list(range(3, 26)) and [m["data"] for m in got] == list(range(3, 26))
                assert await ws.silent(0.3)

    asyncio.run(scenario())


def test_resume_with_no_cursor_replays_everything_queued(two_workers: Server) -> None:
    """P-29: connect, receive nothing, leave; three pushes; a reconnect with no offset gets all three."""
    server = two_workers

    async def scenario() -> None:
        ws = await connect(server, "p29")
        assert await ws.silent(0.2)
        await ws.close()
        async with admin(server) as client:
            answers = [await push(client, user_id="p29", event="e", data=i) for i in range(3)]
        assert [a["result"] for a in answers] == ["queued"] * 3
        async with await connect(server, "p29") as again:
            assert [m["data"] for m in await again.receive(3)] == [0, 1, 2]
            assert await again.silent(0.3)

    asyncio.run(scenario())


def test_acks_trim_and_lost_history_is_reported(nodes: Nodes) -> None:
    """Acked messages are not replayed; a foreign epoch, or a gap past the length bound or the age
    bound, is announced with a reset before what is still held."""
    server = nodes.start(extra_config="push_log_max_messages = 3\npush_log_max_age_s = 3.0\n")

    async def scenario() -> None:
        async with admin(server) as client:
            async with await connect(server, "g1") as ws:
                epoch = (await push(client, user_id="g1", event="e", data=1))["epoch"]
                await push(client, user_id="g1", event="e", data=2)
                assert offsets(await ws.receive(2)) == [1, 2]
                await ws.send({"type": "ack", "offset": 2})
                await asyncio.sleep(1.3)  # acks are written once a tick
            async with await connect(server, "g1") as ws:
                assert await ws.silent(0.3)
            for i in range(3, 8):
                await push(client, user_id="g1", event="e", data=i)
            async with await connect(server, "g1", offset=4, epoch=epoch) as ws:  # 5..7 are held: complete
                assert offsets(await ws.receive(3)) == [5, 6, 7]
            async with await connect(server, "g1", offset=2, epoch=epoch) as ws:  # 3 and 4 are gone
                reset, *held = await ws.receive(4)
                assert reset == {"type": "reset", "epoch": epoch} and offsets(held) == [5, 6, 7]
            async with await connect(server, "g1", offset=7, epoch="someother") as ws:
                reset, *held = await ws.receive(4)
                assert reset == {"type": "reset", "epoch": epoch} and offsets(held) == [5, 6, 7]
            await asyncio.sleep(3.1)
            await push(client, user_id="g1", event="e", data=8)
            async with await connect(server, "g1", offset=5, epoch=epoch) as ws:  # 6 and 7 aged out
                reset, fresh = await ws.receive(2)
                assert reset["type"] == "reset" and fresh["offset"] == 8 and await ws.silent(0.3)

    asyncio.run(scenario())


def test_over_the_cap_is_queued_and_replayed_once(one_worker: Server) -> None:
    """P-03: a client that stops reading is closed at its output cap; nothing it did not ack is
    lost: a reconnect after the last message it read gets the rest, each exactly once."""
    server = one_worker

    async def scenario() -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
        stuck = await connect(server, "slow", sock=sock, max_queue=1)
        results = []
        async with admin(server) as client:
            for i in range(1, 41):
                results.append(
                    (await push(client, user_id="slow", event="big", data={"i": i, "pad": "x" * 20_000}))["result"]
                )
        assert results[0] == "delivered_to_socket" and results[-1] == "queued"
        read = []
        try:
            while True:
                read.append(await asyncio.wait_for(stuck.ws.recv(), 5))
        except websockets.ConnectionClosed as closed:
            assert closed.rcvd is not None and closed.rcvd.code == 1013
        last = len(read)
        assert [m["offset"] for m in map(orjson.loads, read)] == list(range(1, last + 1))
        async with await connect(server, "slow", offset=last) as ws:
            rest = await ws.receive(40 - last)
            assert offsets(rest) == list(range(last + 1, 41)) and await ws.silent(0.3)

    asyncio.run(scenario())


def test_one_session_per_user(two_workers: Server) -> None:
    """A second connection of a user replaces the first, which is closed with 4001; pushes go to the new one."""
    server = two_workers

    async def scenario() -> None:
        old = await connect(server, "twice")
        async with await connect(server, "twice") as new, admin(server) as client:
            await old.ws.wait_closed()
            assert old.ws.close_code == 4001
            assert (await push(client, user_id="twice", event="e"))["result"] == "delivered_to_socket"
            assert [m["event"] for m in await new.receive(1)] == ["e"]

    asyncio.run(scenario())


def test_group_push_of_200_reaches_each_member_once(two_workers: Server) -> None:
    """200 group pushes: every member connected to either worker gets each exactly once, in
    offset order; an offline member finds all 200 on connecting."""
    server = two_workers
    members = [f"m{i}" for i in range(6)]

    async def scenario() -> None:
        owner = server.async_client("m0")
        gid = (await owner.post("/v1/groups", json={"members": [*members[1:], "away"]})).json()["group_id"]
        await owner.aclose()
        sockets = [await connect(server, uid) for uid in members]
        async with admin(server) as client:
            answers = await asyncio.gather(*(push(client, group_id=gid, event="g", data=i) for i in range(200)))
        assert {a["result"] for a in answers} == {"queued"}
        for ws in [*sockets, await connect(server, "away")]:
            got = await ws.receive(200)
            assert offsets(got) == list(range(1, 201)) and sorted(m["data"] for m in got) == list(range(200))
            assert await ws.silent(0.2)
            await ws.close()

    asyncio.run(scenario())


def test_broadcast_reaches_every_subscriber_on_every_worker(two_workers: Server) -> None:
    """A broadcast goes to each subscriber once (one frame per node), with per-topic offsets; others get nothing."""
    server = two_workers

    async def scenario() -> None:
        subscribers = [await connect(server, f"s{i}") for i in range(10)]
        other = await connect(server, "nosub")
        for ws in subscribers:
            await ws.send({"type": "subscribe", "topic": "news"})
            assert await ws.receive(1) == [{"type": "subscribed", "topic": "news"}]
        sends = metric(server, "push_broadcast_sends")
        async with admin(server) as client:
            published = [await push(client, topic="news", event="b", data=i) for i in range(3)]
        assert [p["offset"] for p in published] == [1, 2, 3]
        for ws in subscribers:
            got = await ws.receive(3)
            epoch = published[0]["epoch"]
            assert [(m["topic"], m["offset"], m["data"], m["epoch"]) for m in got] == [
                ("news", i + 1, i, epoch) for i in range(3)
            ]
        assert await other.silent(0.3)
        await eventually(lambda: metric(server, "push_broadcast_sends") == sends + 30)
        for ws in [*subscribers, other]:
            await ws.close()

    asyncio.run(scenario())
