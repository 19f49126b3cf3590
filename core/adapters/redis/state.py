"""Redis in front of MySQL on the send path of the production backend (docs/architecture.md sections 4, 6, 10):
the order-id sequence (INCR, source 0) and pre-orders (a hash with a TTL), each falling back to
its MySQL adapter while Redis is down ("Redis down at send: pre-order in DB, fallback id
generator"). One :class:`~hongbao.core.breaker.Breaker` per Redis client makes a dead Redis cost
microseconds per call; every fallback bumps ``redis_fallback_sequence`` / ``redis_fallback_preorder``
in ``counts`` (the worker's metrics events).

Keys (one code path for a single Redis and a Redis Cluster; every script touches one key, hash
tagged, so nothing is ever CROSSSLOT): ``seq:{<region>:<yymmdd>}``, ``preorder:{<order_id>}``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from hongbao.core import errors
from hongbao.core.adapters.mysql.db import MysqlShards
from hongbao.core.adapters.redis.client import LuaScript, Pipelines
from hongbao.core.breaker import Breaker, BreakerOpen, tally
from hongbao.core.loop_lag import LoopLag
from hongbao.core.ports import Flags, PreOrderStore, SequenceSource
from redis.exceptions import ClusterError, ConnectionError, RedisClusterException, TimeoutError

#: The errors that mean "Redis is down" (a cluster's lost slots included); others are bugs and propagate.
REDIS_DOWN: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, ClusterError, RedisClusterException)
REDIS_SOURCE = 0  # docs/architecture.md section 4: source 0 = Redis INCR
HIGH_WATER_STEP = 10_000  # ids reserved in the DB per high-water move
GRACE_MS = 60_000  # a pending pre-order's key outlives its pay_by by this much (its state decides, not the TTL)
PAYING_TTL_MS = 24 * 3600 * 1000  # a claimed pre-order's key lives this long (a retried pay finds it)
T = TypeVar("T")


def redis_breaker(
    counts: dict[str, int], *, name: str = "redis", cooldown_s: float = 1.0, lag: LoopLag | None = None
) -> Breaker:
    """The breaker of one Redis client (``name``: counter ``<name>_breaker_opens``); ``lag``: the
    worker's loop lag, so that a reply's bound passed while the loop lagged does not count (Breaker)."""
    return Breaker(name, REDIS_DOWN, counts, cooldown_s=cooldown_s, lag=lag, timeouts=(TimeoutError,))


class _RedisFirst:
    __slots__ = ("_pipes", "_breaker", "_counts", "_counter")

    def __init__(self, pipes: Pipelines, breaker: Breaker, counts: dict[str, int], counter: str) -> None:
        self._pipes, self._breaker, self._counts, self._counter = pipes, breaker, counts, counter

    async def _redis(self, op: Callable[[], Awaitable[T]]) -> T:
        """``op`` through the breaker; raises BreakerOpen (counted as a fallback) when Redis is down."""
        try:
            return await self._breaker.call(op)
        except BreakerOpen:
            tally(self._counts, self._counter)
            raise


# KEYS the sequence, its run marker (same slot). The sequence counts only on the Redis process that
# was seeded (the marker holds its run_id, INFO server): on another process -- a restart, maybe from
# an older dump that brought the sequence back behind ids already handed out -- it answers nil and
# the caller seeds it again from the database's mark.
_NEXT = LuaScript("""
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
if redis.call('GET', KEYS[2]) ~= run or redis.call('EXISTS', KEYS[1]) == 0 then return false end
return redis.call('INCR', KEYS[1])
""")
# KEYS the sequence, its run marker. ARGV the seed: the sequence goes to at least the seed (never
# back), and the marker names this process.
_SEED = LuaScript("""
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
local v = tonumber(redis.call('GET', KEYS[1]) or '')
if not v or v < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
redis.call('SET', KEYS[2], run)
return 1
""")


class RedisSequenceSource(_RedisFirst):
    """SequenceSource: (0, INCR of ``seq:{region:yymmdd}``), every number below a high-water mark
    already stored in db_00.t_meta (moved ahead by HIGH_WATER_STEP before ids past it go out). The
    key counts only on the Redis process that seeded it (``seq:{region:yymmdd}:run`` holds its
    run_id); a missing key, or one on another process (a restart, from an older dump or none), is
    seeded again from that mark, never lowered: a Redis restart never reissues an id.
    While Redis is down: ``fallback`` (the DB block allocator, source 1; the spaces never collide)."""

    __slots__ = ("_shards", "_fallback", "_reserved", "_lock")

    def __init__(
        self, pipes: Pipelines, breaker: Breaker, shards: MysqlShards, fallback: SequenceSource, counts: dict[str, int]
    ) -> None:
        super().__init__(pipes, breaker, counts, "redis_fallback_sequence")
        self._shards, self._fallback = shards, fallback
        self._reserved: dict[str, int] = {}  # key -> a high-water mark already stored in the DB
        self._lock = asyncio.Lock()

    async def next(self, region: int, yymmdd: int) -> tuple[int, int]:
        """The next (source, sequence) for the region and day."""
        key = f"seq:{{{region}:{yymmdd:06}}}"
        try:
            sequence = await self._redis(lambda: self._incr(key))
        except BreakerOpen:
            return await self._fallback.next(region, yymmdd)
        if sequence >= self._reserved.get(key, 0):
            async with self._lock:
                if sequence >= self._reserved.get(key, 0):
                    self._reserved[key] = await self._move_high_water(key, sequence + HIGH_WATER_STEP)
        return REDIS_SOURCE, sequence

    async def _incr(self, key: str) -> int:
        keys = [key, f"{key}:run"]
        while (sequence := await self._pipes.script(_NEXT, keys, [])) is None:
            seed = await self._move_high_water(key, 0)  # fresh from the DB: every id handed out is below it
            await self._pipes.script(_SEED, keys, [seed])
        return int(sequence)

    async def _move_high_water(self, key: str, at_least: int) -> int:
        """Raise the stored mark of ``key`` to at least ``at_least``; returns the stored mark."""
        name = f"seq_hw:{key}"
        await self._shards.execute(
            0,
            "INSERT INTO t_meta (name, value) VALUES (%s, %s) ON DUPLICATE KEY UPDATE "
            "value = GREATEST(CAST(value AS UNSIGNED), CAST(VALUES(value) AS UNSIGNED))",
            (name, str(at_least)),
        )
        row = await self._shards.fetchone(0, "SELECT value FROM t_meta WHERE name = %s", (name,))
        return int(row[0]) if row is not None else at_least


# Hash fields: b body, s state (pending | paying), e expires_at (ms). Replies: the body; "" when present
# but refused (lapsed, cancelled...); nil when absent (then the DB is asked: it was put there while Redis was down).
_PUT = LuaScript(
    "redis.call('DEL', KEYS[1])\nredis.call('HSET', KEYS[1], 'b', ARGV[1], 's', 'pending', 'e', ARGV[2])\n"
    "return redis.call('PEXPIRE', KEYS[1], ARGV[3])"
)
_CLAIM = LuaScript(
    "local h = redis.call('HMGET', KEYS[1], 'b', 's', 'e')\nif not h[1] then return false end\n"
    "if h[2] == 'paying' then return h[1] end\n"
    "if tonumber(h[3]) <= tonumber(ARGV[1]) then return '' end\n"
    "redis.call('HSET', KEYS[1], 's', 'paying')\nredis.call('PEXPIRE', KEYS[1], ARGV[2])\nreturn h[1]"
)
_RELEASE = LuaScript(
    "local s = redis.call('HGET', KEYS[1], 's')\nif not s then return -1 end\n"
    "if s == 'paying' then redis.call('HSET', KEYS[1], 's', 'pending') end\nreturn 1"
)
_CANCEL = LuaScript(
    "local h = redis.call('HMGET', KEYS[1], 's', 'e')\nif not h[1] then return -1 end\n"
    "if h[1] ~= 'pending' or tonumber(h[2]) <= tonumber(ARGV[1]) then return 0 end\n"
    "return redis.call('DEL', KEYS[1])"
)


class RedisPreOrderStore(_RedisFirst):
    """PreOrderStore on ``preorder:{order_id}`` hashes (TTL: pay_by + GRACE_MS, PAYING_TTL_MS once
    claimed; the state and the stored pay_by decide, checked against the caller's ``now_ms``). The
    claims are single-key scripts, so a pay and a cancel racing each other never both succeed.
    While Redis is down every call goes to ``fallback`` (t_preorder); a pre-order Redis does not
    hold is looked up there too (one put while Redis was down, paid after it came back)."""

    __slots__ = ("_fallback",)

    def __init__(self, pipes: Pipelines, breaker: Breaker, fallback: PreOrderStore, counts: dict[str, int]) -> None:
        super().__init__(pipes, breaker, counts, "redis_fallback_preorder")
        self._fallback = fallback

    @staticmethod
    def _key(order_id: str) -> str:
        return f"preorder:{{{order_id}}}"

    async def put(self, order_id: str, body: bytes, expires_at_ms: int, now_ms: int) -> None:
        """Store the pre-order, pending until ``expires_at_ms`` (in the DB while Redis is down)."""
        ttl_ms = max(expires_at_ms - now_ms, 0) + GRACE_MS
        try:
            await self._redis(lambda: self._pipes.script(_PUT, [self._key(order_id)], [body, expires_at_ms, ttl_ms]))
        except BreakerOpen:
            await self._fallback.put(order_id, body, expires_at_ms, now_ms)

    async def get(self, order_id: str, now_ms: int) -> bytes | None:
        """The body of a live pending pre-order or of one being paid, or None. Raises Degraded
        while Redis is down and the DB does not hold it (Redis may)."""
        key = self._key(order_id)
        try:
            body, state, expires = await self._redis(lambda: self._pipes.command(key, "HMGET", key, "b", "s", "e"))
        except BreakerOpen:
            return _known(order_id, await self._fallback.get(order_id, now_ms))
        if body is None:
            return await self._fallback.get(order_id, now_ms)
        return _live(body, state, expires, now_ms)

    async def get_many(self, order_ids: Sequence[str], now_ms: int) -> list[bytes | None]:
        """``get`` of each of ``order_ids``, in order: one round trip to Redis for all of them, then
        one query per database for those Redis does not hold. Raises Degraded while Redis is down
        and the DB does not hold one of them (Redis may)."""
        if not order_ids:
            return []
        keys = [self._key(order_id) for order_id in order_ids]
        try:
            replies = await self._redis(lambda: self._pipes.commands([(k, ("HMGET", k, "b", "s", "e")) for k in keys]))
        except BreakerOpen:
            found = await self._fallback.get_many(order_ids, now_ms)
            return [_known(order_id, body) for order_id, body in zip(order_ids, found, strict=True)]
        bodies = [None if body is None else _live(body, state, expires, now_ms) for body, state, expires in replies]
        missing = [i for i, (body, _, _) in enumerate(replies) if body is None]
        if missing:
            found = await self._fallback.get_many([order_ids[i] for i in missing], now_ms)
            for i, body in zip(missing, found, strict=True):
                bodies[i] = body
        return bodies

    async def claim_for_pay(self, order_id: str, now_ms: int) -> bytes | None:
        """pending (before expiry) or paying -> paying; the body, or None. Raises Degraded while
        Redis is down and the DB does not hold it (Redis may)."""
        try:
            body = await self._redis(lambda: self._pipes.script(_CLAIM, [self._key(order_id)], [now_ms, PAYING_TTL_MS]))
        except BreakerOpen:
            return _known(order_id, await self._fallback.claim_for_pay(order_id, now_ms))
        if body is None:
            return await self._fallback.claim_for_pay(order_id, now_ms)
        return bytes(body) or None

    async def release(self, order_id: str) -> None:
        """paying -> pending."""
        try:
            found = await self._redis(lambda: self._pipes.script(_RELEASE, [self._key(order_id)], []))
        except BreakerOpen:
            found = -1
        if found == -1:
            await self._fallback.release(order_id)

    async def cancel(self, order_id: str, now_ms: int) -> bool:
        """Delete a live pending pre-order; False if a pay claimed it or it is gone. A cancel in
        Redis drops a DB copy too (a put that timed out after Redis stored it went to the DB as
        well), so no later pay finds one."""
        try:
            outcome = await self._redis(lambda: self._pipes.script(_CANCEL, [self._key(order_id)], [now_ms]))
        except BreakerOpen:
            outcome = -1
        if outcome == 0:
            return False
        return await self._fallback.cancel(order_id, now_ms) or outcome == 1

    async def delete(self, order_id: str) -> bool:
        """Remove the pre-order once its packet is active; False if absent."""
        try:
            key = self._key(order_id)
            deleted = await self._redis(lambda: self._pipes.command(key, "DEL", key))
        except BreakerOpen:
            deleted = 0
        return deleted == 1 or await self._fallback.delete(order_id)


def _live(body: bytes, state: bytes | None, expires: bytes | None, now_ms: int) -> bytes | None:
    """A pre-order hash's body (fields ``b``, ``s``, ``e``) if it is being paid or pending before
    its pay_by (``e``, ms) at ``now_ms``, else None."""
    return bytes(body) if state == b"paying" or int(expires or 0) > now_ms else None


def _known(order_id: str, body: bytes | None) -> bytes:
    """The DB's answer about a pre-order while Redis is down: its body; raises Degraded when the DB
    has none, as only a pre-order put during an outage lives there (Redis may hold this one)."""
    if body is None:
        raise errors.Degraded(f"pre-order {order_id} may be held in Redis, which is not answering; retry shortly")
    return body


FLAG_TTL_MS = 10_000  # a flag's copy in Redis lives this long: a switch missed there is seen within it
# KEYS the lease. ARGV the holder, the TTL (ms): taken when free, renewed when the holder's; 1 if held.
_HOLD = LuaScript("""
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
""")


class RedisFlags(_RedisFirst):
    """Flags in ``fallback`` (the database: the record) with a copy of each in Redis
    (``flag:{<name>}``: ``=<value>``, or ``-`` for a flag known unset; FLAG_TTL_MS), so that
    workers following a flag every second read Redis, not the database: a missing copy is read
    from ``fallback`` and put back; a set writes ``fallback``, then the copy. While Redis is
    down every call goes to ``fallback``."""

    __slots__ = ("_fallback",)

    def __init__(self, pipes: Pipelines, breaker: Breaker, fallback: Flags, counts: dict[str, int]) -> None:
        super().__init__(pipes, breaker, counts, "redis_fallback_flags")
        self._fallback = fallback

    @staticmethod
    def _key(name: str) -> str:
        return f"flag:{{{name}}}"

    async def get(self, name: str) -> str | None:
        """The flag's value, or None when unset."""
        try:
            value = await self._redis(lambda: self._pipes.one(lambda p: p.get(self._key(name))))
        except BreakerOpen:
            return await self._fallback.get(name)
        if value is not None:  # b"=<value>", or b"-": known unset
            copy = bytes(value).decode()
            return copy[1:] if copy.startswith("=") else None
        found = await self._fallback.get(name)
        await self._copy(name, found)
        return found

    async def set(self, name: str, value: str) -> None:
        """Set the flag in ``fallback``, then its copy (a copy not written expires within FLAG_TTL_MS)."""
        await self._fallback.set(name, value)
        await self._copy(name, value)

    async def _copy(self, name: str, value: str | None) -> None:
        copy = "-" if value is None else f"={value}"
        try:
            await self._redis(lambda: self._pipes.one(lambda p: p.set(self._key(name), copy, px=FLAG_TTL_MS)))
        except BreakerOpen:
            pass


class RedisLeases(_RedisFirst):
    """Leases as ``lease:{<name>}`` keys naming their ``holder`` (this worker), with a TTL; one
    single-key script takes or renews one. While Redis is down every worker holds every lease
    (the jobs are safe on any number of workers; counted as ``redis_fallback_leases``)."""

    __slots__ = ("_holder",)

    def __init__(self, pipes: Pipelines, breaker: Breaker, holder: str, counts: dict[str, int]) -> None:
        super().__init__(pipes, breaker, counts, "redis_fallback_leases")
        self._holder = holder

    async def hold(self, name: str, ttl_ms: int) -> bool:
        """True when this worker holds lease ``name`` for the next ``ttl_ms`` (or Redis is down)."""
        try:
            held = await self._redis(lambda: self._pipes.script(_HOLD, [f"lease:{{{name}}}"], [self._holder, ttl_ms]))
        except BreakerOpen:
            return True
        return bool(held)


EXPIRIES_KEY = "expiries"  # the sorted set of active packets by expires_at (ms)


class RedisExpiryIndex(_RedisFirst):
    """ExpiryIndex on the sorted set ``expiries`` (member: order id, score: expires_at in ms),
    written at activation and trimmed as the refund job settles packets. While Redis is down
    ``due`` answers None (the refund job scans the databases) and writes are dropped (counted as
    ``redis_fallback_expiries``; the scan finds those packets); a Redis that lost the set is
    covered by the same scan."""

    __slots__ = ()

    def __init__(self, pipes: Pipelines, breaker: Breaker, counts: dict[str, int]) -> None:
        super().__init__(pipes, breaker, counts, "redis_fallback_expiries")

    async def add(self, order_id: str, expires_at_ms: int) -> None:
        """ZADD the packet (never raises)."""
        try:
            await self._redis(lambda: self._pipes.command(EXPIRIES_KEY, "ZADD", EXPIRIES_KEY, expires_at_ms, order_id))
        except Exception:  # BreakerOpen, or a reply error: the scan finds it
            return

    async def due(self, now_ms: int, limit: int) -> list[str] | None:
        """The earliest ``limit`` members scored at most ``now_ms``, or None while Redis is down."""
        try:
            found = await self._redis(
                lambda: self._pipes.one(lambda p: p.zrangebyscore(EXPIRIES_KEY, "-inf", now_ms, start=0, num=limit))
            )
        except BreakerOpen:
            return None
        return [bytes(member).decode() for member in found]

    async def remove(self, order_ids: Sequence[str]) -> None:
        """ZREM the packets (never raises)."""
        if not order_ids:
            return
        try:
            await self._redis(lambda: self._pipes.command(EXPIRIES_KEY, "ZREM", EXPIRIES_KEY, *order_ids))
        except Exception:  # left there: settling them again changes nothing
            return
