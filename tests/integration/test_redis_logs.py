"""The Redis MessageLog (per-user offline queue: offsets, epochs, bounds, replay) and TopicLog
(one stream read with XREAD BLOCK from a cursor) against a real standalone Redis and cluster."""

from __future__ import annotations

import asyncio
import time

import orjson
from hongbao.bench.services.redis_servers import RedisTarget
from hongbao.core.adapters.redis.client import Pipelines
from hongbao.core.adapters.redis.lean import key_slot
from hongbao.core.adapters.redis.push_logs import (
    USERS_PER_SCRIPT,
    RedisMessageLog,
    RedisTopicLog,
    mlog_key,
    mstream_key,
)
from hongbao.core.adapters.redis.push_lua import USER_APPEND
from hongbao.core.push_ports import Gaps, Stored
from hongbao.server.push_messages import EventBody

T0 = 1_700_000_000_000


def body(event: str) -> EventBody:
    """The hub's body maker for ``event`` (no data): its head, then the offset and epoch it is given."""
    return EventBody(event, None)


async def one(logs: RedisMessageLog, uid: str, event: str, now_ms: int = T0) -> Stored:
    """Append one message to ``uid``'s stream."""
    [stored] = await logs.append([(uid, body(event))], now_ms)
    return stored


def decoded(raw: bytes) -> dict[str, object]:
    """The JSON of a stored body."""
    value = orjson.loads(raw)
    assert isinstance(value, dict)
    return value


def reset_stats(target: RedisTarget) -> None:
    """Reset the command stats of every primary of ``target``."""
    for port in target.ports:
        with target.sync_client(port) as node:
            node.config_resetstat()


def command_calls(target: RedisTarget) -> dict[str, int]:
    """Calls of each command (lower case) on every primary of ``target`` since their stats were reset."""
    calls: dict[str, int] = {}
    for port in target.ports:
        with target.sync_client(port) as node:
            for name, stats in node.info("commandstats").items():
                calls[name.removeprefix("cmdstat_")] = calls.get(name.removeprefix("cmdstat_"), 0) + stats["calls"]
    return calls


def scripts_run(target: RedisTarget) -> int:
    """EVAL and EVALSHA calls on every primary of ``target`` since their stats were reset."""
    calls = 0
    for port in target.ports:
        with target.sync_client(port) as node:
            stats: dict[str, dict[str, int]] = node.info("commandstats")
            calls += sum(stats.get(name, {}).get("calls", 0) for name in ("cmdstat_eval", "cmdstat_evalsha"))
    return calls


async def test_offsets_count_per_user_and_bodies_carry_them(redis_target: RedisTarget) -> None:
    """Offsets go 1, 2, 3 per user in one epoch, and each body carries its own offset and epoch."""
    async with redis_target.connect() as client:
        logs = RedisMessageLog(Pipelines(client), max_len=100, max_age_s=3600)
        first = [await one(logs, "u1", f"e{i}", T0) for i in range(3)]
        other = await one(logs, "u2", "x", T0)
        assert [m.offset for m in first] == [1, 2, 3] and other.offset == 1
        assert len({m.epoch for m in first}) == 1 and other.epoch != first[0].epoch
        assert decoded(first[2].body) == {
            "type": "event",
            "event": "e2",
            "data": None,
            "offset": 3,
            "epoch": first[0].epoch,
        }
        held = (await logs.replay("u1", None, None, T0)).messages
        assert [m.body for m in held] == [m.body for m in first]  # the bytes the script wrote
        assert 3590 <= await client.ttl(mstream_key("u1")) <= 3960  # max_age_s .. 1.1 x max_age_s


async def test_replay_after_an_offset_in_order(redis_target: RedisTarget) -> None:
    """Replay gives what follows the client's offset, in order; acked messages are dropped."""
    async with redis_target.connect() as client:
        logs = RedisMessageLog(Pipelines(client), max_len=100, max_age_s=3600)
        epoch = (await one(logs, "u1", "e1", T0)).epoch
        for i in range(2, 6):
            await one(logs, "u1", f"e{i}", T0)
        replay = await logs.replay("u1", 2, epoch, T0)
        assert (replay.epoch, replay.complete, replay.last) == (epoch, True, 5)
        assert [(m.offset, decoded(m.body)["event"]) for m in replay.messages] == [(3, "e3"), (4, "e4"), (5, "e5")]
        everything = await logs.replay("u1", None, None, T0)
        assert [m.offset for m in everything.messages] == [1, 2, 3, 4, 5] and everything.complete
        await logs.ack([("u1", 3, epoch)])
        assert [m.offset for m in (await logs.replay("u1", 3, epoch, T0)).messages] == [4, 5]
        assert [m.offset for m in (await logs.replay("u1", None, None, T0)).messages] == [4, 5]
        assert await client.xlen(mstream_key("u1")) == 2


async def test_length_bound_reports_the_gap(redis_target: RedisTarget) -> None:
    """Past max_len the oldest go; a replay whose gap lost a message says it is not complete."""
    async with redis_target.connect() as client:
        logs = RedisMessageLog(Pipelines(client), max_len=3, max_age_s=3600)
        epoch = ""
        for i in range(1, 6):
            epoch = (await one(logs, "u1", f"e{i}", T0)).epoch
        lossy = await logs.replay("u1", 1, epoch, T0)
        assert [m.offset for m in lossy.messages] == [3, 4, 5] and lossy.complete is False
        whole = await logs.replay("u1", 2, epoch, T0)
        assert [m.offset for m in whole.messages] == [3, 4, 5] and whole.complete is True
        assert (await logs.replay("u1", None, None, T0)).complete is False


async def test_age_bound_drops_old_messages(redis_target: RedisTarget) -> None:
    """Messages older than max_age_s are dropped at the next append or replay, and reported."""
    async with redis_target.connect() as client:
        logs = RedisMessageLog(Pipelines(client), max_len=100, max_age_s=10)
        epoch = (await one(logs, "u1", "old", T0)).epoch
        await one(logs, "u1", "young", T0 + 5_000)
        replay = await logs.replay("u1", 0, epoch, T0 + 10_500)
        assert [decoded(m.body)["event"] for m in replay.messages] == ["young"] and replay.complete is False
        assert (await logs.replay("u1", 1, epoch, T0 + 10_500)).complete is True


async def test_lost_history_starts_a_new_epoch(redis_target: RedisTarget) -> None:
    """After a flush the epoch changes, offsets restart at 1, and an old client's replay is incomplete."""
    async with redis_target.connect() as client:
        logs = RedisMessageLog(Pipelines(client), max_len=100, max_age_s=3600)
        old = (await one(logs, "u1", "a", T0)).epoch
        await one(logs, "u1", "b", T0)
        redis_target.flush()
        replay = await logs.replay("u1", 2, old, T0)
        assert replay.epoch != old and replay.complete is False and replay.messages == [] and replay.last == 0
        fresh = await one(logs, "u1", "c", T0)
        assert (fresh.offset, fresh.epoch) == (1, replay.epoch)
        mixed = await logs.replay("u1", 2, old, T0)
        assert [m.offset for m in mixed.messages] == [1] and mixed.complete is False


async def test_lost_streams_are_renewed_and_named_to_every_node(redis_target: RedisTarget) -> None:
    """lost(uids) on one node: those streams start new epochs (a replay from the old epoch is
    incomplete; an append still in flight finds its claim refused), the others keep theirs, and
    every node's next sync names them (a node's first sync names none: it takes the cursor)."""
    async with redis_target.connect() as client:
        pipes = Pipelines(client)
        here, there = RedisMessageLog(pipes, 100, 3600), RedisMessageLog(pipes, 100, 3600)
        first = {uid: await one(here, uid, "a") for uid in ("u1", "u2", "u3")}
        assert await here.sync() == Gaps(False) and await there.sync() == Gaps(False)
        await here.lost(["u3", "u1", "u3"])
        assert await there.sync() == Gaps(False, ("u1", "u3")) and await there.sync() == Gaps(False)
        assert await here.sync() == Gaps(False, ("u1", "u3"))
        for uid, renewed in (("u1", True), ("u2", False), ("u3", True)):
            replay = await there.replay(uid, 1, first[uid].epoch, T0)
            assert (replay.epoch != first[uid].epoch, replay.complete) == (renewed, not renewed), uid
        assert (await one(here, "u2", "b")).offset == 2 and (await one(here, "u1", "b")).offset == 1
        await here.lost()
        assert await there.sync() == Gaps(True, ())


async def test_unreadable_counter_starts_a_new_epoch(redis_target: RedisTarget) -> None:
    """A seq that does not parse is never reused: a new epoch begins and the stale entries go."""
    async with redis_target.connect() as client:
        logs = RedisMessageLog(Pipelines(client), max_len=100, max_age_s=3600)
        old = (await one(logs, "u1", "a", T0)).epoch
        await client.hset(mlog_key("u1"), "seq", "garbage")
        fresh = await one(logs, "u1", "b", T0)
        assert fresh.offset == 1 and fresh.epoch != old
        assert [m.offset for m in (await logs.replay("u1", None, None, T0)).messages] == [1]


async def test_concurrent_appends_stay_in_offset_order(redis_target: RedisTarget) -> None:
    """Batches racing from two clients: distinct offsets 1..60, stored in order, each batch consecutive."""
    async with redis_target.connect() as one_client, redis_target.connect() as two_client:
        logs = [RedisMessageLog(Pipelines(one_client), 100, 3600), RedisMessageLog(Pipelines(two_client), 100, 3600)]
        batches = await asyncio.gather(
            *(
                logs[i % 2].append([("u1", body(f"b{i}.0")), ("u2", body("x")), ("u1", body(f"b{i}.1"))], T0)
                for i in range(30)
            )
        )
        for first, _, second in batches:
            assert second.offset == first.offset + 1
        assert sorted(m.offset for batch in batches for m in (batch[0], batch[2])) == list(range(1, 61))
        held = (await logs[0].replay("u1", None, None, T0)).messages
        assert [m.offset for m in held] == list(range(1, 61))
        assert all(decoded(m.body)["offset"] == m.offset for m in held)
        assert sorted(batch[1].offset for batch in batches) == list(range(1, 31))


async def test_batch_keeps_the_order_given(redis_target: RedisTarget) -> None:
    """One append of several users' messages: consecutive offsets per user, results in entry order."""
    async with redis_target.connect() as client:
        logs = RedisMessageLog(Pipelines(client), 100, 3600)
        stored = await logs.append([("u1", body("a")), ("u2", body("b")), ("u1", body("c")), ("u3", body("d"))], T0)
        assert [(m.offset, decoded(m.body)["event"]) for m in stored] == [(1, "a"), (1, "b"), (2, "c"), (1, "d")]
        assert await logs.append([], T0) == []


async def test_replay_of_a_new_stream_and_past_the_end(redis_target: RedisTarget) -> None:
    """A new stream replays complete under the epoch later appends use; a cursor past the end is incomplete."""
    async with redis_target.connect() as client:
        logs = RedisMessageLog(Pipelines(client), 100, 3600)
        fresh = await logs.replay("u1", None, None, T0)
        assert (fresh.messages, fresh.complete, fresh.last) == ([], True, 0)
        first = await one(logs, "u1", "a")
        assert (first.offset, first.epoch) == (1, fresh.epoch)
        assert (await logs.replay("u1", 5, fresh.epoch, T0)).complete is False
        assert (await logs.replay("u1", 1, None, T0)).complete is True


async def test_ack_moves_the_replay_base(redis_target: RedisTarget) -> None:
    """After an ack (one past the end counts as the last) a replay without cursor starts after it;
    an ack of another epoch than the stream's changes nothing."""
    async with redis_target.connect() as client:
        logs = RedisMessageLog(Pipelines(client), 100, 3600)
        epoch = (await one(logs, "u1", "a")).epoch
        for event in "bc":
            await one(logs, "u1", event)
        await logs.ack([("u1", 2, epoch), ("u2", 7, epoch)])
        after_ack = await logs.replay("u1", None, None, T0)
        assert [m.offset for m in after_ack.messages] == [3] and after_ack.complete
        await logs.ack([("u1", 3, "another-epoch")])  # an ack of an older epoch trims nothing
        assert [m.offset for m in (await logs.replay("u1", None, None, T0)).messages] == [3]
        await logs.ack([("u1", 99, epoch)])
        await one(logs, "u1", "d")
        last = await logs.replay("u1", None, None, T0)
        assert [m.offset for m in last.messages] == [4] and last.complete


async def test_retried_append_writes_once(redis_target: RedisTarget) -> None:
    """The same write sent twice (a retry after a lost reply) stores its messages once and answers
    the same offsets; another write after it takes the next ones."""
    async with redis_target.connect() as client:
        keys = [mlog_key("u1"), mstream_key("u1")]
        args: list[str | int | bytes] = ["nonce1", T0, 100, 0, 60_000, "e1", "0", 2, b'{"a":1', b'{"a":2']
        [first] = await Pipelines(client).script(USER_APPEND, keys, args)
        [again] = await Pipelines(client).script(USER_APPEND, keys, args)
        assert first[:2] == again[:2] == [1, b"e1"]
        assert await client.xlen(mstream_key("u1")) == 2
        assert (await Pipelines(client).script(USER_APPEND, keys, ["nonce2", *args[1:]]))[0][0] == 3


async def test_an_append_to_many_users_takes_one_script_per_slot_group(redis_target: RedisTarget) -> None:
    """A group push to 300 members is one round trip of scripts (the port's contract), not a read
    of each stream and then a write: on one server ceil(300 / USERS_PER_SCRIPT) scripts, each over
    many users; on a cluster one per hash slot the members' keys fall in. Each member's stream
    gets its own offsets, and a member named twice gets consecutive ones."""
    async with redis_target.connect() as client:
        pipes = Pipelines(client)
        logs = RedisMessageLog(pipes, 100, 3600)
        await one(logs, "u0", "warm")  # the script is loaded
        reset_stats(redis_target)
        entries = [(f"u{i}", body("g")) for i in range(300)] + [("u7", body("again"))]
        stored = await logs.append(entries, T0)
        slots = {key_slot(mlog_key(f"u{i}").encode()) for i in range(300)}
        assert scripts_run(redis_target) == (len(slots) if redis_target.cluster else -(-300 // USERS_PER_SCRIPT))
        assert [m.offset for m in stored] == [2] + [1] * 299 + [2]
        assert decoded(stored[-1].body)["event"] == "again" and stored[-1].epoch == stored[7].epoch
        replay = await logs.replay("u299", 0, stored[299].epoch, T0)
        assert [m.body for m in replay.messages] == [stored[299].body] and replay.complete


async def test_an_append_within_the_bounds_reads_no_entry(redis_target: RedisTarget) -> None:
    """Once a stream's oldest time is known, appends within the length and age bounds read no
    entry (no XRANGE), each stream's counters in one read (HMGET), and the server's run once per
    script; they renew no expiry within a tenth of the age bound of the last renewal, and do
    after it. An ack that drops the oldest leaves a bound that still trims by age."""
    async with redis_target.connect() as client:
        logs = RedisMessageLog(Pipelines(client), max_len=100, max_age_s=100)
        epoch = (await one(logs, "u0", "first", T0)).epoch
        for i in range(1, 10):
            await one(logs, f"u{i}", "first", T0)
        reset_stats(redis_target)
        await logs.append([(f"u{i}", body("next")) for i in range(10)], T0 + 5_000)
        calls = command_calls(redis_target)
        assert calls.get("xrange", 0) == calls.get("hget", 0) == calls.get("pexpire", 0) == 0
        assert calls["hmget"] == 10 and calls["info"] == scripts_run(redis_target)
        await logs.ack([("u0", 1, epoch)])
        reset_stats(redis_target)
        await one(logs, "u0", "late", T0 + 104_000)
        assert command_calls(redis_target)["pexpire"] == 2
        # at T0 + 106 s, "next" (T0 + 5 s) is past 100 s old: the replay drops it
        replay = await logs.replay("u0", 0, epoch, T0 + 106_000)
        assert [decoded(m.body)["event"] for m in replay.messages] == ["late"]


async def test_topic_log_reads_from_a_cursor(redis_target: RedisTarget) -> None:
    """Per-topic offsets; a reader from "now" sees later publications once, in order."""
    async with redis_target.connect() as client:
        topics = RedisTopicLog(Pipelines(client), max_len=1000)
        await topics.publish("news", body("before"))
        cursor, nothing = await topics.read(None, 0.05)
        assert nothing == []
        for topic, event in [("news", "n2"), ("sports", "s1"), ("news", "n3")]:
            await topics.publish(topic, body(event))
        cursor, got = await topics.read(cursor, 1.0)
        assert [(t, m.offset, decoded(m.body)["event"]) for t, m in got] == [
            ("news", 2, "n2"),
            ("sports", 1, "s1"),
            ("news", 3, "n3"),
        ]
        assert all(decoded(m.body)["epoch"] == m.epoch for _, m in got)
        assert (await topics.read(cursor, 0.05))[1] == []


async def test_topic_read_wakes_on_publish(redis_target: RedisTarget) -> None:
    """A blocked read returns as soon as a message is published, well before its timeout."""
    async with redis_target.connect() as client, redis_target.connect() as writer:
        topics = RedisTopicLog(Pipelines(client), max_len=1000)
        cursor, _ = await topics.read(None, 0.01)
        started = time.monotonic()
        reader = asyncio.ensure_future(topics.read(cursor, 2.0))
        await asyncio.sleep(0.1)
        await RedisTopicLog(Pipelines(writer), max_len=1000).publish("news", body("late"))
        _, got = await reader
        assert [decoded(m.body)["event"] for _, m in got] == ["late"]
        assert time.monotonic() - started < 1.5
