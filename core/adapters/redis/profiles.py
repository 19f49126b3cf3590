"""The non-critical store of the production backend on Redis (docs/architecture.md section 5:
"greeting, nickname, avatar live in a non-critical store ... and fall back to defaults when it is
gone"): hongbao.core.ports.ProfileStore.

Keys (one code path for a single Redis and a Redis Cluster; every command touches one key, hash
tagged, so nothing is ever CROSSSLOT):

- ``greeting:{<order_id>}``: the packet's greeting (a string), written once at pay and kept
  ``expiry_ms + GREETING_MARGIN_MS`` (the packet's life, then a day in which its final details are
  still read);
- ``profile:{<user_id>}``: a hash, ``n`` the nickname and ``a`` the avatar URL, without a TTL.

Every command takes the lean path of ``Pipelines`` (a batch read of profiles: one HMGET per user,
sent together: one round trip per server of a cluster). Calls go through the worker's Redis
breaker (shared with the other Redis adapters): while Redis is down they raise ``BreakerOpen`` at
once, counted as ``redis_fallback_profiles`` in ``counts`` (the worker's metrics events), and the
callers use the defaults. What Redis loses (a flush, a restart without persistence) reads as unset.
"""

from __future__ import annotations

from collections.abc import Sequence

from hongbao.core.adapters.redis.client import Pipelines, text
from hongbao.core.adapters.redis.state import _RedisFirst
from hongbao.core.breaker import Breaker

#: A greeting outlives its packet's expiry by this much (ms): the details of a packet refunded
#: yesterday still show it.
GREETING_MARGIN_MS = 24 * 3600 * 1000


def greeting_key(order_id: str) -> str:
    """The key of a packet's greeting."""
    return f"greeting:{{{order_id}}}"


def profile_key(user_id: str) -> str:
    """The key of a user's profile hash."""
    return f"profile:{{{user_id}}}"


class RedisProfileStore(_RedisFirst):
    """ProfileStore on Redis (see the module docstring); greetings kept ``expiry_ms`` (the packets'
    expiry, ms) + GREETING_MARGIN_MS."""

    __slots__ = ("_greeting_ttl_ms",)

    def __init__(self, pipes: Pipelines, breaker: Breaker, counts: dict[str, int], *, expiry_ms: int) -> None:
        super().__init__(pipes, breaker, counts, "redis_fallback_profiles")
        self._greeting_ttl_ms = expiry_ms + GREETING_MARGIN_MS

    async def set_greeting(self, order_id: str, greeting: str) -> None:
        """SET the greeting with its TTL. Raises BreakerOpen while Redis is down."""
        key, ttl_ms = greeting_key(order_id), self._greeting_ttl_ms
        await self._redis(lambda: self._pipes.command(key, "SET", key, greeting, "PX", ttl_ms))

    async def greeting(self, order_id: str) -> str | None:
        """The greeting, or None. Raises BreakerOpen while Redis is down."""
        key = greeting_key(order_id)
        found = await self._redis(lambda: self._pipes.command(key, "GET", key))
        return None if found is None else text(found)

    async def set_profile(self, user_id: str, nickname: str, avatar_url: str) -> None:
        """HSET both fields. Raises BreakerOpen while Redis is down."""
        key = profile_key(user_id)
        await self._redis(lambda: self._pipes.command(key, "HSET", key, "n", nickname, "a", avatar_url))

    async def profiles(self, user_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """(nickname, avatar_url) of the users that set a profile: one HMGET each, sent together.
        Raises BreakerOpen while Redis is down."""
        wanted = list(dict.fromkeys(user_ids))
        if not wanted:
            return {}
        keys = [profile_key(user_id) for user_id in wanted]
        replies = await self._redis(lambda: self._pipes.commands([(key, ("HMGET", key, "n", "a")) for key in keys]))
        return {
            user_id: (text(nickname), "" if avatar is None else text(avatar))
            for user_id, (nickname, avatar) in zip(wanted, replies, strict=True)
            if nickname is not None
        }
