"""The Redis MessageLog (per-user offline queue: offsets, epochs, bounds, replay) and TopicLog
(one stream read with XREAD BLOCK from a cursor) against a real standalone Redis and cluster."""

from __future__ import annotations

import asyncio
import time

import orjson

from hongbao.core.adapters.redis_push_logs import (
    USER_PEEK, USER_PUT, BodyMaker, RedisMessageLog, RedisTopicLog, mlog_key, mstream_key,
)
from tests.integration.conftest import RedisTarget

T0 = 1_700_000_000_000


def body(event: str) -> BodyMaker:
    """A body maker that encodes the offset and epoch it is given, as the hub does."""
    return lambda offset, epoch: orjson.dumps({"type": "event", "offset": offset, "epoch": epoch, "event": event})


def decoded(raw: bytes) -> dict[str, object]:
    """The JSON of a stored body."""
    value = orjson.loads(raw)
    assert isinstance(value, dict)
    return value


async def test_offsets_count_per_user_and_bodies_carry_them(redis_target: RedisTarget) -> None:
    """Offsets go 1, 2, 3 per user in one epoch, and each body carries its own offset and epoch."""
    async with redis_target.connect() as client:
        logs = RedisMessageLog(client, max_len=100, max_age_s=3600)
        first = [await logs.append("u1", body(f"e{i}"), T0) for i in range(3)]
        other = await logs.append("u2", body("x"), T0)
        assert [m.offset for m in first] == [1, 2, 3] and other.offset == 1
        assert len({m.epoch for m in first}) == 1 and other.epoch != first[0].epoch
        assert decoded(first[2].body) == {"type": "event", "offset": 3, "epoch": first[0].epoch, "event": "e2"}
        assert 3590 <= await client.ttl(mstream_key("u1")) <= 3600


async def test_replay_after_an_offset_in_order(redis_target: RedisTarget) -> None:
    """Replay gives what follows the client's offset, in order; acked messages are dropped."""
    async with redis_target.connect() as client:
        logs = RedisMessageLog(client, max_len=100, max_age_s=3600)
        epoch = (await logs.append("u1", body("e1"), T0)).epoch
        for i in range(2, 6):
            await logs.append("u1", body(f"e{i}"), T0)
        replay = await logs.replay("u1", 2, epoch, T0)
        assert (replay.epoch, replay.complete) == (epoch, True)
        assert [(m.offset, decoded(m.body)["event"]) for m in replay.messages] == [(3, "e3"), (4, "e4"), (5, "e5")]
        everything = await logs.replay("u1", None, None, T0)
        assert [m.offset for m in everything.messages] == [1, 2, 3, 4, 5] and everything.complete
        await logs.ack("u1", 3)
        assert [m.offset for m in (await logs.replay("u1", 3, epoch, T0)).messages] == [4, 5]
        assert await client.xlen(mstream_key("u1")) == 2


async def test_length_bound_reports_the_gap(redis_target: RedisTarget) -> None:
    """Past max_len the oldest go; a replay whose gap lost a message says it is not complete."""
    async with redis_target.connect() as client:
        logs = RedisMessageLog(client, max_len=3, max_age_s=3600)
        epoch = ""
        for i in range(1, 6):
            epoch = (await logs.append("u1", body(f"e{i}"), T0)).epoch
        lossy = await logs.replay("u1", 1, epoch, T0)
        assert [m.offset for m in lossy.messages] == [3, 4, 5] and lossy.complete is False
        whole = await logs.replay("u1", 2, epoch, T0)
        assert [m.offset for m in whole.messages] == [3, 4, 5] and whole.complete is True
        assert (await logs.replay("u1", None, None, T0)).complete is False


async def test_age_bound_drops_old_messages(redis_target: RedisTarget) -> None:
    """Messages older than max_age_s are dropped at the next append or replay, and reported."""
    async with redis_target.connect() as client:
        logs = RedisMessageLog(client, max_len=100, max_age_s=10)
        epoch = (await logs.append("u1", body("old"), T0)).epoch
        await logs.append("u1", body("young"), T0 + 5_000)
        replay = await logs.replay("u1", 0, epoch, T0 + 10_500)
        assert [decoded(m.body)["event"] for m in replay.messages] == ["young"] and replay.complete is False
        assert (await logs.replay("u1", 1, epoch, T0 + 10_500)).complete is True


async def test_lost_history_starts_a_new_epoch(redis_target: RedisTarget) -> None:
    """After a flush the epoch changes, offsets restart at 1, and an old client's replay is incomplete."""
    async with redis_target.connect() as client:
        logs = RedisMessageLog(client, max_len=100, max_age_s=3600)
        old = (await logs.append("u1", body("a"), T0)).epoch
        await logs.append("u1", body("b"), T0)
        redis_target.flush()
        replay = await logs.replay("u1", 2, old, T0)
        assert replay.epoch != old and replay.complete is False and replay.messages == []
        fresh = await logs.append("u1", body("c"), T0)
        assert (fresh.offset, fresh.epoch) == (1, replay.epoch)
        mixed = await logs.replay("u1", 2, old, T0)
        assert [m.offset for m in mixed.messages] == [1] and mixed.complete is False


async def test_unreadable_counter_starts_a_new_epoch(redis_target: RedisTarget) -> None:
    """A seq that does not parse is never reused: a new epoch begins and the stale entries go."""
    async with redis_target.connect() as client:
        logs = RedisMessageLog(client, max_len=100, max_age_s=3600)
        old = (await logs.append("u1", body("a"), T0)).epoch
        await client.hset(mlog_key("u1"), "seq", "garbage")
        fresh = await logs.append("u1", body("b"), T0)
        assert fresh.offset == 1 and fresh.epoch != old
        assert [m.offset for m in (await logs.replay("u1", None, None, T0)).messages] == [1]


async def test_concurrent_appends_stay_in_offset_order(redis_target: RedisTarget) -> None:
    """Appends racing from two clients get distinct offsets 1..60, stored in order, bodies matching."""
    async with redis_target.connect() as one, redis_target.connect() as two:
        logs = [RedisMessageLog(one, 100, 3600), RedisMessageLog(two, 100, 3600)]
        stored = await asyncio.gather(*(logs[i % 2].append("u1", body(f"e{i}"), T0) for i in range(60)))
        assert sorted(m.offset for m in stored) == list(range(1, 61))
        held = (await logs[0].replay("u1", None, None, T0)).messages
        assert [m.offset for m in held] == list(range(1, 61))
        assert all(decoded(m.body)["offset"] == m.offset for m in held)


async def test_retried_append_writes_once(redis_target: RedisTarget) -> None:
    """The same write sent twice (a retry after a lost reply) stores one message."""
    async with redis_target.connect() as client:
        keys = [mlog_key("u1"), mstream_key("u1")]
        offset, epoch, _ = await USER_PEEK(client, keys, ["e0"])
        args = [int(offset), epoch.decode(), "nonce1", b"m", T0, 100, 0, 60_000, "e1"]
        assert (await USER_PUT(client, keys, args))[0] == 1
        assert (await USER_PUT(client, keys, args))[0] == 1
        assert await client.xlen(mstream_key("u1")) == 1
        assert (await USER_PUT(client, keys, [*args[:2], "nonce2", *args[3:]]))[:2] == [0, 2]


async def test_topic_log_reads_from_a_cursor(redis_target: RedisTarget) -> None:
    """Per-topic offsets; a reader from "now" sees later publications once, in order."""
    async with redis_target.connect() as client:
        topics = RedisTopicLog(client, max_len=1000)
        await topics.publish("news", body("before"))
        cursor, nothing = await topics.read(None, 0.05)
        assert nothing == []
        for topic, event in [("news", "n2"), ("sports", "s1"), ("news", "n3")]:
            await topics.publish(topic, body(event))
        cursor, got = await topics.read(cursor, 1.0)
        assert [(t, m.offset, decoded(m.body)["event"]) for t, m in got] == [("news", 2, "n2"), ("sports", 1, "s1"), ("news", 3, "n3")]
        assert all(decoded(m.body)["epoch"] == m.epoch for _, m in got)
        assert (await topics.read(cursor, 0.05))[1] == []


async def test_topic_read_wakes_on_publish(redis_target: RedisTarget) -> None:
    """A blocked read returns as soon as a message is published, well before its timeout."""
    async with redis_target.connect() as client, redis_target.connect() as writer:
        topics = RedisTopicLog(client, max_len=1000)
        cursor, _ = await topics.read(None, 0.01)
        started = time.monotonic()
        reader = asyncio.ensure_future(topics.read(cursor, 2.0))
        await asyncio.sleep(0.1)
        await RedisTopicLog(writer, max_len=1000).publish("news", body("late"))
        _, got = await reader
        assert [decoded(m.body)["event"] for _, m in got] == ["late"]
        assert time.monotonic() - started < 1.5
