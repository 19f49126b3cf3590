"""The send path of the production backend on Redis in front of MariaDB (core/adapters/redis/state.py),
on a standalone Redis and on the 3-master cluster: order ids from INCR (source 0) never reissued
after Redis loses its data, pre-orders in Redis hashes with one-key scripts (M-16: no CROSSSLOT),
and "Redis down at send" (docs/architecture.md section 10) on a private redis-server stopped and started for
real: sends and pays go on through the DB, the breaker makes it cheap, and Redis takes over again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import hongbao_native
import pytest
import redis as pyredis
from hongbao.bench.services import redis_servers
from hongbao.bench.services.redis_servers import free_ports
from hongbao.core import errors
from hongbao.core.adapters.mysql.db import MysqlShards
from hongbao.core.adapters.redis.client import Pipelines, redis_client
from hongbao.core.adapters.redis.state import GRACE_MS
from hongbao.core.clock import ManualClock
from hongbao.core.faults import FaultInjected, Faults, raising
from hongbao.core.packet import Status
from hongbao.server.composition import Backend, production

from tests.core import test_service as suite
from tests.core.conftest import admission, clock  # noqa: F401  (fixtures)
from tests.core.counting import Counting
from tests.integration.conftest import RedisTarget
from tests.integration.mariadb import SERVICE_LAYOUT, TEST_MYSQL_TIMEOUT_S, TEST_REDIS_TIMEOUT_S, MariaDb, migrated
from tests.integration.private_redis import PrivateRedis
from tests.integration.production import start_production
from tests.server.conftest import stop_server
from tests.server.flows import eventually, group, paid_packet

Open = Callable[[str, bool], Awaitable[tuple[Backend, dict[str, int]]]]


@pytest.fixture
def open_on(
    mariadb: MariaDb,
    clock: ManualClock,
    admission: hongbao_native.AdmissionTable,
    loop_cleanups: list[Callable[[], Awaitable[None]]],
) -> Open:
    """A worker's production backend on emptied MariaDB shards and the Redis at (url, cluster), with
    its fallback counters."""
    layout = migrated(mariadb, SERVICE_LAYOUT)

    async def make(url: str, cluster: bool) -> tuple[Backend, dict[str, int]]:
        client = redis_client(url, cluster=cluster, socket_timeout_s=TEST_REDIS_TIMEOUT_S)
        await client.initialize()
        redis, counts = Pipelines(client), {}
        backend = production(
            MysqlShards(mariadb.dsn, layout, pool_size=4, timeout_s=TEST_MYSQL_TIMEOUT_S),
            admission,
            redis,
            consumer="w",
            clock=clock,
            counts=counts,
        )
        loop_cleanups.append(backend.aclose)
        return backend, counts

    return make


def _source(order_id: str) -> int:
    return hongbao_native.decode_order_id(order_id).source


async def _preorder_rows(backend: Backend) -> int:
    assert backend.shards is not None
    shards = backend.shards
    rows = [await shards.fetchone(db, "SELECT COUNT(*) FROM t_preorder", ()) for db in range(SERVICE_LAYOUT.n_dbs)]
    return sum(int(row[0]) for row in rows if row is not None)


async def test_send_pay_cancel_on_redis(open_on: Open, redis_target: RedisTarget) -> None:
    """60 concurrent sends get unique source-0 ids, pre-orders live in Redis only (spread over the
    masters), pay and cancel work."""
    backend, counts = await open_on(redis_target.url, redis_target.cluster)
    svc = backend.services
    await suite._group(svc, "g", ["A", "B"])
    await svc.accounts.topup("A", 10_000, "k")
    sent = await asyncio.gather(
        *(svc.sending.send("A", {"count": 2, "total_fen": 10, "group_id": "g"}) for _ in range(60))
    )
    ids = [order_id for order_id, _ in sent]
    assert len(set(ids)) == 60 and {_source(i) for i in ids} == {0}
    assert await _preorder_rows(backend) == 0
    keys = redis_target.sync_keys()
    assert all(keys.hget(f"preorder:{{{i}}}", "s") == b"pending" for i in ids)
    if redis_target.cluster:  # M-16: the keys sit on different masters and no call was CROSSSLOT
        owners = [port for port in redis_target.ports if redis_target.sync_client(port).keys("preorder:*")]
        assert len(owners) == 3
    paid = await asyncio.gather(*(svc.sending.pay("A", i) for i in ids[:30]))
    assert {p.status for p in paid} == {Status.ACTIVE} and await svc.ports.ledger.balance("A") == 10_000 - 300
    assert not any(keys.exists(f"preorder:{{{i}}}") for i in ids[:30])
    await asyncio.gather(*(svc.sending.cancel("A", i) for i in ids[30:]))
    with pytest.raises(errors.NotFound):
        await svc.sending.pay("A", ids[-1])
    assert counts == {}


async def test_pay_and_cancel_race_on_redis(open_on: Open, redis_target: RedisTarget) -> None:
    """20 pre-orders, each paid and cancelled at once: exactly one of the two wins per order, and
    the balance follows the pays."""
    backend, _ = await open_on(redis_target.url, redis_target.cluster)
    svc = backend.services
    await suite._group(svc, "g", ["A"])
    await svc.accounts.topup("A", 1000, "k")
    ids = [(await svc.sending.send("A", {"count": 1, "total_fen": 10, "group_id": "g"}))[0] for _ in range(20)]
    outcomes = await asyncio.gather(
        *(call for i in ids for call in (svc.sending.pay("A", i), svc.sending.cancel("A", i))), return_exceptions=True
    )
    pays, cancels = outcomes[::2], outcomes[1::2]
    won = [not isinstance(p, Exception) for p in pays]
    assert [isinstance(c, Exception) for c in cancels] == won
    assert all(isinstance(c, errors.Conflict) for c in cancels if isinstance(c, Exception))
    assert await svc.ports.ledger.balance("A") == 1000 - 10 * sum(won)
    assert [await svc.ports.packets.get_packet(i) is not None for i in ids] == won


async def test_sequence_is_not_reissued_after_redis_loses_it(open_on: Open, redis_target: RedisTarget) -> None:
    """Two workers take ids, Redis is flushed (an empty restart), the next ids are above every id handed out before."""
    (one, _), (two, _) = (
        await open_on(redis_target.url, redis_target.cluster),
        await open_on(redis_target.url, redis_target.cluster),
    )
    seqs = [one.services.ports.sequence, two.services.ports.sequence]
    before = await asyncio.gather(*(seqs[i % 2].next(1, 261130) for i in range(50)))
    redis_target.flush()
    after = await asyncio.gather(*(seqs[i % 2].next(1, 261130) for i in range(50)))
    assert {s for s, _ in before + after} == {0}
    assert len({n for _, n in before + after}) == 100
    assert min(n for _, n in after) > max(n for _, n in before)


async def test_sequence_is_not_reissued_after_a_restart_from_an_older_dump(open_on: Open, tmp_path: Path) -> None:
    """Ids taken, Redis saved, more ids taken, then Redis killed and started again on that older
    dump (its sequence key back behind ids handed out): every id taken after is new, and those
    from Redis are above every one taken before."""
    redis = PrivateRedis(tmp_path / "redis")
    redis.start()
    try:
        backend, _ = await open_on(redis.url, False)
        seq = backend.services.ports.sequence
        before = [await seq.next(1, 261130) for _ in range(5)]
        with pyredis.Redis(port=redis.port) as client:
            client.save()
        before += [await seq.next(1, 261130) for _ in range(5)]
        assert redis.process is not None
        redis.process.kill()
        redis.process.wait()
        redis.start()  # on the dump of the SAVE
        after = []
        while len([n for s, n in after if s == 0]) < 5:  # the first may fall back to the DB (source 1)
            after.append(await seq.next(1, 261130))
            await asyncio.sleep(0.05)
        assert len(set(before + after)) == len(before) + len(after)
        assert min(n for s, n in after if s == 0) > max(n for s, n in before if s == 0)
    finally:
        await redis.stop()


async def test_lapsed_pre_order_key_expires(open_on: Open, redis_standalone: RedisTarget, clock: ManualClock) -> None:
    """A pre-order past pay_by cannot be paid (404) and its Redis key expires GRACE_MS after pay_by."""
    redis_standalone.flush()
    backend, _ = await open_on(redis_standalone.url, False)
    svc = backend.services
    await suite._group(svc, "g", ["A"])
    await svc.accounts.topup("A", 100, "k")
    lapsed, pay_by = await svc.sending.send("A", {"count": 1, "total_fen": 10, "group_id": "g"})
    ttl_ms = redis_standalone.sync_client().pttl(f"preorder:{{{lapsed}}}")
    assert pay_by - clock.now_ms() < ttl_ms <= pay_by - clock.now_ms() + GRACE_MS
    clock.set_ms(pay_by)
    with pytest.raises(errors.NotFound):
        await svc.sending.pay("A", lapsed)
    assert await svc.ports.ledger.balance("A") == 100


async def _funded(
    open_on: Open, tmp_path: Path, loop_cleanups: list[Callable[[], Awaitable[None]]]
) -> tuple[subprocess.Popen[bytes], int, Backend, dict[str, int]]:
    """A private redis-server (stopped at the end), a backend on it and its fallback counters,
    group g (A, B) and A topped up with 1000 fen: (the process, its port, the backend, the counters)."""
    (port,) = free_ports(1)
    process = redis_servers.start_on(tmp_path, port)
    loop_cleanups.append(lambda: asyncio.to_thread(redis_servers.stop, process))
    backend, counts = await open_on(f"redis://127.0.0.1:{port}", False)
    await suite._group(backend.services, "g", ["A", "B"])
    await backend.services.accounts.topup("A", 1000, "k")
    return process, port, backend, counts


async def test_redis_down_at_send(
    open_on: Open, tmp_path: Path, loop_cleanups: list[Callable[[], Awaitable[None]]]
) -> None:
    """Redis stopped: sends take DB ids and DB pre-orders, cheaply (breaker), pays work; Redis
    restarted empty: it takes over, ids are not reissued."""
    process, port, backend, counts = await _funded(open_on, tmp_path, loop_cleanups)
    svc = backend.services
    cached, _ = await svc.sending.send("A", {"count": 1, "total_fen": 10, "group_id": "g"})
    await asyncio.to_thread(redis_servers.stop, process)

    outage = [(await svc.sending.send("A", {"count": 1, "total_fen": 10, "group_id": "g"}))[0]]
    started = time.monotonic()
    outage += [(await svc.sending.send("A", {"count": 1, "total_fen": 10, "group_id": "g"}))[0] for _ in range(10)]
    assert time.monotonic() - started < 1.0  # the breaker skips Redis: no connect retries per request
    assert {_source(i) for i in outage} == {1} and await _preorder_rows(backend) == 11
    assert (
        counts["redis_breaker_opens"] == 1
        and counts["redis_fallback_sequence"] >= 11
        and counts["redis_fallback_preorder"] >= 11
    )
    assert (await svc.sending.pay("A", outage[0])).status is Status.ACTIVE
    await svc.sending.cancel("A", outage[1])

    process = redis_servers.start_on(tmp_path, port)
    loop_cleanups.append(lambda: asyncio.to_thread(redis_servers.stop, process))
    await asyncio.sleep(1.1)  # the breaker's cooldown: the next call is the trial
    back = [(await svc.sending.send("A", {"count": 1, "total_fen": 10, "group_id": "g"}))[0] for _ in range(3)]
    assert {_source(i) for i in back} == {0}
    assert hongbao_native.decode_order_id(back[0]).sequence > hongbao_native.decode_order_id(cached).sequence
    assert (
        await svc.sending.pay("A", outage[2])
    ).status is Status.ACTIVE  # put in the DB, paid from it after Redis returned
    assert (await svc.sending.pay("A", back[0])).status is Status.ACTIVE
    with pytest.raises(errors.NotFound):  # it lived in the Redis that was lost: nothing was paid
        await svc.sending.pay("A", cached)
    assert await svc.ports.ledger.balance("A") == 1000 - 30 and await _preorder_rows(backend) == 8


async def test_pre_orders_held_in_redis_answer_degraded_while_it_is_silent(
    open_on: Open, tmp_path: Path, loop_cleanups: list[Callable[[], Awaitable[None]]]
) -> None:
    """Redis silent for a moment (SIGSTOP), its data kept: a pay or a cancel of a pre-order Redis
    holds answers 503 degraded (nothing else can tell it from an unknown one), never 404 or 409;
    a repeated pay of a packet already paid still answers it from the database. Redis back: the
    same pre-orders pay and cancel as before, the sender debited once each."""
    process, _, backend, counts = await _funded(open_on, tmp_path, loop_cleanups)
    svc = backend.services
    held, kept, paid = [(await svc.sending.send("A", {"count": 1, "total_fen": 10, "group_id": "g"}))[0] for _ in "abc"]
    await svc.sending.pay("A", paid)
    os.kill(process.pid, signal.SIGSTOP)
    try:
        with pytest.raises(errors.Degraded):
            await svc.sending.pay("A", held)
        with pytest.raises(errors.Degraded):
            await svc.sending.cancel("A", kept)
        assert counts["redis_breaker_opens"] == 1  # what follows skips Redis at once
        with pytest.raises(errors.Degraded):
            await svc.sending.pay("A", held)
        assert (await svc.sending.pay("A", paid)).status is Status.ACTIVE
    finally:
        os.kill(process.pid, signal.SIGCONT)
    await asyncio.sleep(1.1)  # the breaker's cooldown: the next call is the trial
    assert (await svc.sending.pay("A", held)).status is Status.ACTIVE
    await svc.sending.cancel("A", kept)
    assert await svc.ports.ledger.balance("A") == 1000 - 20


async def test_a_cut_pay_waits_for_a_silent_redis_instead_of_being_undone(
    open_on: Open, tmp_path: Path, clock: ManualClock, loop_cleanups: list[Callable[[], Awaitable[None]]]
) -> None:
    """A pay cut after its debit whose pre-order Redis holds, reconciled while Redis is silent
    (SIGSTOP): the run stops without settling it (not refunded as if the pre-order were gone);
    Redis back: the next run activates the packet from its pre-order, the sender debited once."""
    process, _, backend, _ = await _funded(open_on, tmp_path, loop_cleanups)
    svc = backend.services
    order_id, _ = await svc.sending.send("A", {"count": 2, "total_fen": 300, "group_id": "g"})
    svc.sending.faults = Faults({"pay_debited": (1.0, raising)})
    with pytest.raises(FaultInjected):
        await svc.sending.pay("A", order_id)
    svc.sending.faults = Faults()
    clock.advance_ms(5_000)
    os.kill(process.pid, signal.SIGSTOP)
    try:
        with pytest.raises(errors.Degraded):
            await svc.settlement.reconcile_pays(1_000)
    finally:
        os.kill(process.pid, signal.SIGCONT)
    assert await svc.ports.packets.get_packet(order_id) is None and await svc.ports.ledger.balance("A") == 700
    await asyncio.sleep(1.1)  # the breaker's cooldown: the next call is the trial
    assert await svc.settlement.reconcile_pays(1_000) == 1
    packet = await svc.ports.packets.get_packet(order_id)
    assert packet is not None and packet.status is Status.ACTIVE and await svc.ports.ledger.balance("A") == 700


async def test_pre_orders_are_read_together_from_redis_and_from_the_db(
    open_on: Open, tmp_path: Path, clock: ManualClock, loop_cleanups: list[Callable[[], Awaitable[None]]]
) -> None:
    """``get_many`` answers what ``get`` does for each pre-order, in the order asked: with Redis
    stopped, the DB's copy of one put meanwhile answers and one only Redis held is Degraded; Redis
    restarted empty, the DB's copy still answers, the one Redis lost and a paid one (gone) are
    None. The reconciler reads its pre-orders that way: a pay cut after its debit whose pre-order
    is the DB's copy is activated from it, the page's pre-orders Redis lacks read in one DB query."""
    process, port, backend, _ = await _funded(open_on, tmp_path, loop_cleanups)
    svc, preorders = backend.services, backend.services.ports.preorders
    cached, paid = [(await svc.sending.send("A", {"count": 1, "total_fen": 10, "group_id": "g"}))[0] for _ in "ab"]
    await svc.sending.pay("A", paid)
    await asyncio.to_thread(redis_servers.stop, process)
    stored, _ = await svc.sending.send("A", {"count": 2, "total_fen": 300, "group_id": "g"})
    now = clock.now_ms()
    assert await preorders.get_many([stored], now) == [await preorders.get(stored, now)] != [None]
    with pytest.raises(errors.Degraded):
        await preorders.get_many([stored, cached], now)
    process = redis_servers.start_on(tmp_path, port)
    loop_cleanups.append(lambda: asyncio.to_thread(redis_servers.stop, process))
    await asyncio.sleep(1.1)  # the breaker's cooldown: the next call is the trial
    await preorders.get(cached, now)  # the trial
    asked = [stored, cached, paid, stored]
    many = await preorders.get_many(asked, now)
    assert many == [await preorders.get(order_id, now) for order_id in asked]
    assert many[0] is not None and many[1:3] == [None, None]
    svc.sending.faults = Faults({"pay_debited": (1.0, raising)})
    with pytest.raises(FaultInjected):
        await svc.sending.pay("A", stored)
    svc.sending.faults = Faults()
    clock.advance_ms(5_000)
    fallback = preorders._fallback = Counting(preorders._fallback)  # type: ignore[attr-defined]
    assert await svc.settlement.reconcile_pays(1_000) == 1  # ``stored`` (``paid`` has nothing left to do)
    assert (
        fallback.calls["get_many"] == 1 and not fallback.calls["get"]
    )  # both debits' pre-orders (neither in Redis) in one DB read
    packet = await svc.ports.packets.get_packet(stored)
    assert packet is not None and packet.status is Status.ACTIVE and await svc.ports.ledger.balance("A") == 1000 - 310


def _counter(metrics: str, name: str) -> float:
    return next(float(line.split()[1]) for line in metrics.splitlines() if line.startswith(f"{name} "))


def test_redis_down_at_send_over_http(mariadb: MariaDb, tmp_path: Path) -> None:
    """`hongbao serve --backend production`: Redis stopped, send and pay still answer, /metrics
    counts the fallbacks; Redis back, ids come from it again."""
    (port,) = free_ports(1)
    process = redis_servers.start_on(tmp_path / "redis", port)
    server = start_production(tmp_path / "srv", mariadb, f"redis://127.0.0.1:{port}", workers=1, pool_size=2)
    try:
        gid = group(server, "S", ["B"])
        body = {"count": 1, "total_fen": 10, "group_id": gid}
        assert _source(paid_packet(server, "S", body, fund_fen=1000)) == 0
        redis_servers.stop(process)
        assert _source(paid_packet(server, "S", body)) == 1
        with server.client("S") as client:
            metrics = client.get("/metrics").text
        assert _counter(metrics, "hongbao_redis_breaker_opens_total") == 1
        assert _counter(metrics, "hongbao_redis_fallback_sequence_total") >= 1
        assert _counter(metrics, "hongbao_redis_fallback_preorder_total") >= 1
        process = redis_servers.start_on(tmp_path / "redis", port)

        def from_redis() -> None:
            assert _source(paid_packet(server, "S", body)) == 0

        eventually(from_redis, timeout_s=10)
        assert "breaker open" in server.log() and "breaker closed" in server.log()
    finally:
        stop_server(server)
        redis_servers.stop(process)
