"""The embedded push adapters (hongbao.core.adapters.sqlite.push) against a real push file
(``push.db``), opened twice as two workers of one host would."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import orjson
import pytest
from hongbao.core.adapters.sqlite.db import SqliteDb
from hongbao.core.adapters.sqlite.push import SqliteMessageLog, SqliteNodeDirectory, SqliteSessionStore, SqliteTopicLog
from hongbao.core.adapters.sqlite.push_db import open_push_db
from hongbao.core.push_ports import Gaps, Route, SharedBody, Stored
from hongbao.server.push_appender import Appender
from hongbao.server.push_messages import EventBody

T0 = 1_800_000_000_000


@pytest.fixture
def dbs(tmp_path: Path) -> Iterator[tuple[SqliteDb, SqliteDb]]:
    """Two connections to one push file: two workers."""
    a, b = open_push_db(tmp_path), open_push_db(tmp_path)
    yield a, b
    a.close()
    b.close()


def body(text: str) -> SharedBody:
    """A BodyMaker writing ``text`` with its offset and epoch."""
    return EventBody("note", text)


def texts(messages: list[Stored]) -> list[str]:
    """The texts of ``messages``, in order."""
    return [orjson.loads(m.body)["data"] for m in messages]


async def test_login_replaces_and_logout_compares(dbs: tuple[SqliteDb, SqliteDb]) -> None:
    """A newer login returns the replaced route; the old session's logout leaves the new one."""
    a, b = dbs
    nodes, sessions_a, sessions_b = SqliteNodeDirectory(a), SqliteSessionStore(a), SqliteSessionStore(b)
    await nodes.heartbeat("h/1", "127.0.0.1:1", 5)
    await nodes.heartbeat("h/2", "127.0.0.1:2", 5)
    assert await sessions_a.login("u1", "s1", "h/1", T0) is None
    assert await sessions_b.login("u1", "s2", "h/2", T0) == Route("h/1", "s1")
    assert await sessions_a.logout("u1", "s1", "h/1") is False
    assert await sessions_a.lookup("u1") == Route("h/2", "s2")
    assert await sessions_a.online_count() == 1
    assert await sessions_b.logout("u1", "s2", "h/2") is True
    assert await sessions_a.lookup("u1") is None


async def test_dead_node_reads_offline_and_is_swept(dbs: tuple[SqliteDb, SqliteDb]) -> None:
    """A node whose liveness lapsed: its users read offline at once (one by one or together), and a
    sweep removes them."""
    a, b = dbs
    nodes, sessions = SqliteNodeDirectory(a), SqliteSessionStore(b)
    await nodes.heartbeat("h/dead", "127.0.0.1:9", 0.2)
    await nodes.heartbeat("h/live", "127.0.0.1:8", 5)
    await sessions.login("u1", "s1", "h/dead", int(time.time() * 1000))
    await sessions.login("u2", "s2", "h/live", int(time.time() * 1000))
    assert await nodes.address("h/dead") == "127.0.0.1:9"
    await asyncio.sleep(0.3)
    assert await nodes.address("h/dead") is None
    assert await sessions.lookup("u1") is None
    assert await sessions.lookup_many(["u1", "u2", "nobody", "u2"]) == {"u2": Route("h/live", "s2")}
    assert await sessions.online_count() == 1
    assert await SqliteNodeDirectory(b).sweep("h/live") == 1
    assert await nodes.sweep("h/live") == 0
    assert await sessions.lookup("u2") == Route("h/live", "s2")


async def test_leave_and_idle_sessions(dbs: tuple[SqliteDb, SqliteDb]) -> None:
    """A node that leaves is swept at once; a session past its TTL is swept unless touched."""
    a, _ = dbs
    nodes, sessions = SqliteNodeDirectory(a, session_ttl_s=0.3), SqliteSessionStore(a, ttl_s=0.3)
    await nodes.heartbeat("h/1", "127.0.0.1:1", 5)
    await nodes.heartbeat("h/2", "127.0.0.1:2", 5)
    now = int(time.time() * 1000)
    await sessions.login("u1", "s1", "h/1", now)
    await sessions.login("u2", "s2", "h/1", now)
    await sessions.login("u3", "s3", "h/2", now)
    await nodes.leave("h/2")
    assert await nodes.sweep("h/1") == 1
    await asyncio.sleep(0.2)
    await sessions.touch([("u1", "s1"), ("u2", "stale")], int(time.time() * 1000))
    await asyncio.sleep(0.2)
    assert await sessions.lookup("u2") is None
    assert await nodes.sweep("h/1") == 1
    assert await sessions.lookup("u1") == Route("h/1", "s1")


async def test_touch_names_a_lost_session_and_restore_writes_it(dbs: tuple[SqliteDb, SqliteDb]) -> None:
    """Touch names the pairs whose user has no session row and writes none; restore inserts them
    unless a newer session holds the user."""
    a, _ = dbs
    sessions = SqliteSessionStore(a)
    await SqliteNodeDirectory(a).heartbeat("h/1", "127.0.0.1:1", 5)
    now = int(time.time() * 1000)
    await sessions.login("u1", "s1", "h/1", now)
    await sessions.login("u2", "s2", "h/1", now)
    assert await sessions.touch([("u1", "s1"), ("u2", "older")], now + 1) == []
    assert await sessions.logout("u1", "s1", "h/1") is True
    assert await sessions.touch([("u1", "s1"), ("u2", "s2")], now + 2) == [("u1", "s1")]
    assert await sessions.lookup("u1") is None
    await sessions.restore([("u1", "s1", now), ("u2", "older", now - 1)], "h/1", now + 3)
    assert (await sessions.lookup("u1"), await sessions.lookup("u2")) == (Route("h/1", "s1"), Route("h/1", "s2"))
    await sessions.restore([("u2", "s3", now + 4)], "h/1", now + 5)  # the row it finds logged in before it
    assert await sessions.lookup("u2") == Route("h/1", "s3")


async def test_append_offsets_epoch_and_replay(dbs: tuple[SqliteDb, SqliteDb]) -> None:
    """Offsets count 1, 2, ... per user under one epoch, across workers; replay after an offset is complete."""
    a, b = dbs
    log_a, log_b = SqliteMessageLog(a, 100, 60), SqliteMessageLog(b, 100, 60)
    first = await log_a.append([("u1", body("m1")), ("u2", body("x1")), ("u1", body("m2"))], T0)
    second = await log_b.append([("u1", body("m3"))], T0)
    e1, e2 = first[0].epoch, first[1].epoch
    assert [(m.offset, m.epoch) for m in first + second] == [(1, e1), (1, e2), (2, e1), (3, e1)]
    assert orjson.loads(second[0].body) == {
        "type": "event",
        "event": "note",
        "data": "m3",
        "offset": 3,
        "epoch": first[0].epoch,
    }
    replay = await log_b.replay("u1", 1, first[0].epoch, T0)
    assert (replay.epoch, texts(replay.messages), replay.complete, replay.last) == (
        first[0].epoch,
        ["m2", "m3"],
        True,
        3,
    )
    assert (await log_a.replay("u1", 3, first[0].epoch, T0)).messages == []


async def test_ack_trims_and_no_cursor_replays_what_is_held(dbs: tuple[SqliteDb, SqliteDb]) -> None:
    """Acked messages are dropped; a replay with no offset gets everything after the acked offset."""
    a, _ = dbs
    log = SqliteMessageLog(a, 100, 60)
    [first, *_] = await log.append([("u1", body(f"m{i}")) for i in range(1, 5)], T0)
    await log.ack([("u1", 2, first.epoch), ("nobody", 7, first.epoch)])
    replay = await log.replay("u1", None, None, T0)
    assert (texts(replay.messages), replay.complete) == (["m3", "m4"], True)
    await log.ack([("u1", 4, "another-epoch")])  # an ack of an older epoch trims nothing
    assert texts((await log.replay("u1", None, None, T0)).messages) == ["m3", "m4"]
    await log.ack([("u1", 99, first.epoch)])
    replay = await log.replay("u1", None, None, T0)
    assert (replay.messages, replay.complete, replay.last) == ([], True, 4)
    assert (await log.replay("u1", 4, replay.epoch, T0)).complete is True


async def test_length_bound_reports_the_gap(dbs: tuple[SqliteDb, SqliteDb]) -> None:
    """Past ``max_messages`` the oldest go; a replay that needs them is marked incomplete."""
    a, _ = dbs
    log = SqliteMessageLog(a, 3, 60)
    stored = await log.append([("u1", body(f"m{i}")) for i in range(1, 6)], T0)
    gap = await log.replay("u1", 0, stored[0].epoch, T0)
    assert (texts(gap.messages), gap.complete) == (["m3", "m4", "m5"], False)
    whole = await log.replay("u1", 2, stored[0].epoch, T0)
    assert (texts(whole.messages), whole.complete) == (["m3", "m4", "m5"], True)


async def test_age_bound_and_epoch_mismatch(dbs: tuple[SqliteDb, SqliteDb]) -> None:
    """Messages older than ``max_age_s`` are not replayed; a foreign epoch or offset is reported."""
    a, _ = dbs
    log = SqliteMessageLog(a, 100, 10)
    stored = await log.append([("u1", body("old"))], T0)
    await log.append([("u1", body("new"))], T0 + 5_000)
    aged = await log.replay("u1", 0, stored[0].epoch, T0 + 12_000)
    assert (texts(aged.messages), aged.complete) == (["new"], False)
    foreign = await log.replay("u1", 1, "other", T0 + 12_000)
    assert (foreign.epoch, texts(foreign.messages), foreign.complete) == (stored[0].epoch, ["new"], False)
    ahead = await log.replay("u1", 9, stored[0].epoch, T0 + 12_000)
    assert (texts(ahead.messages), ahead.complete) == (["new"], False)
    await log.append([("u1", body("later"))], T0 + 40_000)
    assert texts((await log.replay("u1", None, None, T0 + 40_000)).messages) == ["later"]


async def test_new_stream_gets_an_epoch(dbs: tuple[SqliteDb, SqliteDb]) -> None:
    """A user never pushed to gets a stream with a fresh epoch; a stale cursor on it is incomplete."""
    a, b = dbs
    fresh = await SqliteMessageLog(a, 10, 60).replay("u9", None, None, T0)
    assert (fresh.messages, fresh.complete, len(fresh.epoch), fresh.last) == ([], True, 8, 0)
    again = await SqliteMessageLog(b, 10, 60).replay("u9", 3, fresh.epoch, T0)
    assert (again.epoch, again.complete) == (fresh.epoch, False)
    assert (await SqliteMessageLog(b, 10, 60).replay("u8", 0, None, T0)).complete is True


async def test_topic_log_read_once_per_reader(dbs: tuple[SqliteDb, SqliteDb]) -> None:
    """Broadcasts get per-topic offsets; each reader sees each once, in order, from its cursor."""
    a, b = dbs
    topics_a, topics_b = SqliteTopicLog(a), SqliteTopicLog(b)
    cursor_b, nothing = await topics_b.read(None, 0)
    assert nothing == []
    started = time.monotonic()
    assert (await topics_b.read(cursor_b, 0.1))[1] == []
    assert 0.09 < time.monotonic() - started < 1.0
    reading = asyncio.ensure_future(topics_b.read(cursor_b, 5))
    await asyncio.sleep(0.05)
    s1 = await topics_a.publish("news", lambda o, e: b"n%d" % o)
    await topics_a.publish("sport", lambda o, e: b"s%d" % o)
    cursor_b, got = await reading
    assert got[0] == ("news", s1) and s1.offset == 1
    cursor_b, rest = await topics_b.read(cursor_b, 0.2)
    everything = got + rest
    assert [(t, m.offset, m.body) for t, m in everything] == [("news", 1, b"n1"), ("sport", 1, b"s1")]
    await topics_b.publish("news", lambda o, e: b"n%d" % o)
    assert [(t, m.offset, m.epoch) for t, m in (await topics_a.read(cursor_b, 1))[1]] == [("news", 2, s1.epoch)]


class CountingLog(SqliteMessageLog):
    """The real log, recording how many entries each append call carried."""

    def __init__(self, db: SqliteDb) -> None:
        super().__init__(db, 100, 60)
        self.calls: list[int] = []

    async def append(self, entries: Sequence[tuple[str, SharedBody]], now_ms: int) -> list[Stored]:
        self.calls.append(len(entries))
        return await super().append(entries, now_ms)


async def test_appends_during_a_write_share_the_next_one(dbs: tuple[SqliteDb, SqliteDb]) -> None:
    """Group commit: appends made while one is being written go in one next write, in order."""
    a, _ = dbs
    log = CountingLog(a)
    appender = Appender(log)
    release = threading.Event()
    held = asyncio.ensure_future(a.run(lambda: release.wait(10)))
    first = asyncio.ensure_future(appender.append("u1", body("m0")))
    await asyncio.sleep(0.01)

    async def later(i: int) -> Stored:
        await asyncio.sleep(0.001 * i)  # each in a loop turn of its own
        return await appender.append("u1" if i % 2 else "u2", body(f"m{i}"))

    rest = asyncio.gather(*(later(i) for i in range(1, 41)))
    await asyncio.sleep(0.1)
    release.set()
    await held
    stored = [await first, *await rest]
    assert log.calls == [1, 40]
    assert [m.offset for m in stored[1::2]] == list(range(2, 22)) and [m.offset for m in stored[2::2]] == list(
        range(1, 21)
    )
    assert texts((await log.replay("u1", None, None, int(time.time() * 1000))).messages) == [
        f"m{i}" for i in (0, *range(1, 41, 2))
    ]


async def test_posted_appends_share_a_write_and_reach_the_sender_in_one_call(dbs: tuple[SqliteDb, SqliteDb]) -> None:
    """Appender.post: no future per message; a write's posted messages go to on_logged in one call, in
    order, with the time of each post."""
    a, _ = dbs
    log = CountingLog(a)
    handed: list[list[tuple[str, Stored]]] = []
    posted: list[list[float]] = []

    def logged(items: list[tuple[str, Stored]], at: list[float]) -> None:
        handed.append(items)
        posted.append(at)

    appender = Appender(log, logged)
    for i in range(30):
        appender.post("u1" if i % 3 else "u2", body(f"p{i}"))
    mixed = await appender.append("u2", body("awaited"))
    await appender.drained()
    assert log.calls == [31] and mixed.offset == 11
    assert [(uid, m.offset) for uid, m in handed[0]] == [
        ("u2" if i % 3 == 0 else "u1", i // 3 + 1 if i % 3 == 0 else i - i // 3) for i in range(30)
    ] and len(handed) == 1
    assert len(posted[0]) == 30 and posted[0] == sorted(posted[0])  # each post's time, in post order
    assert texts((await log.replay("u1", None, None, int(time.time() * 1000))).messages) == [
        f"p{i}" for i in range(30) if i % 3
    ]


async def test_a_failed_write_reports_its_posted_appends_once(dbs: tuple[SqliteDb, SqliteDb]) -> None:
    """Appender.post: a write that fails calls on_failed once with the users of the posted messages lost."""
    a, _ = dbs
    failed: list[tuple[list[str], str]] = []
    appender = Appender(
        SqliteMessageLog(a, 100, 60),
        lambda items, at: None,
        lambda uids, exc: failed.append((uids, type(exc).__name__)),
    )
    a.conn.execute("DROP TABLE t_push_stream")
    for i in range(5):
        appender.post(f"u{i % 2}", body(f"p{i}"))
    await appender.drained()
    assert failed == [(["u0", "u1", "u0", "u1", "u0"], "OperationalError")]


async def test_lost_streams_are_renewed_and_named_to_every_worker(dbs: tuple[SqliteDb, SqliteDb]) -> None:
    """lost(uids) on one worker: those streams start new epochs (their replay from the old epoch
    incomplete), the others keep theirs, and the other worker's next sync names them (its first
    sync names none: it takes the cursor); lost() renews every stream and is reported as such."""
    a, b = dbs
    log_a, log_b = SqliteMessageLog(a, 100, 60), SqliteMessageLog(b, 100, 60)
    first = await log_a.append([("u1", body("m1")), ("u2", body("x1")), ("u3", body("y1"))], T0)
    assert await log_b.sync() == Gaps(False)
    await log_a.lost(["u1", "u3", "u1"])
    assert await log_b.sync() == Gaps(False, ("u1", "u3")) and await log_b.sync() == Gaps(False)
    for uid, message, renewed in zip(("u1", "u2", "u3"), first, (True, False, True), strict=True):
        replay = await log_b.replay(uid, 1, message.epoch, T0)
        assert (replay.epoch != message.epoch, replay.complete) == (renewed, not renewed), uid
    assert (await log_a.append([("u2", body("x2"))], T0))[0].offset == 2
    await log_a.lost()
    assert await log_b.sync() == Gaps(True)
