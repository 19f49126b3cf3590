"""Redis memory per online user of the push benchmark: a real hongbao (one worker, push state in a
throwaway redis-server) holding ``users`` idle WebSocket connections, then ``MEMORY USAGE``
(every sample: ``SAMPLES 0``) of every key, summed by kind.

The three layers of a session (docs/architecture.md section 7) are ``session:{uid}`` (hash), ``route:{sid}``
(string) and the user's share of the 16 ``online:{n}`` sets; their sum per user is compared with
the 380 bytes the session design budgets. The other kinds (the node's session index, liveness,
topics...) are listed beside it, and so is the growth of ``used_memory`` (INFO) per user.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import redis
from hongbao.bench.push.fleet import Fleet
from hongbao.bench.push.sides import HongbaoSide
from hongbao.core.adapters.redis.push import ONLINE_SHARDS

LAYERS = ("session", "route", "online")
LOGIN_TIMEOUT_S = 60.0


def _online(client: redis.Redis) -> int:
    return sum(int(client.scard(f"online:{{{n}}}")) for n in range(ONLINE_SHARDS))


def _by_kind(client: redis.Redis) -> dict[str, dict[str, int]]:
    """{kind (the key's name before the first ':'): {"keys", "bytes"}} over every key."""
    kinds: dict[str, dict[str, int]] = defaultdict(lambda: {"keys": 0, "bytes": 0})
    for key in client.scan_iter(count=1000):
        usage = client.memory_usage(key, samples=0)
        kind = kinds[bytes(key).split(b":", 1)[0].decode(errors="replace")]
        kind["keys"] += 1
        kind["bytes"] += int(usage or 0)
    return dict(kinds)


def measure(fleet: Fleet, side: HongbaoSide, redis_url: str, users: int) -> tuple[dict[str, Any], list[str]]:
    """Connect ``users`` idle clients to ``side`` (whose push state is at ``redis_url``), wait
    until Redis holds every session, and measure; (JSON values, problems)."""
    problems: list[str] = []
    with redis.Redis.from_url(redis_url, socket_timeout=10) as client:
        used_before = int(client.info("memory")["used_memory"])
        made, errors = fleet.connect(side.target, [f"red{i:06d}" for i in range(users)], side.secret)
        if made != users:
            problems.append(f"redis: {users - made} of {users} connections failed, e.g. {errors}")
        deadline = time.monotonic() + LOGIN_TIMEOUT_S
        while (online := _online(client)) < made and time.monotonic() < deadline:
            time.sleep(0.05)
        if online != users:
            problems.append(f"redis: {online} users online in Redis, expected {users}")
        used_after = int(client.info("memory")["used_memory"])
        kinds = _by_kind(client)
    fleet.close()
    per_user = {layer: round(kinds.get(layer, {}).get("bytes", 0) / max(1, users), 1) for layer in LAYERS}
    for layer in ("session", "route"):
        if kinds.get(layer, {}).get("keys") != users:
            problems.append(f"redis: {kinds.get(layer, {}).get('keys', 0)} {layer} keys, expected {users}")
    return {
        "users": users,
        "bytes_per_user": per_user,
        "three_layers_bytes_per_user": round(sum(per_user.values()), 1),
        "used_memory_delta_per_user": round((used_after - used_before) / max(1, users), 1),
        "keys_by_kind": kinds,
    }, problems
