"""The Redis SessionStore and NodeDirectory against a real standalone Redis and a real 3-master
cluster: login layers (P-17), replacement, compare-and-delete (P-09), touch, tolerant reads, the
sweep of a dead node (P-07 at the store level)."""

from __future__ import annotations

import asyncio

import pytest
from hongbao.bench.services.redis_servers import RedisTarget
from hongbao.core.adapters.redis.client import Pipelines, RedisClient
from hongbao.core.adapters.redis.push import (
    TOUCH,
    RedisSessionStore,
    node_sessions_key,
    online_key,
    route_key,
    session_key,
)
from hongbao.core.adapters.redis.push_nodes import RedisNodeDirectory
from hongbao.core.push_ports import Route

T0 = 1_700_000_000_000


async def test_login_writes_three_layers(redis_target: RedisTarget) -> None:
    """P-17: one login pipeline writes session, route, online entry and node index, no CROSSSLOT."""
    async with redis_target.connect() as client:
        store = RedisSessionStore(Pipelines(client), 600)
        assert await store.login("u1", "s1", "a/1", T0) is None
        session = await client.hgetall(session_key("u1"))
        assert session == {
            b"sessionId": b"s1",
            b"nodeId": b"a/1",
            b"loginTime": str(T0).encode(),
            b"lastActiveTime": str(T0).encode(),
        }
        assert 590 <= await client.ttl(session_key("u1")) <= 600
        assert await client.get(route_key("s1")) == b"a/1"
        assert 590 <= await client.ttl(route_key("s1")) <= 600
        assert await client.sismember(online_key("u1"), "u1")
        assert await client.hgetall(node_sessions_key("a/1")) == {b"s1": b"u1"}
        assert await store.online_count() == 1
        if redis_target.cluster:
            slots = {
                int(redis_target.cli("cluster", "keyslot", key))
                for key in (session_key("u1"), route_key("s1"), online_key("u1"), node_sessions_key("a/1"))
            }
            assert len(slots) == 4


async def test_login_returns_replaced_session(redis_target: RedisTarget) -> None:
    """A second login of the same user returns the older session's route; a retried login returns None."""
    async with redis_target.connect() as client:
        store, nodes = RedisSessionStore(Pipelines(client), 600), RedisNodeDirectory(Pipelines(client))
        await nodes.heartbeat("b/2", "127.0.0.1:9002", 30)
        await store.login("u1", "s1", "a/1", T0)
        assert await store.login("u1", "s2", "b/2", T0 + 5) == Route("a/1", "s1")
        assert await store.login("u1", "s2", "b/2", T0 + 6) is None
        assert await store.lookup("u1") == Route("b/2", "s2")


async def test_late_cleanup_of_old_session_keeps_new(redis_target: RedisTarget) -> None:
    """P-09: the old node's late logout of sid1 leaves sid2's session, route and online entry intact."""
    async with redis_target.connect() as client:
        store, nodes = RedisSessionStore(Pipelines(client), 600), RedisNodeDirectory(Pipelines(client))
        await nodes.heartbeat("b/2", "127.0.0.1:9002", 30)
        await store.login("u1", "s1", "a/1", T0)
        await store.login("u1", "s2", "b/2", T0 + 1000)
        assert await store.logout("u1", "s1", "a/1") is False
        assert (await client.hget(session_key("u1"), "sessionId")) == b"s2"
        assert await client.get(route_key("s2")) == b"b/2"
        assert await client.exists(route_key("s1")) == 0
        assert await client.sismember(online_key("u1"), "u1")
        assert await client.hgetall(node_sessions_key("a/1")) == {}
        assert await store.lookup("u1") == Route("b/2", "s2")


async def test_logout_removes_every_layer(redis_target: RedisTarget) -> None:
    """Logout of the current session removes session, route, online entry and index entry."""
    async with redis_target.connect() as client:
        store = RedisSessionStore(Pipelines(client), 600)
        await store.login("u1", "s1", "a/1", T0)
        assert await store.logout("u1", "s1", "a/1") is True
        assert await store.logout("u1", "s1", "a/1") is False
        for key in (session_key("u1"), route_key("s1"), node_sessions_key("a/1")):
            assert await client.exists(key) == 0
        assert await store.online_count() == 0


async def test_touch_refreshes_only_the_current_session(redis_target: RedisTarget) -> None:
    """Touch renews lastActiveTime and TTLs of the current session and never writes over a newer one."""
    async with redis_target.connect() as client:
        store = RedisSessionStore(Pipelines(client), 600)
        await store.login("u1", "s1", "a/1", T0)
        await client.expire(session_key("u1"), 5)
        await client.expire(route_key("s1"), 5)
        await store.touch([("u1", "s1"), ("u1", "stale")], T0 + 30_000)
        assert await client.hgetall(session_key("u1")) == {
            b"sessionId": b"s1",
            b"nodeId": b"a/1",
            b"loginTime": str(T0).encode(),
            b"lastActiveTime": str(T0 + 30_000).encode(),
        }
        assert await client.ttl(session_key("u1")) > 500
        assert await client.ttl(route_key("s1")) > 500
        assert await client.exists(route_key("stale")) == 0


async def test_touch_takes_the_lean_path(redis_target: RedisTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    """Touch (every session with inbound frames, once a second) is lean commands: it works with
    redis-py's pipeline path refused, once its script is loaded."""
    async with redis_target.connect() as client:
        store = RedisSessionStore(Pipelines(client), 600)
        await store.login("u1", "s1", "a/1", T0)
        await client.script_load(TOUCH.text)

        async def refused(*_: object, **__: object) -> None:
            raise AssertionError("redis-py's pipeline path")

        monkeypatch.setattr(Pipelines, "run", refused)
        assert await store.touch([("u1", "s1"), ("u2", "s2")], T0 + 1_000) == [("u2", "s2")]
        assert await client.hget(session_key("u1"), "lastActiveTime") == str(T0 + 1_000).encode()


async def test_touch_reports_a_lost_session_and_restore_writes_it_back(redis_target: RedisTarget) -> None:
    """After Redis lost them (a restart, a flush) touch writes nothing and names the session;
    restore writes its session, route, online and index entries back."""
    async with redis_target.connect() as client:
        store = RedisSessionStore(Pipelines(client), 600)
        await store.login("u1", "s1", "a/1", T0)
        redis_target.flush()
        assert await store.touch([("u1", "s1")], T0 + 30_000) == [("u1", "s1")]
        assert await client.exists(session_key("u1")) == 0
        await store.restore([("u1", "s1", T0)], "a/1", T0 + 30_000)
        assert await client.hmget(session_key("u1"), ["sessionId", "nodeId"]) == [b"s1", b"a/1"]
        assert 500 < await client.ttl(session_key("u1")) <= 600
        assert await client.get(route_key("s1")) == b"a/1"
        assert await store.online_count() == 1
        assert await client.hgetall(node_sessions_key("a/1")) == {b"s1": b"u1"}


async def test_touch_overtaken_by_logout_leaves_no_session(redis_target: RedisTarget) -> None:
    """A refresh that runs after its session's logout (they went on two connections) brings
    nothing back: no session, route or online entry; restore leaves a newer session alone."""
    async with redis_target.connect() as client:
        store = RedisSessionStore(Pipelines(client), 600)
        await store.login("u1", "s1", "a/1", T0)
        assert await store.logout("u1", "s1", "a/1") is True
        assert await store.touch([("u1", "s1")], T0 + 1) == [("u1", "s1")]
        assert (await client.exists(session_key("u1"), route_key("s1")), await store.online_count()) == (0, 0)
        await store.login("u1", "s2", "b/1", T0 + 2)
        await store.restore([("u1", "s1", T0)], "a/1", T0 + 3)
        assert await client.hmget(session_key("u1"), ["sessionId", "nodeId"]) == [b"s2", b"b/1"]
        assert await client.exists(route_key("s1")) == 0


async def test_restore_replaces_an_older_session_a_dump_brought_back(redis_target: RedisTarget) -> None:
    """Redis restarted from an older dump holds u1's earlier session (s0 on a dead node): restore of
    the live s1 replaces it, so pushes find s1; a session logged in after s1 would have stayed."""
    async with redis_target.connect() as client:
        store = RedisSessionStore(Pipelines(client), 600)
        await store.login("u1", "s0", "dead/1", T0)  # what the dump holds
        await store.restore([("u1", "s1", T0 + 10)], "a/1", T0 + 30_000)
        assert await client.hmget(session_key("u1"), ["sessionId", "nodeId"]) == [b"s1", b"a/1"]
        assert await client.get(route_key("s1")) == b"a/1"
        assert await store.touch([("u1", "s1")], T0 + 30_001) == []  # current again


async def test_tolerant_session_reads(redis_target: RedisTarget) -> None:
    """Unknown fields are ignored, a bad field is left alone, an unusable session is never deleted."""
    async with redis_target.connect() as client:
        store, nodes = RedisSessionStore(Pipelines(client), 600), RedisNodeDirectory(Pipelines(client))
        await nodes.heartbeat("a/1", "127.0.0.1:9001", 30)
        await client.hset(
            session_key("u1"),
            mapping={"sessionId": "s1", "nodeId": "a/1", "loginTime": "not-a-time", "future": "{json?"},
        )
        assert await store.lookup("u1") == Route("a/1", "s1")
        await client.hset(session_key("u2"), mapping={"sessionId": "s2", "lastActiveTime": "x"})
        assert await store.lookup("u2") is None
        assert await store.logout("u2", "other", "a/1") is False
        await client.hdel(session_key("u2"), "sessionId")
        assert await store.logout("u2", "s2", "a/1") is False
        assert await client.hgetall(session_key("u2")) == {b"lastActiveTime": b"x"}
        assert await client.hget(session_key("u1"), "loginTime") == b"not-a-time"


async def test_dead_node_reads_offline(redis_target: RedisTarget) -> None:
    """A session on a node with no liveness key reads as offline; the node's address comes and goes."""
    async with redis_target.connect() as client:
        nodes = RedisNodeDirectory(Pipelines(client))
        await RedisSessionStore(Pipelines(client), 600).login("u1", "s1", "a/1", T0)
        assert await RedisSessionStore(Pipelines(client), 600).lookup("u1") is None
        await nodes.heartbeat("a/1", "127.0.0.1:9001", 30)
        assert await nodes.address("a/1") == "127.0.0.1:9001"
        assert await RedisSessionStore(Pipelines(client), 600).lookup("u1") == Route("a/1", "s1")
        await nodes.leave("a/1")
        assert await nodes.address("a/1") is None
        assert await RedisSessionStore(Pipelines(client), 600).lookup("u1") is None


async def test_sweep_removes_a_dead_nodes_sessions(redis_target: RedisTarget) -> None:
    """P-07: once A's liveness expires, a sweep from B removes A's sessions, routes, online entries."""
    async with redis_target.connect() as client:
        store, nodes = RedisSessionStore(Pipelines(client), 600), RedisNodeDirectory(Pipelines(client))
        await nodes.heartbeat("b/2", "127.0.0.1:9002", 30)
        for i in range(60):
            await store.login(f"u{i}", f"s{i}", "a/1", T0)
        await store.login("u0", "t0", "b/2", T0 + 1)  # u0 moved to B before A died
        await nodes.heartbeat("a/1", "127.0.0.1:9001", 1.0)
        assert await nodes.sweep("b/2") == 0  # A still alive
        while await nodes.address("a/1") is not None:
            await asyncio.sleep(0.05)
        assert await nodes.sweep("b/2") == 59
        assert await nodes.sweep("b/2") == 0
        assert await store.online_count() == 1
        assert await store.lookup("u0") == Route("b/2", "t0")
        for i in range(1, 60):
            assert await client.exists(session_key(f"u{i}")) == 0
            assert await client.exists(route_key(f"s{i}")) == 0
        assert await client.exists(node_sessions_key("a/1")) == 0
        assert await client.smembers("nodes") == {b"b/2"}


async def test_sweep_prunes_sessions_whose_route_expired(redis_target: RedisTarget) -> None:
    """A live node's sweep removes the online and index entries of its sessions whose route expired
    (a logout that never reached Redis); live sessions stay."""
    async with redis_target.connect() as client:
        store, nodes = RedisSessionStore(Pipelines(client), 600), RedisNodeDirectory(Pipelines(client))
        await nodes.heartbeat("a/1", "127.0.0.1:9001", 30)
        await store.login("u1", "s1", "a/1", T0)
        await store.login("u2", "s2", "a/1", T0)
        await client.delete(route_key("s1"))
        await client.delete(session_key("u1"))  # both expired: the node never logged s1 out
        assert await nodes.sweep("a/1") == 0  # nothing held the session key any more
        assert await store.online_count() == 1
        assert await client.hgetall(node_sessions_key("a/1")) == {b"s2": b"u2"}
        assert await store.lookup("u2") == Route("a/1", "s2")


async def test_scripts_survive_script_flush(redis_target: RedisTarget) -> None:
    """After SCRIPT FLUSH (as after a restart) touch and logout load their scripts again and work."""
    async with redis_target.connect() as client:
        store = RedisSessionStore(Pipelines(client), 600)
        await store.login("u1", "s1", "a/1", T0)
        for port in redis_target.ports:
            redis_target.cli("script", "flush", port=port)
        await store.touch([("u1", "s1")], T0 + 1)
        assert await client.hget(session_key("u1"), "lastActiveTime") == str(T0 + 1).encode()
        for port in redis_target.ports:
            redis_target.cli("script", "flush", port=port)
        assert await store.logout("u1", "s1", "a/1") is True


async def test_memory_per_online_user_within_budget(redis_standalone: RedisTarget) -> None:
    """MEMORY USAGE of session hash + route + online-set share stays within DESIGN's 380 bytes a user."""
    redis_standalone.flush()
    users = [f"user{i:07d}" for i in range(2000)]
    sids = [f"{i:016d}" for i in range(2000)]  # the handshake's sid: 16 url-safe characters
    async with redis_standalone.connect() as client:
        store = RedisSessionStore(Pipelines(client), 600)
        await asyncio.gather(
            *(store.login(uid, sid, "web-01/123456", T0) for uid, sid in zip(users, sids, strict=True))
        )
        session = sum([await _usage(client, session_key(uid)) for uid in users[:200]]) / 200
        route = sum([await _usage(client, route_key(sid)) for sid in sids[:200]]) / 200
        online = sum([await _usage(client, f"online:{{{n}}}") for n in range(16)]) / len(users)
    assert 100 < session + route + online <= 380, (session, route, online)


async def _usage(client: RedisClient, key: str) -> int:
    """MEMORY USAGE of ``key`` in bytes (all of it: SAMPLES 0)."""
    value = await client.memory_usage(key, samples=0)
    assert value is not None, key
    return int(value)
