"""A long broadcast fan-out gives way to the publishes of its own worker (server/push_fanout.py
``_give_way``): a broadcast published while thousands of subscribers are written to is stored and
answered before the fan-out writes another chunk, so broadcasts published one after another
during a pass all go out joined in the next write; a publish stuck behind the store pauses the
fan-out once, for at most ``GIVE_WAY_S``. In process over the real embedded push stores, with
subscribers whose writes cost CPU time as the kernel's do (docs/architecture.md section 7)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hongbao.core.push_ports import Stored
from hongbao.server.push_fanout import BROADCAST_CHUNK, GIVE_WAY_S, Fanout
from hongbao.server.push_hub import PushHub

from tests.push.test_broadcast_fanout import Socket, hub, publish_and_send, subscribed

__all__ = ["hub"]  # the fixture, used by name
WRITE_S = 0.0002  # CPU time one subscriber's write costs here (a loaded machine's loopback write, exaggerated)


class SlowSocket(Socket):
    """A subscriber whose every write costs ``cost_s`` of the event loop's CPU, then calls ``on_write``."""

    def __init__(self, uid: str, cost_s: float, on_write: Callable[[], None]) -> None:
        super().__init__(uid)
        self.cost_s, self.on_write = cost_s, on_write

    def send_frame(self, frame: bytes) -> bool:
        """Spend ``cost_s`` (a busy loop, as the kernel's share of a send), then keep the write."""
        end = time.perf_counter() + self.cost_s
        while time.perf_counter() < end:
            pass
        kept = super().send_frame(frame)
        self.on_write()
        return kept


class Subscribers:
    """``count`` slow subscribers of topic T on ``hub`` (the hub writes to them in its own order)
    and the writes made to them so far; ``reached`` is set at write number ``signal_at``."""

    def __init__(self, hub: PushHub, count: int, cost_s: float, signal_at: int) -> None:
        self.conns = [SlowSocket(f"s{i}", cost_s, self._wrote) for i in range(count)]
        for conn in self.conns:
            hub.on_message(conn, {"type": "subscribe", "topic": "T"})
        self.writes, self.signal_at = 0, signal_at
        self.reached = asyncio.Event()

    def _wrote(self) -> None:
        self.writes += 1
        if self.writes == self.signal_at:
            self.reached.set()


async def test_a_publish_during_a_long_fanout_is_answered_before_the_next_chunk(hub: PushHub) -> None:
    """A broadcast published at a turn of a 4-chunk fan-out is answered before another chunk is
    written, in well under a chunk's time."""
    subs = Subscribers(hub, 4 * BROADCAST_CHUNK, WRITE_S, BROADCAST_CHUNK + 10)  # signalled in the second chunk
    answered: list[tuple[int, int, float, Stored]] = []

    async def publish_meanwhile() -> None:
        await subs.reached.wait()
        began, started = subs.writes, time.perf_counter()
        stored = await hub.broadcast("T", "news", "late")
        answered.append((began, subs.writes, time.perf_counter() - started, stored))

    started = time.perf_counter()
    await publish_and_send(hub, [("T", "first")], publish_meanwhile())
    fanout_s = time.perf_counter() - started
    [(began, writes_then, took_s, stored)] = answered
    assert began == writes_then == 2 * BROADCAST_CHUNK  # (it was answered two chunks later)
    assert stored.offset == 2
    assert took_s < fanout_s / 8, (took_s, fanout_s)  # a chunk takes about fanout_s / 4
    assert all(conn.topics() == [[("T", 1)]] for conn in subs.conns)


async def test_publishes_one_after_another_during_a_pass_go_out_in_one_write(hub: PushHub) -> None:
    """Eight broadcasts published in sequence during a 12-chunk pass reach each subscriber in the
    next pass's one write, in order."""
    subs = Subscribers(hub, 12 * BROADCAST_CHUNK, WRITE_S / 2, 1)
    await hub.fanout.start()
    job = asyncio.ensure_future(hub.fanout.broadcasts_forever())
    try:
        await hub.broadcast("T", "news", 0)
        await asyncio.wait_for(subs.reached.wait(), 10)
        for data in range(1, 9):  # each one once the one before is answered, as the benchmark's admin does
            await hub.broadcast("T", "news", data)
        deadline = time.monotonic() + 20
        while subs.writes < 2 * len(subs.conns) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    finally:
        job.cancel()
        await asyncio.gather(job, return_exceptions=True)
    assert all(conn.topics() == [[("T", 1)], [("T", offset) for offset in range(2, 10)]] for conn in subs.conns)
    assert [m["data"] for m in subs.conns[0].writes[1]] == list(range(1, 9))


async def test_a_stuck_publish_pauses_the_fanout_once_for_at_most_give_way(
    hub: PushHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publish stuck behind another connection's write lock on push.db pauses a 12-chunk fan-out
    once (of its 11 turns, one waits), for GIVE_WAY_S, and is stored after the lock goes."""
    conns = [subscribed(hub, f"u{i}", "T") for i in range(12 * BROADCAST_CHUNK)]
    waits: list[float] = []  # the turns that had publishes to wait for: how long each waited (s)
    give_way = Fanout._give_way

    async def timed(fanout: Fanout) -> None:
        if not fanout._publishing:
            return await give_way(fanout)
        started = time.perf_counter()
        await give_way(fanout)
        waits.append(time.perf_counter() - started)

    monkeypatch.setattr(Fanout, "_give_way", timed)
    await hub.fanout.start()
    cursor, _ = await hub.stores.topics.read(None, 0)
    await hub.broadcast("T", "news", "first")
    _, items = await hub.stores.topics.read(cursor, 0)
    locker = sqlite3.connect(tmp_path / "push.db", isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    try:
        stuck = asyncio.ensure_future(hub.broadcast("T", "news", "stuck"))
        await hub.fanout.send_broadcasts(items)
        assert not stuck.done()
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    # one wait, cut at GIVE_WAY_S (the event loop of a loaded 2-core machine may resume it late)
    assert len(waits) == 1 and 0.9 * GIVE_WAY_S <= waits[0] < 10 * GIVE_WAY_S, waits
    assert (await stuck).offset == 2
    assert all(conn.topics() == [[("T", 1)]] for conn in conns)
