"""The grab filter's shared level on Redis (docs/architecture.md sections 5, 6, 10): one hash per live packet,
``grab:{<order_id>}`` (hash tagged: every command and script touches that one key, so a Redis
Cluster never answers CROSSSLOT), holding its state and the users who opened it:

- ``k`` kind, ``c`` count, ``n`` remaining count, ``s`` status, ``g`` group id, ``r`` receiver id
  ("" when none), ``e`` expires_at (ms), ``p`` present when the entry was rebuilt from the database
  after opens (then its opened users are incomplete and ``n`` is frozen, see below);
- ``o`` sender id, ``t`` total (fen), ``a`` created_at, ``b`` pay_by (ms): with ``k c g r e``, the
  packet's fixed fields, which the open path reads from here after its worker's memory
  (``fixed``) instead of from the database;
- ``u:<user_id>`` the fen that user opened.

Reads are one HMGET; writes are one Lua script each (EVALSHA), all through
:class:`~hongbao.core.adapters.redis.client.Pipelines` on its lean path, so the commands of every
request of one loop tick go out in one write per server (auto-pipelining). The key lives until ``KEEP_MS`` after the
packet's expiry; a missing key is rebuilt from the database by the service.

Staleness goes one way only: writes come after the database's, so ``n`` is at worst too high ("ok"
for a finished packet: open answers 410 and its refusal fixes the entry), never too low. An entry
rebuilt while opens were in flight might count one twice, so a rebuilt (``p``) entry never
lowers ``n`` below what it was built with; only the last share (or a refusal) finishes it.
A write lost to an outage marks the key stale; this worker's next read deletes it first.

Redis down (one :class:`~hongbao.core.breaker.Breaker` per client): reads raise BreakerOpen so the
service checks the database, at most ``db_rate_per_s`` times a second per worker (a token
bucket), beyond that Degraded (503). Counters in ``counts``: ``redis_fallback_grab`` (database
checks), ``redis_grab_shed`` (503s), ``redis_grab_lost_writes``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from hongbao.core import errors
from hongbao.core.adapters.redis.client import LuaScript, Pipelines, text
from hongbao.core.adapters.redis.lean import bulk
from hongbao.core.breaker import Breaker, BreakerOpen, tally
from hongbao.core.grab_state import Lookup, PacketState
from hongbao.core.packet import Kind, Packet, Status
from hongbao.core.ports import OpenResult
from hongbao.core.soon import Later, Soon

log = logging.getLogger("hongbao.redis_grab")

KEEP_MS = 3600_000  # a key outlives its packet's expiry by this much (late grabs answered "expired" from Redis)
DB_RATE_PER_S = 500.0  # database checks a second per worker while Redis is down (a fifth of a second's worth at once)
_FIELDS = ("k", "c", "n", "s", "g", "r", "e", "p")
_FIXED = ("k", "c", "n", "s", "g", "r", "e", "o", "t", "a", "b")  # fixed()'s HMGET
STATES_MAX = 1024  # packets whose last parsed state is kept (a hot packet is parsed once per change of its fields)
_KINDS = {kind.value.encode(): kind for kind in Kind}  # a dict lookup instead of Enum.__call__ per read
_STATUSES = {status.value.encode(): status for status in Status}
_HMGET = b"*%d\r\n%b" % (
    len(_FIELDS) + 3,
    bulk("HMGET"),
)  # lookup's request: this, the key, _FIELDS_BULK, the user's field
_FIELDS_BULK = b"".join(map(bulk, _FIELDS))

# ARGV: k c n s g r e rebuilt ttl_ms o t a b. Returns 1 when stored, 0 when the key already existed.
_PUT = LuaScript(
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
    "redis.call('HSET', KEYS[1], 'k', ARGV[1], 'c', ARGV[2], 'n', ARGV[3], 's', ARGV[4], "
    "'g', ARGV[5], 'r', ARGV[6], 'e', ARGV[7], 'o', ARGV[10], 't', ARGV[11], 'a', ARGV[12], 'b', ARGV[13])\n"
    "if ARGV[8] == '1' then redis.call('HSET', KEYS[1], 'p', '1') end\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[9])\nreturn 1"
)
# ARGV: finished ('1': no share left), status ('' or the new status), then user, fen pairs of new receipts.
# Returns 0 when the key is missing (the next grab rebuilds it from the database), else 1.
_UPDATE = LuaScript(
    "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end\nlocal added = 0\n"
    "for i = 3, #ARGV, 2 do added = added + redis.call('HSETNX', KEYS[1], 'u:' .. ARGV[i], ARGV[i + 1]) end\n"
    "if ARGV[1] == '1' then redis.call('HSET', KEYS[1], 'n', 0, 's', 'finished')\n"
    "elseif added > 0 and redis.call('HEXISTS', KEYS[1], 'p') == 0 then\n"
    "  if redis.call('HINCRBY', KEYS[1], 'n', -added) < 0 then redis.call('HSET', KEYS[1], 'n', 0) end\nend\n"
    "if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 's', ARGV[2]) end\nreturn 1"
)


class TokenBucket:
    """``burst`` tokens refilled at ``rate_per_s`` a second (this worker only); ``now``: a
    monotonic clock in seconds."""

    __slots__ = ("rate", "burst", "_tokens", "_at", "_now")

    def __init__(self, rate_per_s: float, burst: int, now: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self._now = rate_per_s, burst, now
        self._tokens, self._at = float(burst), self._now()

    def take(self) -> bool:
        """Take one token; False when the bucket is empty."""
        now = self._now()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


def _state(order_id: str, raw: Sequence[Any]) -> PacketState:
    """The PacketState of an HMGET reply that starts with the fields ``k c n s g r e``."""
    k, c, n, s, g, r, e = raw[:7]
    return PacketState(order_id, _KINDS[k], int(c), int(n), _STATUSES[s], text(g) or None, text(r) or None, int(e))


def key(order_id: str) -> str:
    """The Redis key of a packet's grab state."""
    return f"grab:{{{order_id}}}"


class RedisGrabState:
    """SharedGrabState on Redis (see the module docstring); ``breaker``: the client's breaker,
    shared with the other Redis adapters of the worker; ``counts``: the worker's metrics events."""

    __slots__ = ("_pipes", "_breaker", "_counts", "_bucket", "_stale", "_states")

    def __init__(
        self, pipes: Pipelines, breaker: Breaker, counts: dict[str, int], *, db_rate_per_s: float = DB_RATE_PER_S
    ) -> None:
        self._pipes, self._breaker, self._counts = pipes, breaker, counts
        self._bucket = TokenBucket(db_rate_per_s, max(1, round(db_rate_per_s / 5)))
        self._stale: set[str] = set()  # keys whose writes were lost: deleted before the next read
        self._states: dict[
            str, tuple[list[Any], PacketState]
        ] = {}  # the last state parsed per packet, by its raw fields

    def _count(self, name: str) -> None:
        tally(self._counts, name)

    async def lookup(self, order_id: str, user_id: str) -> Lookup | None:
        """The packet's state and ``user_id``'s fen from one HMGET (None: no key). Raises
        BreakerOpen when Redis is down and a database check is allowed, Degraded when not."""
        name = key(order_id)
        try:
            reply: list[Any] = await self._breaker.call(lambda: self._read(name, user_id))
        except BreakerOpen:
            if not self._bucket.take():
                self._count("redis_grab_shed")
                raise errors.Degraded("Redis is down and the database checks of grab are at their limit") from None
            self._count("redis_fallback_grab")
            raise
        return self._parse(order_id, reply)

    def lookup_soon(self, order_id: str, user_id: str) -> Soon[Lookup | None] | None:
        """``lookup``'s HMGET on the lean path with no coroutine, when Redis is healthy (the breaker
        clean, no stale key to delete first, a lean route); else None. Its result raises Later
        when the reply failed: ``lookup`` then goes through the breaker and redis-py."""
        if self._stale or not self._breaker.is_clean:
            return None
        name = key(order_id)
        future = self._pipes.lean_request(name, b"".join((_HMGET, bulk(name), _FIELDS_BULK, bulk(f"u:{user_id}"))))
        if future is None:
            return None
        return Soon(future).outcome(lambda reply, error: self._parse(order_id, reply, error))

    def _parse(self, order_id: str, reply: list[Any] | None, error: BaseException | None = None) -> Lookup | None:
        """The Lookup of an HMGET reply (state fields, then the user's); a state is parsed once per
        change of its fields."""
        if error is not None or reply is None:
            raise Later(f"grab state of {order_id}: {error!r}")
        raw, amount = reply[:8], reply[8]
        if raw[0] is None:
            return None
        last = self._states.get(order_id)
        if last is not None and last[0] == raw:
            state = last[1]
        else:
            state = _state(order_id, raw)
            if len(self._states) >= STATES_MAX:
                self._states.clear()
            self._states[order_id] = (raw, state)
        return Lookup(state, None if amount is None else int(amount), raw[7] is None)

    async def _read(self, name: str, user_id: str) -> list[Any]:
        """HMGET of the state fields and ``user_id``'s, after deleting the keys whose writes were lost."""
        if self._stale:
            stale, self._stale = self._stale, set()
            try:
                for old in stale:
                    await self._pipes.command(old, "DEL", old)
            except BaseException:
                self._stale |= stale
                raise
        reply: list[Any] = await self._pipes.command(name, "HMGET", name, *_FIELDS, f"u:{user_id}")
        return reply

    async def put(self, packet: Packet, now_ms: int) -> None:
        """Store ``packet``'s state unless the key exists (TTL: until KEEP_MS after its expiry,
        ``now_ms`` the caller's clock); marked rebuilt when it has opens already."""
        ttl_ms = max(packet.expires_at_ms - now_ms, 0) + KEEP_MS
        args = (
            packet.kind.value,
            packet.count,
            packet.remaining_count,
            packet.status.value,
            packet.group_id or "",
            packet.receiver_id or "",
            packet.expires_at_ms,
            int(packet.remaining_count < packet.count),
            ttl_ms,
            packet.sender_id,
            packet.total_fen,
            packet.created_at_ms,
            packet.pay_by_ms,
        )
        await self._write(packet.order_id, _PUT, args)

    async def fixed(self, order_id: str) -> Packet | None:
        """The packet for its fixed fields only (sender, kind, count, total, group, receiver, times),
        from one HMGET; None when Redis does not hold them (no key, an entry older than these
        fields) or is down: the caller reads the database. Its remainder is not kept here:
        ``remaining_fen`` reads 0 and ``remaining_count``/``status`` may lag."""
        name = key(order_id)
        try:
            reply: list[Any] = await self._breaker.call(lambda: self._pipes.command(name, "HMGET", name, *_FIXED))
        except BreakerOpen:
            return None
        sender, total, created, pay_by = reply[7:]
        if reply[0] is None or sender is None:
            return None
        state = _state(order_id, reply)
        return Packet(
            order_id,
            text(sender),
            state.kind,
            state.count,
            int(total),
            state.group_id,
            state.receiver_id,
            0,
            state.remaining_count,
            state.status,
            int(created),
            int(pay_by),
            state.expires_at_ms,
        )

    async def opened(self, order_id: str, results: Sequence[OpenResult]) -> None:
        """Add the batch's new receipts; finish the entry on its last share or a "finished"
        refusal; mark it expired on an "expired" refusal."""
        finished = any(r.last or r.refusal == "finished" for r in results)
        status = "expired" if any(r.refusal == "expired" for r in results) else ""
        pairs = [
            v
            for r in results
            if r.receipt is not None and not r.repeat
            for v in (r.receipt.user_id, r.receipt.amount_fen)
        ]
        if pairs or finished or status:
            await self._write(order_id, _UPDATE, ("1" if finished else "0", status, *pairs))

    async def ended(self, order_id: str, status: Status) -> None:
        """Set the entry's status (expired, refunded)."""
        await self._write(order_id, _UPDATE, ("0", status.value))

    async def _write(self, order_id: str, script: LuaScript, args: Sequence[str | int]) -> None:
        name = key(order_id)
        try:
            await self._breaker.call(lambda: self._pipes.script(script, [name], args))
        except Exception as exc:  # BreakerOpen, or a bug: the money flow goes on, the entry is repaired
            if not isinstance(exc, BreakerOpen):
                log.exception("grab state write of %s failed", order_id)
            self._stale.add(name)
            self._count("redis_grab_lost_writes")
