"""The Redis SessionStore of ``hongbao.core.push_ports`` (docs/architecture.md section 7) and the keys it
shares with the NodeDirectory (``push_nodes``), on a single Redis or a Redis Cluster
through the same code (``client``).

Keys (the braces are cluster hash tags: each key's slot follows the name inside them):

- ``session:{uid}``  hash: sessionId, nodeId, loginTime, lastActiveTime (ms, UTC); TTL the
  session TTL (10 min by default), renewed by every touch.
- ``route:{sid}``    string: the node id holding session ``sid``; same TTL.
- ``online:{n}``     set of user ids, n = ``hongbao_native.online_shard(uid)`` in [0, 16).
- ``node:{node}``    string: the node's internal address (host:port); short TTL = its liveness.
- ``nodesessions:{node}`` hash sid -> uid: the sessions a node holds, for the sweeper.
- ``nodes``          set of node ids that may still hold sessions (the sweeper's work list).

These keys live in different slots, so login is one NON-transactional pipeline of single-slot,
idempotent commands (never MULTI or a script across them: CROSSSLOT on a cluster), and the only
scripts (compare-and-delete, conditional touch) each touch ONE key, ``session:{uid}``.

Tolerant reads: unknown hash fields are ignored; a session hash missing a field or holding one
that does not parse is logged and treated as "no usable session", and the key is left alone
(its TTL or the next login deals with it) -- never deleted because of its content.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Sequence
from typing import Any

from hongbao.core.adapters.redis.client import LuaScript, Pipelines, RedisPipeline, text
from hongbao.core.adapters.redis.lean import Arg
from hongbao.core.push_ports import Route
from hongbao_native import online_shard

log = logging.getLogger("hongbao.redis_push")

ONLINE_SHARDS = 16
NODES_KEY = "nodes"
SWEEP_BATCH = 500
#: How long a node's liveness read by ``lookup`` is reused (seconds); well under the liveness TTL.
LIVENESS_CACHE_S = 1.0

#: 1: deleted (it named ARGV[1]); 0: it names another session (or has no sessionId: left alone); -1: no key.
COMPARE_AND_DELETE = LuaScript("""
local sid = redis.call('HGET', KEYS[1], 'sessionId')
if sid == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end
if sid or redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
return -1
""")
#: Refresh lastActiveTime (ARGV[2], ms) and the TTL (ARGV[3], ms) if the key names session ARGV[1]
#: (-> 1); leave a newer session alone (-> 0); -1 if there is no key (Redis lost it, a sweep took
#: this node for dead, or a logout overtook the refresh: the caller decides, see ``restore``).
TOUCH = LuaScript("""
local sid = redis.call('HGET', KEYS[1], 'sessionId')
if sid == ARGV[1] then
  redis.call('HSET', KEYS[1], 'lastActiveTime', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
if sid or redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
return -1
""")
#: Write session ARGV[1] of node ARGV[2], logged in at ARGV[5] ms, active at ARGV[3] ms, TTL ARGV[4]
#: ms, unless the key holds a session logged in since (a newer one: left alone) -> 1 written, 0 not.
#: One logged in before is an older session a Redis restart from a dump brought back: replaced.
RESTORE = LuaScript("""
local login = tonumber(redis.call('HGET', KEYS[1], 'loginTime') or '')
if login and login >= tonumber(ARGV[5]) then return 0 end
redis.call('HSET', KEYS[1], 'sessionId', ARGV[1], 'nodeId', ARGV[2], 'loginTime', ARGV[5], 'lastActiveTime', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
""")
SCRIPTS = (COMPARE_AND_DELETE, TOUCH, RESTORE)


def session_key(uid: str) -> str:
    """``session:{uid}``: the user's current session (hash)."""
    return f"session:{{{uid}}}"


def route_key(sid: str) -> str:
    """``route:{sid}``: the node holding session ``sid``."""
    return f"route:{{{sid}}}"


def online_key(uid: str) -> str:
    """``online:{n}``: the online set holding ``uid``."""
    return f"online:{{{online_shard(uid)}}}"


def node_key(node: str) -> str:
    """``node:{node}``: the node's liveness (its internal address, with a short TTL)."""
    return f"node:{{{node}}}"


def node_sessions_key(node: str) -> str:
    """``nodesessions:{node}``: sid -> uid of every session the node holds."""
    return f"nodesessions:{{{node}}}"


class RedisSessionStore:
    """SessionStore on Redis: ``session:{uid}``, ``route:{sid}``, ``online:{n}`` (see the module);
    a session not touched for ``ttl_s`` seconds expires (and reads as offline)."""

    __slots__ = ("_alive", "_pipes", "_ttl_ms")

    def __init__(self, pipes: Pipelines, ttl_s: float) -> None:
        self._pipes = pipes
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._alive: dict[str, tuple[float, bool]] = {}  # node -> (monotonic deadline, alive)

    async def login(self, uid: str, sid: str, node: str, now_ms: int) -> Route | None:
        """One tick of lean commands: read the old session, write ``session:{uid}`` (with the
        TTL), ``route:{sid}``, the online entry and the node's session index. Returns the replaced
        session's Route (None if there was none, or it was ``sid`` itself: a retried login)."""
        skey, command = session_key(uid), self._pipes.command
        old_sid, old_node = (
            await asyncio.gather(
                command(skey, "HMGET", skey, "sessionId", "nodeId"),
                command(
                    skey, "HSET", skey, "sessionId", sid, "nodeId", node, "loginTime", now_ms, "lastActiveTime", now_ms
                ),
                command(skey, "PEXPIRE", skey, self._ttl_ms),
                *self._around(uid, sid, node),
            )
        )[0]
        if old_sid is None or old_node is None or text(old_sid) == sid:
            return None
        return Route(text(old_node), text(old_sid))

    async def touch(self, sessions: Sequence[tuple[str, str]], now_ms: int) -> list[tuple[str, str]]:
        """One tick of lean commands: for each (uid, sid) still current, lastActiveTime = ``now_ms``
        and the session's TTL renewed (a script on ``session:{uid}`` alone), the route's TTL
        renewed; one replaced by a newer session is left alone. Returns the pairs whose key is
        gone, unwritten: a refresh that a logout overtook must not bring its session back."""
        if not sessions:
            return []
        calls: list[tuple[str | None, Sequence[Arg]]] = []
        for uid, sid in sessions:
            skey, rkey = session_key(uid), route_key(sid)
            calls.append((skey, TOUCH.command([skey], [sid, now_ms, self._ttl_ms])))
            calls.append((rkey, ("PEXPIRE", rkey, self._ttl_ms)))
        verdicts = (await self._pipes.commands(calls, SCRIPTS))[::2]
        return [pair for pair, verdict in zip(sessions, verdicts, strict=True) if verdict == -1]

    async def restore(self, sessions: Sequence[tuple[str, str, int]], node: str, now_ms: int) -> None:
        """Write back the (uid, sid, login ms) sessions of ``node`` whose ``session:{uid}`` is gone
        (a Redis restart, a sweep that took the node for dead) or holds a session logged in before
        (an older one, from a dump), with their route, online and index entries (a second
        pipeline, for those written); a session logged in since is left alone."""
        if not sessions:
            return

        def build(pipe: RedisPipeline) -> None:
            for uid, sid, login_ms in sessions:
                RESTORE.queue(pipe, [session_key(uid)], [sid, node, now_ms, self._ttl_ms, login_ms])

        written = [
            (uid, sid)
            for (uid, sid, _), verdict in zip(sessions, await self._pipes.run(build, SCRIPTS), strict=True)
            if verdict == 1
        ]

        if written:
            log.warning("%d session(s) of node %s were lost in Redis; written back", len(written), node)
            await asyncio.gather(*(write for uid, sid in written for write in self._around(uid, sid, node)))

    def _around(self, uid: str, sid: str, node: str) -> list[Awaitable[Any]]:
        """The writes of the keys around a session (lean commands): its route, online entry and
        index entry."""
        command, route, online, index = self._pipes.command, route_key(sid), online_key(uid), node_sessions_key(node)
        return [
            command(route, "SET", route, node, "PX", self._ttl_ms),
            command(online, "SADD", online, uid),
            command(index, "HSET", index, sid, uid),
        ]

    async def logout(self, uid: str, sid: str, node: str) -> bool:
        """Compare-and-delete ``session:{uid}`` (only if it still names ``sid``), delete
        ``route:{sid}`` and the index entry; then drop the online entry unless a newer session
        holds the user. True if the session key was removed."""
        verdict = await remove_sessions(self._pipes, node, [(sid, uid)])
        return verdict[0] == 1

    async def lookup(self, uid: str) -> Route | None:
        """The route named by ``session:{uid}``, or None when there is none, it is unusable
        (logged) or its node's liveness expired."""
        return (await self.lookup_many([uid])).get(uid)

    async def lookup_many(self, uids: Sequence[str]) -> dict[str, Route]:
        """``lookup`` of each of ``uids``: their sessions read together (the lean path), then the
        liveness of their nodes (cached)."""
        keys = [session_key(uid) for uid in uids]
        found = await self._pipes.commands([(key, ("HMGET", key, "sessionId", "nodeId")) for key in keys])
        routes = {}
        for uid, (sid, node) in zip(uids, found, strict=True):
            route = self._route(uid, sid, node)
            if route is not None and await self._node_alive(route.node):
                routes[uid] = route
        return routes

    def _route(self, uid: str, sid: bytes | None, node: bytes | None) -> Route | None:
        """The route of a session hash's fields, None when it has none or is unusable (logged)."""
        if sid is None or node is None:
            if sid is not None or node is not None:
                log.warning(
                    "session of user %s lacks %s; treated as offline, key left alone",
                    uid,
                    "nodeId" if node is None else "sessionId",
                )
            return None
        return Route(text(node), text(sid))

    async def online_count(self) -> int:
        """Members of the 16 online sets (one pipeline of SCARD)."""

        def build(pipe: RedisPipeline) -> None:
            for n in range(ONLINE_SHARDS):
                pipe.scard(f"online:{{{n}}}")

        return sum(await self._pipes.run(build))

    async def _node_alive(self, node: str) -> bool:
        now = time.monotonic()
        cached = self._alive.get(node)
        if cached is not None and cached[0] > now:
            return cached[1]
        key = node_key(node)
        alive = bool(await self._pipes.command(key, "EXISTS", key))
        if len(self._alive) > 1024:
            self._alive.clear()
        self._alive[node] = (now + LIVENESS_CACHE_S, alive)
        return alive


async def remove_sessions(pipes: Pipelines, node: str, pairs: Sequence[tuple[str, str]]) -> list[int]:
    """Remove the (sid, uid) sessions of ``node``: compare-and-delete of each ``session:{uid}``,
    its route and index entry (one pipeline), then the online entries of the users no newer
    session holds (a second one). Returns the verdicts: 1 removed, 0 a newer session, -1 gone."""

    def remove(pipe: RedisPipeline) -> None:
        for sid, uid in pairs:
            COMPARE_AND_DELETE.queue(pipe, [session_key(uid)], [sid])
            pipe.delete(route_key(sid))
        pipe.hdel(node_sessions_key(node), *(sid for sid, _ in pairs))

    verdicts = [int(reply) for reply in (await pipes.run(remove, SCRIPTS))[:-1:2]]
    gone = [
        uid for (_, uid), verdict in zip(pairs, verdicts, strict=True) if verdict != 0
    ]  # 0: a newer session holds uid

    def offline(pipe: RedisPipeline) -> None:
        for uid in gone:
            pipe.srem(online_key(uid), uid)

    if gone:
        await pipes.run(offline)
    return verdicts
