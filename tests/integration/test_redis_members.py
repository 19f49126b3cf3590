"""Group membership behind worker memory and Redis (core/membership.py, core/adapters/redis/members.py),
on a standalone Redis and on the 3-master cluster: a change made on one worker reaches every
other worker's memory through the membership feed; a worker that cannot read the feed keeps its
copies short-lived and clears them when the feed is back."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from hongbao.core.breaker import BreakerOpen
from hongbao.core.clock import ManualClock
from hongbao.core.membership import SHORT_TTL_MS, CachedGroups, members_entry
from hongbao.server.composition import Backend

from tests.core.conftest import admission, clock  # noqa: F401  (fixtures)
from tests.core.counting import Counting
from tests.integration.conftest import RedisTarget
from tests.integration.private_redis import PrivateRedis
from tests.integration.test_redis_money import Open, open_on  # noqa: F401  (fixture)
from tests.server.crowd import eventually_async


def _groups(backend: Backend) -> CachedGroups:
    groups = backend.services.ports.groups
    assert isinstance(groups, CachedGroups)
    return groups


async def _drop_in_database(backend: Backend, group_id: str, user_id: str) -> None:
    """Remove a member behind the caches' back (no announcement): what only a cache would still show."""
    assert await _groups(backend).inner.remove_member(group_id, user_id)


async def _stored(backend: Backend, group_id: str) -> None:
    """Wait until the shared level holds the members of ``group_id`` (a reader that loaded them from
    the database stores them there without waiting: core/view_cache.py, Fills); fails after 5 s."""

    async def stored() -> None:
        assert (await _groups(backend).shared.get(members_entry(group_id), "m"))[1] is not None

    await eventually_async(stored, 5.0)


async def _follow(backend: Backend) -> None:
    for follow in backend.follow:
        await follow()


async def test_a_change_on_one_worker_reaches_the_others(open_on: Open, redis_target: RedisTarget) -> None:
    """Worker 2 answers from memory (a row deleted behind its back still reads as a member), and a
    removal made on worker 1 reaches worker 2 with its next read of the feed."""
    one, _ = await open_on(redis_target.url, redis_target.cluster)
    two, _ = await open_on(redis_target.url, redis_target.cluster)
    await _follow(one)
    await _follow(two)  # both follow the feed from here on
    group_id, _ = await one.services.groups.create("A", ["B", "C"])
    assert await _groups(two).is_member(group_id, "C")
    await _stored(two, group_id)
    await _drop_in_database(one, group_id, "C")
    assert await _groups(two).is_member(group_id, "C")  # memory: the database was not asked
    assert await _groups(one).members(group_id) == ["A", "B", "C"]  # the shared level still had it too
    await _groups(one).remove_member(group_id, "B")
    assert not await _groups(one).is_member(group_id, "B")
    assert await _groups(two).is_member(group_id, "B")  # not followed yet
    await _follow(two)
    assert await _groups(two).members(group_id) == ["A"]  # dropped, and the shared level was bumped


async def test_feed_down_keeps_copies_short(
    open_on: Open, tmp_path: Path, clock: ManualClock, loop_cleanups: list[Callable[[], Awaitable[None]]]
) -> None:
    """While Redis is down a worker forgets its copies and keeps new ones SHORT_TTL_MS; when the
    feed is readable again it clears them once more (announcements may have been missed)."""
    redis = PrivateRedis(tmp_path / "redis")
    redis.start()
    loop_cleanups.append(redis.stop)
    one, _ = await open_on(redis.url, False)
    groups = _groups(one)
    await _follow(one)
    group_id, _ = await one.services.groups.create("A", ["B"])
    assert await groups.is_member(group_id, "B")
    await redis.stop()
    with pytest.raises(BreakerOpen):
        await _follow(one)
    await _drop_in_database(one, group_id, "B")
    assert not await groups.is_member(group_id, "B")  # memory was cleared: read from the database
    await groups.inner.add_members(group_id, ["B"])
    assert not await groups.is_member(group_id, "B")  # kept briefly ...
    clock.advance_ms(SHORT_TTL_MS + 1)
    assert await groups.is_member(group_id, "B")  # ... SHORT_TTL_MS only


async def test_whether_a_group_exists_is_answered_by_the_cache_levels(open_on: Open, redis_target: RedisTarget) -> None:
    """The push of a packet to a group asks whether it exists: on a worker that never saw the group,
    the shared level answers (no database read); an empty group is asked of its creator."""
    one, _ = await open_on(redis_target.url, redis_target.cluster)
    two, _ = await open_on(redis_target.url, redis_target.cluster)
    group_id, _ = await one.services.groups.create("A", ["B"])
    assert await _groups(one).is_member(group_id, "B")
    await _stored(one, group_id)  # the shared level holds the members now
    counted = Counting(_groups(two).inner)
    _groups(two).inner = counted
    assert await two.services.groups.exists(group_id)
    assert counted.calls == {}
    assert not await two.services.groups.exists("g-nobody")
    assert counted.calls["creator"] == 1


async def test_a_member_read_does_not_wait_for_the_shared_level_to_store_it(
    open_on: Open, redis_target: RedisTarget
) -> None:
    """A worker that loads a group's members from the database answers at once: storing them on the
    shared level follows (here held until released), and then the shared level holds them."""
    one, _ = await open_on(redis_target.url, redis_target.cluster)
    group_id, _ = await one.services.groups.create("A", ["B"])
    groups = _groups(one)
    release = asyncio.Event()
    shared = Counting(groups.shared)
    put = groups.shared.put

    async def held(entry: str, field: str, token: str, body: bytes, ttl_ms: int) -> None:
        await release.wait()
        await put(entry, field, token, body, ttl_ms)

    shared.put = held
    reader = CachedGroups(groups.inner, shared, groups.feed, groups.clock, {})  # type: ignore[arg-type]
    assert await asyncio.wait_for(reader.is_member(group_id, "B"), 5)
    assert (await groups.shared.get(members_entry(group_id), "m"))[1] is None
    release.set()
    await _stored(one, group_id)


async def test_a_shared_level_put_that_fails_leaves_the_read_answered_and_logged(
    open_on: Open, redis_target: RedisTarget, caplog: pytest.LogCaptureFixture
) -> None:
    """A put on the shared level that fails with an error other than BreakerOpen no longer fails the
    read whose members are in hand: the read answers, the failure is one warning line, and the
    shared level still lacks the members (the next reader stores them)."""
    one, _ = await open_on(redis_target.url, redis_target.cluster)
    group_id, _ = await one.services.groups.create("A", ["B"])
    groups = _groups(one)
    failed = asyncio.Event()
    shared = Counting(groups.shared)

    async def failing(entry: str, field: str, token: str, body: bytes, ttl_ms: int) -> None:
        failed.set()
        raise RuntimeError("reply lost")

    shared.put = failing
    reader = CachedGroups(groups.inner, shared, groups.feed, groups.clock, {})  # type: ignore[arg-type]
    with caplog.at_level("WARNING", logger="hongbao"):
        assert await reader.members(group_id) == ["A", "B"]
        await asyncio.wait_for(failed.wait(), 5)
        await asyncio.sleep(0)  # the task's done callback runs in the next turn
    [record] = [r for r in caplog.records if "shared view was not stored" in r.getMessage()]
    assert record.levelname == "WARNING" and "reply lost" in record.getMessage()
    assert (await groups.shared.get(members_entry(group_id), "m"))[1] is None
