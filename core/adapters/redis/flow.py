"""The region's send rate on Redis (SendRate of ``hongbao.core.ports``): one key per region,
``flow:{region}:send``, holding a generic cell rate algorithm's theoretical arrival time in
microseconds of the Redis server's clock (GCRA, ITU-T I.371, as the host's native RateLimiter;
the server's clock, so every node agrees). One single-key script a send."""

from __future__ import annotations

from hongbao.core.adapters.redis.client import LuaScript, Pipelines
from hongbao.core.breaker import Breaker, tally

# KEYS the bucket. ARGV the emission interval (µs a token), the tolerance (µs: burst x interval).
# Returns 0 when a token was taken, else the µs until one is free (nothing taken).
_TAKE = LuaScript("""
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval, tolerance = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now) + interval
if tat - now > tolerance then return math.ceil(tat - tolerance - now) end
redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', math.ceil(tolerance / 1000) + 1)
return 0
""")


def send_rate_key(region: int) -> str:
    """The bucket of region ``region``'s sends."""
    return f"flow:{region}:send"


class RedisSendRate:
    """SendRate of ``region`` on Redis: ``rate_per_s`` sends a second, ``burst`` at once after a
    quiet spell. While Redis is down every send may go (counted as ``redis_fallback_flow``)."""

    __slots__ = ("_pipes", "_breaker", "_counts", "_key", "_args")

    def __init__(
        self, pipes: Pipelines, breaker: Breaker, counts: dict[str, int], region: int, rate_per_s: float, burst: int
    ) -> None:
        self._pipes, self._breaker, self._counts, self._key = pipes, breaker, counts, send_rate_key(region)
        interval_us = 1_000_000 / rate_per_s
        self._args = [f"{interval_us:.3f}", f"{interval_us * burst:.3f}"]

    async def take(self) -> float:
        """0.0, or the seconds until the region's next send may go."""
        try:
            wait_us = await self._breaker.call(lambda: self._pipes.script(_TAKE, [self._key], self._args))
        except Exception:  # BreakerOpen (down), or a reply error: the node's own rate still holds
            tally(self._counts, "redis_fallback_flow")
            return 0.0
        return int(wait_us) / 1_000_000
