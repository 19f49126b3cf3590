"""The Queue port (``hongbao.core.ports.Queue``) on Redis Streams with a consumer group, on a single
Redis or a Redis Cluster (credits, user lists, group pushes: docs/architecture.md sections 6 and 7).

Stream ``s`` lives in key ``{queue}:s``. Every queue shares the ``{queue}`` hash tag, so a publish
to several streams is one script on one slot (all or none, as the port asks), made idempotent by
a nonce key ``{queue}:nonce:<random>`` (so a command retried after a dropped connection does
not queue a message twice); the price is that all queues live on one cluster master. Messages
are entries with one field ``b`` (the body).

One consumer group (``hongbao``) per stream; each process claims as its own consumer. A claim is
one script on the stream's key: XAUTOCLAIM takes over entries leased longer than ``lease_ms``
ago (by any consumer: compensation for a worker that died holding them), then XREADGROUP adds
new ones. A claim that leased entries keeps their ids under its own nonce key for
``NONCE_TTL_MS``, so the same claim sent again (a retry after a lost reply) returns those entries
instead of leasing new ones and leaving the first to wait out their lease. An ack (of any number of
messages) is XACK + XDEL, so the stream holds exactly the messages not acked yet and ``depth`` is
its length. Leases are measured by Redis's clock (``now_ms`` is not used).

Message ids: the entry id ``ms-seq`` as one int, ``ms << 20 | seq``.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from hongbao.core.adapters.redis.client import LuaScript, Pipelines, text

GROUP = "hongbao"
SEQ_BITS = 20
#: How long a publish's or claim's nonce is kept (ms): longer than redis-py's retries of one call.
NONCE_TTL_MS = 10_000

#: KEYS nonce key, then one stream per message. ARGV nonce TTL (ms), then one body per message.
#: Appends them all unless this nonce was seen (a retry whose first try went through) -> count added.
PUBLISH = LuaScript("""
if not redis.call('SET', KEYS[1], 1, 'NX', 'PX', ARGV[1]) then return 0 end
for i = 2, #KEYS do redis.call('XADD', KEYS[i], '*', 'b', ARGV[i]) end
return #KEYS - 1
""")
#: KEYS stream, nonce key. ARGV group, consumer, count, lease_ms, nonce TTL (ms)
#: -> [[id, [field, value, ...]], ...]. A nonce seen before returns its claim's entries still there.
CLAIM = LuaScript("""
local seen = redis.call('GET', KEYS[2])
local got = {}
if seen then
  for id in string.gmatch(seen, '[^,]+') do
    local entry = redis.call('XRANGE', KEYS[1], id, id)[1]
    if entry then table.insert(got, entry) end
  end
  return got
end
if redis.call('EXISTS', KEYS[1]) == 0 then return got end
pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], ARGV[1], '0')
local count = tonumber(ARGV[3])
got = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[4], '0-0', 'COUNT', count)[2]
if #got < count then
  local fresh = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', count - #got, 'STREAMS', KEYS[1], '>')
  if fresh then
    for _, entry in ipairs(fresh[1][2]) do table.insert(got, entry) end
  end
end
if #got > 0 then
  local ids = {}
  for _, entry in ipairs(got) do if type(entry) == 'table' then table.insert(ids, entry[1]) end end
  redis.call('SET', KEYS[2], table.concat(ids, ','), 'PX', ARGV[5])
end
return got
""")
#: KEYS stream. ARGV group, then entry ids -> how many were deleted
ACK = LuaScript("""
local ids = {unpack(ARGV, 2)}
redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
return redis.call('XDEL', KEYS[1], unpack(ids))
""")


def queue_key(stream: str) -> str:
    """``{queue}:<stream>``: the Redis key of queue ``stream``."""
    return f"{{queue}}:{stream}"


def nonce_key() -> str:
    """``{queue}:nonce:<random>``: a fresh key naming one publish or claim (and its retries)."""
    return f"{{queue}}:nonce:{secrets.token_urlsafe(12)}"


def message_id(entry_id: bytes | str) -> int:
    """The int id of stream entry ``ms-seq``. Raises ValueError past 2**20 entries in one ms."""
    ms, seq = text(entry_id).split("-")
    if int(seq) >> SEQ_BITS:
        raise ValueError(f"stream entry {text(entry_id)}: sequence past {1 << SEQ_BITS}")
    return int(ms) << SEQ_BITS | int(seq)


def entry_id(message: int) -> str:
    """The stream entry id of int id ``message`` (the inverse of :func:`message_id`)."""
    return f"{message >> SEQ_BITS}-{message & ((1 << SEQ_BITS) - 1)}"


class RedisQueue:
    """Queue on Redis Streams; ``consumer`` names this process in the consumer groups (e.g. the
    node id), so a lease can be told apart from another process's."""

    __slots__ = ("_consumer", "_pipes")

    def __init__(self, pipes: Pipelines, consumer: str) -> None:
        self._pipes = pipes
        self._consumer = consumer

    async def publish(self, messages: Sequence[tuple[str, bytes]]) -> None:
        """Append each (stream, body) in one script: all or none, and once -- a retry after a
        lost reply finds the call's nonce (kept ``NONCE_TTL_MS``) and adds nothing."""
        if messages:
            keys = [nonce_key(), *(queue_key(stream) for stream, _ in messages)]
            await self._pipes.script(PUBLISH, keys, [NONCE_TTL_MS, *(body for _, body in messages)])

    async def claim(self, stream: str, count: int, lease_ms: int, now_ms: int) -> list[tuple[int, bytes]]:
        """Up to ``count`` (id, body) in id order: entries leased over ``lease_ms`` ago first, then
        new ones; each is leased to this consumer until acked or ``lease_ms`` has passed (Redis's
        clock). Entries deleted while leased are skipped. One call is one script with its own nonce:
        sent again after a lost reply, it returns the entries the first run leased."""
        keys = [queue_key(stream), nonce_key()]
        entries: list[Any] = await self._pipes.script(
            CLAIM, keys, [GROUP, self._consumer, count, lease_ms, NONCE_TTL_MS]
        )
        return sorted((message_id(eid), fields[fields.index(b"b") + 1]) for eid, fields in entries if fields)

    async def ack(self, stream: str, *message_ids: int) -> None:
        """Remove handled messages, all in one script (idempotent: an id gone already is skipped)."""
        if message_ids:
            await self._pipes.script(ACK, [queue_key(stream)], [GROUP, *(entry_id(m) for m in message_ids)])

    async def depth(self, stream: str) -> int:
        """Messages in ``stream`` not acked yet (leased or not)."""
        key = queue_key(stream)
        return int(await self._pipes.command(key, "XLEN", key))
