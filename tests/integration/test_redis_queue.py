"""RedisQueue (the Queue port on Streams with a consumer group) against a real standalone Redis
and a real 3-master cluster: publish, claim, leases and XAUTOCLAIM, ack, depth."""

from __future__ import annotations

import asyncio

from hongbao.bench.services.redis_servers import RedisTarget
from hongbao.core.adapters.redis.client import Pipelines
from hongbao.core.adapters.redis.queue import CLAIM, GROUP, PUBLISH, RedisQueue, entry_id, message_id, queue_key
from hypothesis import given
from hypothesis import strategies as st


async def publish_credits(queue: RedisQueue) -> None:
    """Publish three credit messages."""
    await queue.publish([("credit", b"c1"), ("credit", b"c2"), ("credit", b"c3")])


async def test_publish_claim_ack(redis_target: RedisTarget) -> None:
    """Messages come back in order, once while leased; an ack removes one; depth counts the rest."""
    async with redis_target.connect() as client:
        queue = RedisQueue(Pipelines(client), "a/1")
        await queue.publish([("credit", b"m1"), ("credit", b"m2"), ("lists", b"l1")])
        assert (await queue.depth("credit"), await queue.depth("lists"), await queue.depth("none")) == (2, 1, 0)
        claimed = await queue.claim("credit", 10, 30_000, 0)
        assert [body for _, body in claimed] == [b"m1", b"m2"] and claimed[0][0] < claimed[1][0]
        assert await queue.claim("credit", 10, 30_000, 0) == []
        await queue.ack("credit", claimed[0][0])
        await queue.ack("credit", claimed[0][0])
        assert await queue.depth("credit") == 1
        assert [body for _, body in await queue.claim("lists", 10, 30_000, 0)] == [b"l1"]


async def test_claim_respects_count(redis_target: RedisTarget) -> None:
    """A claim takes at most ``count`` messages; the next claim takes the following ones."""
    async with redis_target.connect() as client:
        queue = RedisQueue(Pipelines(client), "a/1")
        await queue.publish([("s", str(i).encode()) for i in range(5)])
        sizes = [len(await queue.claim("s", 2, 30_000, 0)) for _ in range(4)]
        assert sizes == [2, 2, 1, 0]


async def test_stale_leases_are_taken_over(redis_target: RedisTarget) -> None:
    """Entries a dead consumer leased come back to another after the lease (XAUTOCLAIM), never before."""
    async with redis_target.connect() as client:
        dead, alive = RedisQueue(Pipelines(client), "a/1"), RedisQueue(Pipelines(client), "b/2")
        await publish_credits(dead)
        first = await dead.claim("credit", 10, 200, 0)
        assert len(first) == 3
        assert await alive.claim("credit", 10, 200, 0) == []
        await asyncio.sleep(0.3)
        taken = await alive.claim("credit", 10, 200, 0)
        assert taken == first
        for message, _ in taken:
            await alive.ack("credit", message)
        assert await alive.depth("credit") == 0
        await asyncio.sleep(0.3)
        assert await dead.claim("credit", 10, 200, 0) == []


async def test_group_comes_back_after_a_flush(redis_target: RedisTarget) -> None:
    """A claim on a never-used stream is empty and writes nothing; after a flush the group is remade."""
    async with redis_target.connect() as client:
        queue = RedisQueue(Pipelines(client), "a/1")
        assert await queue.claim("credit", 10, 1000, 0) == []
        assert await client.exists(queue_key("credit")) == 0
        await publish_credits(queue)
        assert len(await queue.claim("credit", 10, 1000, 0)) == 3
        redis_target.flush()
        await queue.publish([("credit", b"again")])
        assert [body for _, body in await queue.claim("credit", 10, 1000, 0)] == [b"again"]


async def test_retried_publish_queues_once(redis_target: RedisTarget) -> None:
    """A publish sent again with its nonce (a retry after a lost reply) adds nothing; all or none."""
    async with redis_target.connect() as client:
        pipes = Pipelines(client)
        keys = ["{queue}:nonce:n1", queue_key("credit"), queue_key("lists")]
        assert await pipes.script(PUBLISH, keys, [10_000, b"c", b"l"]) == 2
        assert await pipes.script(PUBLISH, keys, [10_000, b"c", b"l"]) == 0
        queue = RedisQueue(pipes, "a/1")
        assert (await queue.depth("credit"), await queue.depth("lists")) == (1, 1)
        assert 0 < await client.pttl("{queue}:nonce:n1") <= 10_000


async def test_retried_claim_returns_its_entries(redis_target: RedisTarget) -> None:
    """A claim sent again with its nonce (a retry after a lost reply) returns the entries the first
    run leased, less those acked meanwhile, and leases nothing new; another claim gets the rest."""
    async with redis_target.connect() as client:
        pipes = Pipelines(client)
        queue = RedisQueue(pipes, "a/1")
        await publish_credits(queue)
        keys, args = [queue_key("credit"), "{queue}:nonce:k1"], [GROUP, "a/1", 2, 30_000, 10_000]
        first = await pipes.script(CLAIM, keys, args)
        assert [fields for _, fields in first] == [[b"b", b"c1"], [b"b", b"c2"]]
        assert await pipes.script(CLAIM, keys, args) == first
        await queue.ack("credit", message_id(first[0][0]))
        assert await pipes.script(CLAIM, keys, args) == first[1:]
        assert 0 < await client.pttl("{queue}:nonce:k1") <= 10_000
        assert [body for _, body in await queue.claim("credit", 10, 30_000, 0)] == [b"c3"]


def test_queues_share_one_slot(redis_cluster: RedisTarget) -> None:
    """Every queue key (and a publish's nonce) hashes to one cluster slot, so a publish to several
    streams is one script."""
    slots = {
        redis_cluster.cli("cluster", "keyslot", key)
        for key in (*map(queue_key, ("credit", "lists", "push_group")), "{queue}:nonce:x")
    }
    assert len(slots) == 1


@given(st.integers(0, 2**44), st.integers(0, 2**20 - 1))
def test_message_ids_round_trip(ms: int, seq: int) -> None:
    """Entry ids map to ints that keep their order and map back."""
    value = message_id(f"{ms}-{seq}")
    assert entry_id(value) == f"{ms}-{seq}"
    assert value == ms * 2**20 + seq
