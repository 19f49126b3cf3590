"""The lean Redis path (core/adapters/redis/lean.py): its RESP2 encoder and slot function against
redis-py's, auto-pipelining in FIFO order, errors, a real redis-server restarted, a silent one, and
cluster routing through a real slot migration (MOVED), on a standalone Redis and a 3-master cluster."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import redis.connection
import redis.crc
from hongbao.bench.services import redis_servers
from hongbao.bench.services.redis_servers import RedisTarget
from hongbao.core.adapters.redis.client import LuaScript, Pipelines, redis_client
from hongbao.core.adapters.redis.lean import LeanRedis, bulk, encode, key_slot, lean_for
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError, MovedError, ResponseError, TimeoutError

ARGS = st.lists(st.one_of(st.binary(max_size=300), st.text(max_size=100), st.integers(-(2**63), 2**64)), max_size=8)


@given(st.sampled_from(["GET", "HMGET", "EVALSHA", "XADD", "SET"]), ARGS)
def test_encoder_matches_redis_py(name: str, args: list[bytes | str | int]) -> None:
    """encode() gives byte for byte the request redis-py's pure-Python packer makes for the same command."""
    packed = redis.connection.PythonRespSerializer(
        6000, redis.connection.Encoder("utf-8", "strict", False).encode
    ).pack(name, *args)
    assert encode([name, *args]) == b"".join(packed)


@given(st.text(max_size=100), st.text(max_size=100))
def test_bulk_pieces_make_the_packed_request(key: str, field: str) -> None:
    """The grab's HMGET assembled from bulk() pieces (its fixed part encoded once) is the request
    encode() packs for the whole command."""
    pieces = b"*4\r\n" + bulk("HMGET") + bulk(key) + bulk("k") + bulk(field)
    assert pieces == encode(("HMGET", key, "k", field))


@given(st.binary(max_size=40) | st.text(alphabet="ab{}", max_size=12).map(str.encode))
def test_key_slot_matches_redis_py(key: bytes) -> None:
    """key_slot() is redis-py's slot of the key, hash tags (even empty or unclosed) included."""
    assert key_slot(key) == redis.crc.key_slot(key)


def _lean(client: Redis | RedisCluster) -> LeanRedis:
    lean = lean_for(client)
    assert lean is not None
    return lean


async def _send(lean: LeanRedis, key: str, *args: bytes | str | int) -> Any:
    future = lean.send(key, args)
    assert future is not None
    return await future


async def test_one_tick_is_one_write_in_order(redis_target: RedisTarget) -> None:
    """1000 commands of one tick get their own replies in order over one new connection per server."""
    async with redis_target.connect() as client:
        lean = _lean(client)
        replies = await asyncio.gather(*(_send(lean, "{n}c", "INCR", "{n}c") for _ in range(1000)))
        assert replies == list(range(1, 1001))
        keys = [f"k{i}" for i in range(60)]  # spread over every primary of a cluster
        assert await asyncio.gather(*(_send(lean, k, "SET", k, k) for k in keys)) == [b"OK"] * 60
        assert await asyncio.gather(*(_send(lean, k, "GET", k) for k in keys)) == [k.encode() for k in keys]
        connections = [lean._single] if lean._single is not None else list(lean._by_node.values())
        ours = {
            "{}:{:d}".format(*c._transport.get_extra_info("sockname")[:2])
            for c in connections
            if c._transport is not None
        }
        seen = {entry["addr"] for port in redis_target.ports for entry in redis_target.sync_client(port).client_list()}
        assert len(ours) == len(redis_target.ports) and ours <= seen  # one connection per server, as Redis sees them
        lean.close()


async def test_error_replies_are_redis_py_exceptions(redis_target: RedisTarget) -> None:
    """An error reply fails only its own command, as redis-py's exception; NOSCRIPT is recovered by Pipelines."""
    async with redis_target.connect() as client:
        lean, pipes = _lean(client), Pipelines(client)
        await _send(lean, "{e}s", "SET", "{e}s", "text")
        results = await asyncio.gather(
            _send(lean, "{e}s", "INCR", "{e}s"), _send(lean, "{e}s", "GET", "{e}s"), return_exceptions=True
        )
        assert isinstance(results[0], ResponseError) and "not an integer" in str(results[0])
        assert results[1] == b"text"
        script = LuaScript("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        assert await pipes.script(script, ["{e}n"], [5]) == 5
        for port in redis_target.ports:
            redis_target.cli("script", "flush", port=port)
        assert await pipes.script(script, ["{e}n"], [2]) == 7
        assert await pipes.command("{e}n", "GET", "{e}n") == b"7"
        lean.close()
        pipes.close()


async def test_reconnects_after_a_real_restart(tmp_path: Path) -> None:
    """Commands waiting when redis-server stops fail with ConnectionError; after its restart the
    next command connects again."""
    (port,) = redis_servers.free_ports(1)
    process = redis_servers.start_on(tmp_path, port)
    client = redis_client(f"redis://127.0.0.1:{port}", cluster=False)
    try:
        lean = _lean(client)
        assert await _send(lean, "a", "SET", "a", "1") == b"OK"
        blocked = lean.send("l", ("BLPOP", "l", 0))  # waits until the server goes away
        redis_servers.stop(process)
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(blocked, 10)  # type: ignore[arg-type]
        with pytest.raises(ConnectionError):
            await _send(lean, "a", "GET", "a")
        process = redis_servers.start_on(tmp_path, port)
        assert await _send(lean, "a", "GET", "a") is None  # came back empty
        assert await _send(lean, "a", "SET", "a", "2") == b"OK"
        assert await Pipelines(client).command("a", "GET", "a") == b"2"
        lean.close()
    finally:
        redis_servers.stop(process)
        await client.aclose()


async def test_a_silent_server_times_out(tmp_path: Path) -> None:
    """A stopped (SIGSTOP) redis-server fails waiting commands with TimeoutError after
    socket_timeout; resumed, it answers again."""
    (port,) = redis_servers.free_ports(1)
    process = redis_servers.start_on(tmp_path, port)
    client = redis_client(f"redis://127.0.0.1:{port}", cluster=False, socket_timeout_s=0.3)
    try:
        lean = _lean(client)
        assert await _send(lean, "a", "PING") == b"PONG"
        os.kill(process.pid, signal.SIGSTOP)
        started = asyncio.get_running_loop().time()
        with pytest.raises(TimeoutError):
            await _send(lean, "a", "PING")
        assert 0.25 <= asyncio.get_running_loop().time() - started < 5
        os.kill(process.pid, signal.SIGCONT)
        assert await _send(lean, "a", "PING") == b"PONG"
        lean.close()
    finally:
        os.kill(process.pid, signal.SIGCONT)
        redis_servers.stop(process)
        await client.aclose()


async def test_cluster_moved_after_a_real_slot_migration(redis_cluster: RedisTarget) -> None:
    """After a slot moves to another primary the lean path sees MOVED, Pipelines answers through
    redis-py, and the refreshed map routes lean again."""
    redis_cluster.flush()
    async with redis_cluster.connect() as client:
        assert isinstance(client, RedisCluster)
        lean, pipes = _lean(client), Pipelines(client)
        name = "{moving}k"
        slot = key_slot(name.encode())
        assert await pipes.command(name, "SET", name, "v") == b"OK"
        source = client.nodes_manager.slots_cache[slot][0]
        target = next(node for node in client.get_primaries() if node.name != source.name)
        _migrate(redis_cluster, slot, name, int(source.port), int(target.port))
        try:
            with pytest.raises(MovedError):
                await _send(lean, name, "GET", name)
            assert await pipes.command(name, "GET", name) == b"v"  # redis-py follows MOVED and refreshes its map
            assert client.nodes_manager.slots_cache[slot][0].name == target.name
            assert await _send(lean, name, "GET", name) == b"v"
        finally:
            _migrate(redis_cluster, slot, name, int(target.port), int(source.port))
            redis_servers.wait_cluster_ok(redis_cluster)
        lean.close()
        pipes.close()


async def test_commands_in_order_with_a_moved_one_through_redis_py(redis_cluster: RedisTarget) -> None:
    """Pipelines.commands: several commands answered in order when one key's slot has moved (that
    one through redis-py, the others lean), scripts likewise, and an error reply raised."""
    redis_cluster.flush()
    async with redis_cluster.connect() as client:
        assert isinstance(client, RedisCluster)
        pipes = Pipelines(client)
        names = ["{a}k", "{shifted}k", "{c}k"]
        for name in names:
            assert await pipes.command(name, "SET", name, name) == b"OK"
        slot = key_slot(names[1].encode())
        source = client.nodes_manager.slots_cache[slot][0]
        target = next(node for node in client.get_primaries() if node.name != source.name)
        _migrate(redis_cluster, slot, names[1], int(source.port), int(target.port))
        try:
            assert await pipes.commands([(name, ("GET", name)) for name in names]) == [n.encode() for n in names]
            echo = LuaScript("return ARGV[1]")
            assert await pipes.scripts(echo, [([name], [name]) for name in names]) == [n.encode() for n in names]
            with pytest.raises(ResponseError):
                await pipes.commands([(names[0], ("GET", names[0])), (names[2], ("INCR", names[2]))])
        finally:
            _migrate(redis_cluster, slot, names[1], int(target.port), int(source.port))
            redis_servers.wait_cluster_ok(redis_cluster)
        pipes.close()


def _migrate(cluster: RedisTarget, slot: int, name: str, source: int, target: int) -> None:
    """Move ``slot`` (holding the one key ``name``) from the primary on port ``source`` to ``target``."""
    ids = {port: cluster.cli("cluster", "myid", port=port).strip() for port in (source, target)}
    cluster.cli("cluster", "setslot", str(slot), "importing", ids[source], port=target)
    cluster.cli("cluster", "setslot", str(slot), "migrating", ids[target], port=source)
    cluster.cli("migrate", "127.0.0.1", str(target), "", "0", "5000", "keys", name, port=source)
    for port in cluster.ports:
        cluster.cli("cluster", "setslot", str(slot), "node", ids[target], port=port)
