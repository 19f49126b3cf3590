"""The asyncio push client (server/push_client.py) against a real server: delivery and acks,
resume over a dropped link, half-open detection, reset on a lost history, backoff with full
jitter, giving up on 401, and 4001 (replaced)."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from hongbao.server.push_client import (
    AuthenticationFailed,
    PushClient,
    PushEvent,
    Replaced,
    backoff_delay,
)
from hongbao.server.push_hub import TICK_S

from tests.e2e.conftest import apush, until, ws_url
from tests.e2e.proxy import Proxy
from tests.server import flows
from tests.server.conftest import Server


def _client(server: Server, uid: str, got: list[PushEvent], url: str | None = None, **options: Any) -> PushClient:
    """A client of ``uid`` appending its events to ``got``, with fast backoff (0.05 s base, 0.4 s cap)."""
    options = {"backoff_base_s": 0.05, "backoff_cap_s": 0.4} | options
    return PushClient(url or ws_url(server), lambda: server.token(uid), on_event=got.append, **options)


async def test_events_arrive_once_in_order_and_are_acked(push_server: Server, event_loop_kind: str) -> None:
    """Five pushes reach the online client once each in offset order; each is acked once, and the
    server holds the acks (written once a tick): a later client with no cursor is replayed nothing."""
    got: list[PushEvent] = []
    uid = f"acks-{event_loop_kind}"
    async with _client(push_server, uid, got) as client:
        await client.wait_connected()
        for n in range(5):
            await apush(push_server, uid, "credited", {"n": n})
        await until(lambda: len(got) == 5)
        epoch = client.epoch
    assert [(e.offset, e.event, e.data["n"], e.topic) for e in got] == [(n + 1, "credited", n, None) for n in range(5)]
    assert epoch and all(e.epoch == epoch for e in got)
    assert (client.stats.acks, client.stats.duplicates, client.stats.events) == (5, 0, 5)
    await asyncio.sleep(TICK_S * 1.5)
    later: list[PushEvent] = []
    async with _client(push_server, uid, later) as again:
        await again.wait_connected()
        await apush(push_server, uid, "credited", {"n": 5})
        await until(lambda: len(later) == 1)
    assert [(e.offset, e.data["n"], e.epoch) for e in later] == [(6, 5, epoch)]


async def test_a_real_open_pushes_its_events(push_server: Server, event_loop_kind: str) -> None:
    """A group packet paid and opened over HTTP: the member's client gets packet_received, then its own
    opened with the amount the open answered, then credited with the same amount (the services' events)."""
    sender, member = f"giver-{event_loop_kind}", f"taker-{event_loop_kind}"
    got: list[PushEvent] = []
    async with _client(push_server, member, got) as client:
        await client.wait_connected()
        group_id = await asyncio.to_thread(flows.group, push_server, sender, [member])
        body = {"kind": "lucky", "count": 1, "total_fen": 888, "group_id": group_id, "greeting": "恭喜发财"}
        order_id = await asyncio.to_thread(flows.paid_packet, push_server, sender, body, 888)
        await until(lambda: len(got) == 1)
        with push_server.client(member) as http:
            amount = flows.ok(await asyncio.to_thread(http.post, f"/v1/packets/{order_id}/open"))["amount_fen"]
        await until(lambda: {"opened", "credited"} <= {e.event for e in got})
    received, opened, credited = ({e.event: e for e in got}[name] for name in ("packet_received", "opened", "credited"))
    assert received.offset == 1 and received.data["order_id"] == order_id and received.data["greeting"] == "恭喜发财"
    assert opened.data["order_id"] == order_id and opened.data["amount_fen"] == amount == 888
    assert credited.data == {"order_id": order_id, "amount_fen": 888} and opened.offset < credited.offset


async def test_resume_after_a_dropped_link_replays_in_order(push_server: Server, event_loop_kind: str) -> None:
    """Link reset, three pushes while the server is unreachable: the reconnect carries ?offset=3&epoch=,
    and the client ends with offsets 1..6 in order, none twice, no reset."""
    got: list[PushEvent] = []
    uid = f"resume-{event_loop_kind}"
    proxy = Proxy(int(push_server.url.rsplit(":", 1)[1]))
    port = await proxy.start()
    try:
        async with _client(push_server, uid, got, url=f"ws://127.0.0.1:{port}/v1/ws") as client:
            await client.wait_connected()
            for n in range(3):
                await apush(push_server, uid, "opened", {"n": n})
            await until(lambda: len(got) == 3)
            proxy.refusing = True
            proxy.drop()
            for n in range(3, 6):
                answer = await apush(push_server, uid, "opened", {"n": n})
            resume = parse_qs(urlsplit(client.resume_url()).query)
            proxy.refusing = False
            await until(lambda: len(got) == 6)
        assert resume == {"hello": ["1"], "offset": ["3"], "epoch": [str(got[0].epoch)]}
        assert answer["result"] == "queued"
        assert [(e.offset, e.data["n"]) for e in got] == [(n + 1, n) for n in range(6)]
        assert (client.stats.connects, client.stats.resets, client.stats.events) == (2, 0, 6)
    finally:
        await proxy.close()


async def test_half_open_link_is_noticed_by_the_app_ping(push_server: Server, event_loop_kind: str) -> None:
    """A link that stops carrying bytes without closing: no answer within pong_timeout_s of an app
    ping drops it, the client reconnects and receives what was pushed meanwhile."""
    got: list[PushEvent] = []
    uid = f"frozen-{event_loop_kind}"
    proxy = Proxy(int(push_server.url.rsplit(":", 1)[1]))
    port = await proxy.start()
    try:
        async with _client(
            push_server, uid, got, url=f"ws://127.0.0.1:{port}/v1/ws", ping_interval_s=0.3, pong_timeout_s=0.2
        ) as client:
            await client.wait_connected()
            proxy.freeze()
            await until(lambda: proxy.links == 2, timeout_s=5)  # the app ping found the link dead
            proxy.drop()  # the frozen link's server side
            proxy.thaw()
            await apush(push_server, uid, "refunded", {"n": 1})
            await until(lambda: len(got) == 1)
        assert client.stats.connects == 2
        assert (got[0].offset, got[0].event) == (1, "refunded")
    finally:
        await proxy.close()


async def test_topics_are_subscribed_again_after_a_reconnect(push_server: Server, event_loop_kind: str) -> None:
    """Broadcasts on a subscribed topic arrive with the topic and its own offsets, unacked, leaving the
    user's cursor alone; while the link is down ``subscribed`` is empty (nothing confirms it), and
    after the reconnect the client subscribes again by itself and gets the next broadcast."""
    topic, got = f"news-{event_loop_kind}", list[PushEvent]()
    proxy = Proxy(int(push_server.url.rsplit(":", 1)[1]))
    port = await proxy.start()
    try:
        async with _client(
            push_server, f"reader-{event_loop_kind}", got, url=f"ws://127.0.0.1:{port}/v1/ws", topics=(topic,)
        ) as client:
            await until(lambda: topic in client.subscribed)
            await apush(push_server, topic, "notice", {"n": 1}, to="topic")
            await until(lambda: len(got) == 1)
            proxy.refusing = True
            proxy.drop()
            await until(lambda: not client.subscribed)
            proxy.refusing = False
            await until(lambda: client.stats.connects == 2 and topic in client.subscribed)
            await apush(push_server, topic, "notice", {"n": 2}, to="topic")
            await until(lambda: len(got) == 2)
        assert [(e.topic, e.offset, e.data["n"]) for e in got] == [(topic, 1, 1), (topic, 2, 2)]
        assert client.stats.acks == 0 and client.last_offset is None  # the user cursor: no topic moves it
        assert isinstance(client.epoch, str)  # (the hello named the user stream's epoch)
    finally:
        await proxy.close()


async def test_expired_token_reconnects_at_once_with_a_fresh_one(push_server: Server, event_loop_kind: str) -> None:
    """The server closes a connection whose token expired (4003, grace 0.2 s): the client asks its
    provider for a fresh token and reconnects at once (no backoff), and pushes keep arriving."""
    server = push_server
    uid, got, minted, retries = f"expiring-{event_loop_kind}", list[PushEvent](), list[str](), list[object]()

    def provider() -> str:
        minted.append(server.token(uid, ttl_s=2 if not minted else 3600))
        return minted[-1]

    client = PushClient(
        ws_url(server), provider, on_event=got.append, on_retry=lambda *a: retries.append(a), stable_after_s=0.5
    )
    async with client:
        await until(lambda: client.stats.connects == 2, timeout_s=8)
        await apush(server, uid, "credited", {"n": 1})
        await until(lambda: len(got) == 1)
    assert len(minted) == 2 and retries == []
    assert (got[0].offset, got[0].data) == (1, {"n": 1})


async def test_a_changed_epoch_calls_on_reset(push_server: Server, event_loop_kind: str) -> None:
    """A client resuming with a cursor of an epoch the server does not have is told to reset:
    on_reset runs once, the client takes the server's epoch and receives what is held."""
    got: list[PushEvent] = []
    resets: list[int] = []
    uid = f"reset-{event_loop_kind}"
    await apush(push_server, uid, "credited", {"n": 1})
    client = _client(push_server, uid, got, on_reset=lambda: resets.append(1), offset=7, epoch="a-lost-epoch")
    async with client:
        await until(lambda: len(got) == 1)
    assert resets == [1] and client.stats.resets == 1
    assert client.epoch not in (None, "a-lost-epoch") and got[0].epoch == client.epoch
    assert (got[0].offset, got[0].data) == (1, {"n": 1})


async def test_backoff_grows_with_full_jitter_within_bounds(push_server: Server, event_loop_kind: str) -> None:
    """Retries against a server that refuses the token wait uniform(0, min(cap, base * 2**n)): each delay
    is within its bound, they are the seeded sequence, and the client gives up after max_auth_failures."""
    delays: list[tuple[int, float]] = []
    client = PushClient(
        ws_url(push_server),
        lambda: "not-a-jwt",
        on_event=lambda _e: None,
        on_retry=lambda n, d, _r: delays.append((n, d)),
        backoff_base_s=0.01,
        backoff_cap_s=0.08,
        max_auth_failures=7,
        rng=random.Random(7),
    )
    with pytest.raises(AuthenticationFailed):
        await client.run()
    expected = random.Random(7)
    assert [n for n, _ in delays] == list(range(6))
    assert [d for _, d in delays] == [backoff_delay(n, 0.01, 0.08, expected) for n in range(6)]
    assert all(0 <= d <= min(0.08, 0.01 * 2**n) for n, d in delays)


def test_backoff_delay_is_full_jitter() -> None:
    """backoff_delay over 4000 draws a retry: the mean is half of min(cap, base * 2**n), the spread
    covers [0, ceiling], never past it (AWS, "Exponential Backoff And Jitter")."""
    rng = random.Random(1)
    for attempt in range(8):
        ceiling = min(10.0, 0.5 * 2**attempt)
        draws = [backoff_delay(attempt, 0.5, 10.0, rng) for _ in range(4000)]
        assert max(draws) <= ceiling and min(draws) >= 0
        assert abs(sum(draws) / len(draws) - ceiling / 2) < ceiling * 0.03
        assert min(draws) < ceiling * 0.01 and max(draws) > ceiling * 0.99


async def test_401_stops_after_a_few_attempts(push_server: Server, event_loop_kind: str) -> None:
    """An expired token is refused (401) at each handshake: the client asks its provider for a fresh
    token each time, gives up after three, and raises AuthenticationFailed saying why (the server's
    reason) and what to do (mint a fresh token with the server's key)."""
    asked: list[int] = []

    def expired() -> str:
        asked.append(1)
        return push_server.token(f"expired-{event_loop_kind}", ttl_s=-60)

    client = PushClient(ws_url(push_server), expired, on_event=lambda _e: None, backoff_base_s=0.05, backoff_cap_s=0.4)
    started = asyncio.get_running_loop().time()
    with pytest.raises(AuthenticationFailed) as failed:
        await client.run()
    assert str(failed.value) == (
        "3 handshakes answered 401 (invalid token: Signature has expired): the server refuses the token; "
        "mint a fresh one, signed with the server's key (hongbao token --user ID, with the server's --data-dir)"
    )
    assert len(asked) == 3 and client.stats.connects == 0
    assert asyncio.get_running_loop().time() - started < 5


async def test_wait_connected_raises_only_the_final_error(push_server: Server, event_loop_kind: str) -> None:
    """wait_connected on a client whose token is refused, its run() started directly (no async with):
    the 401s in between are retried quietly, then wait_connected raises the client's own
    AuthenticationFailed, long before its deadline."""
    retries: list[object] = []
    client = PushClient(
        ws_url(push_server),
        lambda: "not-a-jwt",
        on_event=lambda _e: None,
        on_retry=lambda *a: retries.append(a),
        backoff_base_s=0.05,
        backoff_cap_s=0.4,
        max_auth_failures=4,
    )
    run = asyncio.create_task(client.run())
    with pytest.raises(AuthenticationFailed):
        await client.wait_connected(10)
    assert len(retries) == 3 and run.done()
    with pytest.raises(AuthenticationFailed):
        await run


async def test_a_newer_connection_replaces_the_older(push_server: Server, event_loop_kind: str) -> None:
    """A second client of the same user takes over: the first is closed 4001 and stops with Replaced
    (it does not fight back); pushes reach the second."""
    uid = f"twice-{event_loop_kind}"
    first_got: list[PushEvent] = []
    second_got: list[PushEvent] = []
    first = _client(push_server, uid, first_got)
    first_run = asyncio.create_task(first.run())
    await first.wait_connected()
    async with _client(push_server, uid, second_got) as second:
        await second.wait_connected()
        with pytest.raises(Replaced):
            await asyncio.wait_for(first_run, 5)
        await apush(push_server, uid, "credited", {"n": 1})
        await until(lambda: len(second_got) == 1)
    assert first.stats.connects == 1 and first_got == [] and second.stats.connects == 1


async def test_debug_log_never_shows_the_token(
    push_server: Server, event_loop_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With the websockets library's handshake logged at DEBUG, the subprotocol header line shows
    ``bearer, <redacted>`` and the token appears in no client log record."""
    uid = f"quiet-{event_loop_kind}"
    token = push_server.token(uid)
    caplog.set_level(logging.DEBUG, logger="hongbao.push_client")
    client = PushClient(ws_url(push_server), lambda: token, on_event=lambda _e: None)
    async with client:
        await client.wait_connected()
    assert "> Sec-WebSocket-Protocol: bearer, <redacted>" in caplog.text
    assert token not in caplog.text and token.split(".")[2] not in caplog.text
