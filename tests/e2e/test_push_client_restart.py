"""The asyncio push client rides out a server that is not there yet, restarts, or dies in the
middle of a handshake: every failed connect is retried with full-jitter backoff, whether or not
the client was ever connected, and ``wait_connected`` waits through it. Real ``hongbao serve``
subprocesses, the fault proxy, and a listener that closes what it accepts."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from hongbao.bench.services.process import free_port
from hongbao.server.push_client import PushClient, PushEvent

from tests.e2e.conftest import apush, until
from tests.e2e.proxy import Proxy, Slammer
from tests.server.conftest import Server

FAST: dict[str, Any] = {"backoff_base_s": 0.05, "backoff_cap_s": 0.4}
Retries = list[tuple[int, float, str]]


def _port(server: Server) -> int:
    return int(server.url.rsplit(":", 1)[1])


def _workers(server: Server) -> set[int]:
    path = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
    return {int(pid) for pid in path.read_text().split()}


def _within_full_jitter(retries: Retries) -> bool:
    return all(0 <= delay <= min(0.4, 0.05 * 2**n) for n, delay, _ in retries)


async def test_a_client_started_before_the_server_connects_once_it_is_up(
    make_server: Callable[..., Server], event_loop_kind: str
) -> None:
    """Nothing listens on the port yet: each connect is refused and retried with full-jitter backoff,
    wait_connected keeps waiting, and once ``hongbao serve`` is up there the client connects by
    itself and receives a push."""
    port, uid, got, retries = free_port(), f"early-{event_loop_kind}", list[PushEvent](), Retries()
    server: Server | None = None
    client = PushClient(
        f"ws://127.0.0.1:{port}/v1/ws",
        lambda: server.token(uid) if server else "not-yet",
        on_event=got.append,
        on_retry=lambda *a: retries.append(a),
        **FAST,
    )
    async with client:
        connected = asyncio.create_task(client.wait_connected(60))
        await until(lambda: len(retries) >= 4)
        assert not connected.done()
        server = await asyncio.to_thread(make_server, port=port)
        await connected
        await apush(server, uid, "credited", {"n": 1})
        await until(lambda: len(got) == 1)
    assert {reason for _, _, reason in retries[:4]} == {"ConnectionRefusedError"}
    assert [n for n, _, _ in retries] == list(range(len(retries))) and _within_full_jitter(retries)
    assert client.stats.connects == 1 and (got[0].offset, got[0].data) == (1, {"n": 1})


async def test_links_closed_before_the_101_are_retried(push_server: Server, event_loop_kind: str) -> None:
    """Every connection is accepted and closed at once, before any answer (a worker that dies right
    after accept(); under uvloop the websockets library raises ConnectionClosedError as the
    handshake starts): the client retries with backoff instead of stopping, wait_connected keeps
    waiting, and the client connects by itself once the port forwards to a real server again."""
    uid, got, retries = f"slammed-{event_loop_kind}", list[PushEvent](), Retries()
    slammer = Slammer()
    proxy = Proxy(_port(push_server))
    client = PushClient(
        f"ws://127.0.0.1:{slammer.port}/v1/ws",
        lambda: push_server.token(uid),
        on_event=got.append,
        on_retry=lambda *a: retries.append(a),
        **FAST,
    )
    try:
        async with client:
            connected = asyncio.create_task(client.wait_connected(60))
            await until(lambda: len(retries) >= 8)
            assert not connected.done()
            slammer.close()
            await proxy.start(slammer.port)
            await connected
            await apush(push_server, uid, "credited", {"n": 1})
            await until(lambda: len(got) == 1)
    finally:
        slammer.close()
        await proxy.close()
    reasons = {reason for _, _, reason in retries}
    expected = "ConnectionClosedError" if event_loop_kind == "uvloop" else "InvalidMessage"
    assert expected in reasons, reasons  # the case under test was met
    assert _within_full_jitter(retries) and client.stats.connects == 1 and got[0].data == {"n": 1}


async def test_a_worker_killed_while_clients_connect(make_server: Callable[..., Server], event_loop_kind: str) -> None:
    """SIGKILL of the only worker while 200 clients connect, 20 handshakes at a time (the storm that
    exited 2): the master starts another, every client connects by itself (none raises) and receives
    a broadcast."""
    server = make_server()
    topic, users = f"restart-{event_loop_kind}", [f"r{n}-{event_loop_kind}" for n in range(200)]
    tokens = {uid: server.token(uid) for uid in users}
    got: dict[str, list[PushEvent]] = {uid: [] for uid in users}
    clients = [
        PushClient(
            server.url.replace("http://", "ws://") + "/v1/ws",
            partial(tokens.__getitem__, uid),
            on_event=got[uid].append,
            topics=(topic,),
            **FAST,
        )
        for uid in users
    ]
    gate = asyncio.Semaphore(20)

    async def connect(client: PushClient) -> None:
        async with gate:  # as the storm connects its users, CONNECT_PARALLEL at a time
            await client.__aenter__()
            await client.wait_connected(60)

    (victim,) = _workers(server)
    connecting = asyncio.gather(*(connect(client) for client in clients))
    try:
        await until(lambda: sum(c.stats.connects for c in clients) >= 20)
        os.kill(victim, signal.SIGKILL)
        connected_at_kill = sum(c.stats.connects for c in clients)
        await connecting
        await until(lambda: all(topic in c.subscribed for c in clients), timeout_s=30)
        await apush(server, topic, "notice", {"n": 1}, to="topic")
        await until(lambda: all(len(events) == 1 for events in got.values()), timeout_s=30)
    finally:
        await asyncio.gather(connecting, return_exceptions=True)
        await asyncio.gather(*(client.close() for client in clients))
    assert connected_at_kill < len(clients)  # killed while clients were connecting
    assert victim not in _workers(server) and len(_workers(server)) == 1
    assert sum(c.stats.connects for c in clients) > len(clients)  # some connected twice: the kill was felt
