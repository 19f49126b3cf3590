"""The grab filter's shared level on Redis (core/adapters/redis/grab.py) under the production
service, on a standalone Redis and on the 3-master cluster: one hash-tagged key per packet written
after pay, every open batch and refund; a second worker (memory empty) answers grab from it; a
key lost with Redis is rebuilt from the DB and never claims a packet finished too early."""

from __future__ import annotations

from collections.abc import Callable

import hongbao_native
import pytest
from hongbao.core import errors
from hongbao.core.adapters.redis.grab import KEEP_MS, key
from hongbao.core.clock import ManualClock
from hongbao.core.services.grabbing import GRAB_CACHE_TTL_MS, GRAB_OK
from hongbao.core.soon import Later
from hongbao.server.composition import Backend

from tests.core import test_service as suite
from tests.core.conftest import admission, clock  # noqa: F401  (fixtures of the suite)
from tests.integration.conftest import RedisTarget
from tests.integration.mariadb import make_backend  # noqa: F401  (fixture)

Make = Callable[..., Backend]


@pytest.fixture
def service_redis(redis_target: RedisTarget) -> RedisTarget:
    """The backends of this module run on both Redis modes."""
    return redis_target


def _state(target: RedisTarget, order_id: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in target.sync_keys().hgetall(key(order_id)).items()}


async def test_grab_state_follows_the_packet(make_backend: Make, redis_target: RedisTarget, clock: ManualClock) -> None:
    """Pay writes the key, each open adds the opener (after SCRIPT FLUSH too), the last share
    finishes it; another worker grabs from it."""
    one, two = make_backend(), make_backend()
    await suite._group(one.services, "g", ["S", "A", "B", "C"])
    order_id = await suite._paid(one.services, "S", {"count": 2, "total_fen": 100, "group_id": "g"})
    packet = await one.services.ports.packets.get_packet(order_id)
    assert packet is not None
    assert _state(redis_target, order_id) == {
        "k": "lucky",
        "c": "2",
        "n": "2",
        "s": "active",
        "g": "g",
        "r": "",
        "e": str(packet.expires_at_ms),
        "o": "S",
        "t": str(packet.total_fen),
        "a": str(packet.created_at_ms),
        "b": str(packet.pay_by_ms),
    }
    ttl_ms = redis_target.sync_keys().pttl(key(order_id))
    assert packet.expires_at_ms - clock.now_ms() < ttl_ms <= packet.expires_at_ms - clock.now_ms() + KEEP_MS
    assert await two.services.grabbing.grab("A", order_id) is GRAB_OK
    for port in redis_target.ports:  # a restarted Redis has no scripts: NOSCRIPT, loaded, sent again
        redis_target.sync_client(port).script_flush()
    a, _ = await suite._open_followed(one.services, "A", order_id)
    assert _state(redis_target, order_id)["n"] == "1" and _state(redis_target, order_id)["u:A"] == str(a.amount_fen)
    clock.advance_ms(GRAB_CACHE_TTL_MS)  # worker two's memory of the untouched packet lapses
    assert await two.services.grabbing.grab("A", order_id) == {"status": "opened", "amount_fen": a.amount_fen}
    assert await two.services.grabbing.grab("B", order_id) is GRAB_OK
    b, _ = await suite._open_followed(one.services, "B", order_id)
    state = _state(redis_target, order_id)
    assert (state["n"], state["s"], state["u:B"]) == ("0", "finished", str(b.amount_fen))
    with pytest.raises(errors.Finished):
        await two.services.grabbing.grab("C", order_id)
    with pytest.raises(errors.NotMember):
        await two.services.grabbing.grab("X", order_id)
    assert await two.services.grabbing.grab("B", order_id) == {"status": "opened", "amount_fen": b.amount_fen}


async def test_grab_state_rebuilt_from_the_db(
    make_backend: Make, redis_target: RedisTarget, clock: ManualClock
) -> None:
    """After a flush, a grab rebuilds the key from the DB (marked rebuilt, remaining count frozen);
    openers are told their amounts; the last share finishes it."""
    one, two = make_backend(), make_backend()
    await suite._group(one.services, "g", ["S", "A", "B", "C", "D"])
    order_id = await suite._paid(one.services, "S", {"count": 3, "total_fen": 300, "group_id": "g"})
    a, _ = await suite._open_followed(one.services, "A", order_id)
    redis_target.flush()
    assert await two.services.grabbing.grab("A", order_id) == {
        "status": "opened",
        "amount_fen": a.amount_fen,
    }  # from the DB
    assert _state(redis_target, order_id) == {
        "k": "lucky",
        "c": "3",
        "n": "2",
        "s": "active",
        "g": "g",
        "r": "",
        "e": _state(redis_target, order_id)["e"],
        "p": "1",
        "o": "S",
        "t": "300",
        "a": _state(redis_target, order_id)["a"],
        "b": _state(redis_target, order_id)["b"],
    }
    b, _ = await suite._open_followed(one.services, "B", order_id)
    assert _state(redis_target, order_id)["n"] == "2" and _state(redis_target, order_id)["u:B"] == str(b.amount_fen)
    clock.advance_ms(GRAB_CACHE_TTL_MS)
    assert await two.services.grabbing.grab("B", order_id) == {"status": "opened", "amount_fen": b.amount_fen}
    assert await two.services.grabbing.grab("C", order_id) is GRAB_OK
    await suite._open_followed(one.services, "C", order_id)
    assert (_state(redis_target, order_id)["n"], _state(redis_target, order_id)["s"]) == ("0", "finished")
    with pytest.raises(errors.Finished):
        await two.services.grabbing.grab("D", order_id)


async def test_refund_and_refusals_update_the_state(
    make_backend: Make, redis_target: RedisTarget, clock: ManualClock
) -> None:
    """A refund sets the key's status; an exclusive packet's key answers its receiver only; an
    unknown id is 404 and leaves no key."""
    backend = make_backend()
    svc = backend.services
    await suite._group(svc, "g", ["S", "A"])
    order_id = await suite._paid(svc, "S", {"count": 2, "total_fen": 100, "group_id": "g"})
    exclusive = await suite._paid(svc, "S", {"kind": "exclusive", "count": 1, "total_fen": 50, "receiver_id": "A"})
    assert _state(redis_target, exclusive)["r"] == "A"
    assert await svc.grabbing.grab("A", exclusive) is GRAB_OK
    with pytest.raises(errors.NotMember):
        await svc.grabbing.grab("B", exclusive)
    packet = await svc.ports.packets.get_packet(order_id)
    assert packet is not None
    clock.set_ms(packet.expires_at_ms)
    assert await svc.settlement.refund_due() == 2
    assert _state(redis_target, order_id)["s"] == "expired"
    with pytest.raises(errors.Expired):
        await svc.grabbing.grab("A", order_id)
    parts = hongbao_native.decode_order_id(order_id)
    unknown = hongbao_native.encode_order_id(parts.region, parts.yymmdd, parts.source, parts.sequence + 10**6)
    with pytest.raises(errors.NotFound):
        await svc.grabbing.grab("A", unknown)
    assert not redis_target.sync_keys().exists(key(unknown))


async def test_grab_soon_answers_as_grab_or_says_later(make_backend: Make, redis_target: RedisTarget) -> None:
    """grab_soon (the HTTP grab's path without a coroutine) answers from one HMGET what grab
    answers, and says Later where grab needs the database: a group this worker holds no copy of, a
    packet missing from Redis, an unknown amount."""
    one, two, three = make_backend(), make_backend(), make_backend()
    await suite._group(one.services, "g", ["S", "A", "B", "C"])
    order_id = await suite._paid(one.services, "S", {"count": 3, "total_fen": 300, "group_id": "g"})
    a, _ = await suite._open_followed(one.services, "A", order_id)
    assert (
        await two.services.grabbing.grab("B", order_id) is GRAB_OK
    )  # worker two now holds the group's members and the packet's state
    assert two.services.grabbing.cached("B", order_id) is None  # someone opened: worker two asks Redis

    async def soon(user_id: str, worker: Backend = two) -> object:
        pending = worker.services.grabbing.soon(user_id, order_id)
        assert pending is not None
        try:
            return await pending
        except Later:
            return Later

    assert await soon("B") is GRAB_OK
    assert three.services.grabbing.shared is not None
    await three.services.grabbing.shared.lookup(order_id, "A")  # worker three's lean route learns the slots
    assert await soon("A", three) is Later  # worker three holds no copy of the group: is A a member?
    assert await three.services.grabbing.grab("A", order_id) == {"status": "opened", "amount_fen": a.amount_fen}
    assert await soon("A", three) == {"status": "opened", "amount_fen": a.amount_fen}
    redis_target.flush()
    assert await soon("B") is Later  # the key is gone: grab rebuilds it from the database
    assert await two.services.grabbing.grab("B", order_id) is GRAB_OK
    assert await soon("A") is Later  # rebuilt after opens: A's amount is not certain from Redis
    assert await soon("B") is Later


async def test_a_group_grab_reads_redis_once_where_the_group_is_held(
    make_backend: Make, redis_target: RedisTarget
) -> None:
    """A worker holding the group's members (its membership cache) decides a grab of the group's
    packet from one HMGET of the grab state, whoever grabs: no second read for the membership, and
    none at all for an outsider once the packet's state is in memory."""
    one, two = make_backend(), make_backend()
    await suite._group(one.services, "g", ["S", "A", "B", "C"])
    order_id = await suite._paid(one.services, "S", {"count": 3, "total_fen": 300, "group_id": "g"})
    a, _ = await suite._open_followed(one.services, "A", order_id)
    assert await two.services.ports.groups.is_member("g", "S")  # worker two now holds the group
    for port in redis_target.ports:
        redis_target.sync_client(port).config_resetstat()

    def hmgets() -> int:
        stats = [redis_target.sync_client(port).info("commandstats") for port in redis_target.ports]
        return sum(int(s.get("cmdstat_hmget", {}).get("calls", 0)) for s in stats)

    pending = two.services.grabbing.soon("A", order_id)
    assert pending is not None
    assert await pending == {"status": "opened", "amount_fen": a.amount_fen}
    assert hmgets() == 1
    pending = two.services.grabbing.soon("B", order_id)
    assert pending is not None and await pending is GRAB_OK
    assert await two.services.grabbing.grab("C", order_id) is GRAB_OK
    assert hmgets() == 3
    with pytest.raises(errors.NotMember):
        await two.services.grabbing.grab("X", order_id)
    assert hmgets() == 3
