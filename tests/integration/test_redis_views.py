"""The read caches of details and lists on the production backend (hongbao.core.view_cache,
core/adapters/redis/views.py) over MariaDB and a real Redis, standalone and the 3-master cluster:
two workers' services share Redis; a read after a write never shows what the write changed from,
a flushed Redis is refilled from the DB, and "Redis down at details" (docs/architecture.md section 10) reads
the DB with the breaker keeping it fast."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest
import redis
from hongbao.core import errors
from hongbao.core.adapters.redis.views import RedisViews
from hongbao.core.clock import ManualClock
from hongbao.core.services import Services
from hongbao.core.view_cache import MEMORY_TTL_MS
from hongbao.core.vocabulary import Direction

from tests.core import test_service as suite
from tests.core.conftest import admission, clock  # noqa: F401  (fixtures)
from tests.integration.conftest import RedisTarget
from tests.integration.private_redis import PrivateRedis, private_redis  # noqa: F401  (fixture)
from tests.integration.test_redis_money import Open, open_on  # noqa: F401  (fixture)
from tests.server.crowd import eventually_async


def _opened(view: dict[str, object]) -> dict[str, object]:
    receipts = view["receipts"]
    assert isinstance(receipts, list)
    return {r["user_id"]: r["amount_fen"] for r in receipts}


async def _received(svc: Services, user: str) -> list[tuple[object, object, object]]:
    page = await svc.reading.user_list(user, Direction.RECEIVED, 2026, 1)
    items = page["items"]
    assert isinstance(items, list)
    return [(i["order_id"], i["amount_fen"], i["best_luck"]) for i in items]


async def test_details_follow_every_write(open_on: Open, redis_target: RedisTarget, clock: ManualClock) -> None:
    """Cached details: the opening worker sees its open at once, the other within the memory TTL
    from a bumped Redis; finished details (best luck) are kept; a non-member is refused."""
    one, _ = await open_on(redis_target.url, redis_target.cluster)
    two, _ = await open_on(redis_target.url, redis_target.cluster)
    w1, w2 = one.services, two.services
    await suite._group(w1, "g", ["S", "A", "B"])
    order_id = await suite._paid(w1, "S", {"count": 2, "total_fen": 300, "group_id": "g"}, fund=300)
    assert (
        _opened(await w1.reading.details("S", order_id)) == {}
        and _opened(await w2.reading.details("S", order_id)) == {}
    )
    assert redis_target.sync_keys().exists(f"details:{{{order_id}}}") == 1

    a = (await w2.opening.open("A", order_id))[0].amount_fen
    assert _opened(await w2.reading.details("S", order_id)) == {"A": a}  # the writer's memory was dropped
    clock.advance_ms(MEMORY_TTL_MS)
    assert _opened(await w1.reading.details("S", order_id)) == {"A": a}  # Redis was bumped after the DB write
    b = (await w1.opening.open("B", order_id))[0].amount_fen
    final = await w1.reading.details("A", order_id)
    assert final["status"] == "finished" and _opened(final) == {"A": a, "B": b}
    assert final["best_luck_user_id"] == ("A" if a >= b else "B")
    clock.advance_ms(MEMORY_TTL_MS)
    assert await w2.reading.details("B", order_id) == final
    with pytest.raises(errors.NotMember):
        await w2.reading.details("X", order_id)


async def test_an_open_is_answered_before_its_details_bump_and_a_read_here_waits_for_it(
    open_on: Open, redis_target: RedisTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The open's answer does not wait for the shared level's bump of the packet's details (held
    here until released); a details read on the opening worker meanwhile waits for the bump, then
    shows the receipt: never the view both levels held before the open."""
    one, _ = await open_on(redis_target.url, redis_target.cluster)
    svc = one.services
    await suite._group(svc, "g", ["S", "A"])
    order_id = await suite._paid(svc, "S", {"count": 2, "total_fen": 300, "group_id": "g"}, fund=300)
    assert _opened(await svc.reading.details("S", order_id)) == {}

    async def stored() -> None:  # under the entry's current token: the reader's put is not waited for
        held = redis_target.sync_keys().hgetall(f"details:{{{order_id}}}")
        assert any(key.startswith(b"v:") and token == held.get(b"g", b"") for key, token in held.items())

    await eventually_async(stored, 5.0)
    release = asyncio.Event()
    bump = RedisViews.bump

    async def held(self: RedisViews, entries: Sequence[str]) -> None:
        await release.wait()
        await bump(self, entries)

    monkeypatch.setattr(RedisViews, "bump", held)
    receipt, repeat = await asyncio.wait_for(svc.opening.open("A", order_id), 5)
    reading = asyncio.ensure_future(svc.reading.details("S", order_id))
    await asyncio.sleep(0.2)
    assert not repeat and not reading.done()
    release.set()
    assert _opened(await asyncio.wait_for(reading, 5)) == {"A": receipt.amount_fen}
    await eventually_async(stored, 5.0)


async def test_lists_after_credit_and_a_flush(open_on: Open, redis_target: RedisTarget, clock: ManualClock) -> None:
    """A cached (empty) received list shows the rows once drained, on both workers; after FLUSHALL
    the lists and details are rebuilt from the DB, equal."""
    one, _ = await open_on(redis_target.url, redis_target.cluster)
    two, _ = await open_on(redis_target.url, redis_target.cluster)
    w1, w2 = one.services, two.services
    clock.set_ms(1_780_000_000_000)  # in 2026, the year the lists are read for
    await suite._group(w1, "g", ["S", "A"])
    order_id = await suite._paid(w1, "S", {"count": 1, "total_fen": 100, "group_id": "g"}, fund=100)
    assert await _received(w1, "A") == [] and await _received(w2, "A") == []
    await w1.opening.open("A", order_id)
    await w1.settlement.drain_credits()
    while await w1.lists.drain():
        pass
    assert await _received(w1, "A") == [(order_id, 100, True)]
    clock.advance_ms(MEMORY_TTL_MS)
    assert await _received(w2, "A") == [(order_id, 100, True)]
    shown = await w2.reading.details("A", order_id)

    redis_target.flush()
    clock.advance_ms(MEMORY_TTL_MS)
    assert await _received(w2, "A") == [(order_id, 100, True)]
    assert await w1.reading.details("A", order_id) == shown
    assert redis_target.sync_keys().exists(f"details:{{{order_id}}}", "lists:{A}") == 2


async def test_details_with_redis_down(open_on: Open, clock: ManualClock, private_redis: PrivateRedis) -> None:
    """Redis stopped: details and lists come from the DB in well under a second each (breaker),
    counted as fallbacks, the greeting (kept on Redis) as the default ""; opens while down show at
    once; Redis back (empty): cached again."""
    backend, counts = await open_on(private_redis.url, False)
    svc = backend.services
    await suite._group(svc, "g", ["S", "A", "B", "C"])
    order_id = await suite._paid(svc, "S", {"count": 3, "total_fen": 300, "group_id": "g", "greeting": "hi"}, fund=300)
    assert _opened(await svc.reading.details("S", order_id)) == {}
    await private_redis.stop()

    a = (await svc.opening.open("A", order_id))[0].amount_fen  # its bump is lost and counted
    started = time.perf_counter()
    for user in ("S", "A", "B", "C"):
        clock.advance_ms(MEMORY_TTL_MS)
        view = await svc.reading.details(user, order_id)
        assert _opened(view) == {"A": a} and view["greeting"] == ""
        await svc.reading.user_list(user, Direction.RECEIVED, 2026, 1)
    assert time.perf_counter() - started < 1.0
    assert counts["redis_fallback_details"] >= 4 and counts["redis_fallback_lists"] >= 4
    assert counts["redis_views_lost_bumps"] >= 1

    private_redis.start()
    await asyncio.sleep(1.1)  # the breaker's cooldown: the next call is the trial
    clock.advance_ms(MEMORY_TTL_MS)
    assert _opened(await svc.reading.details("B", order_id)) == {"A": a}
    clock.advance_ms(MEMORY_TTL_MS)
    assert _opened(await svc.reading.details("B", order_id)) == {"A": a}
    with redis.Redis(host="127.0.0.1", port=private_redis.port) as client:
        assert client.exists(f"details:{{{order_id}}}") == 1
