"""Redis adapters of the message ports of ``hongbao.core.push_ports``: the per-user message log
(the offline queue) and the broadcast topic log, on a single Redis or a Redis Cluster.

Per user (one hash tag, so every script below stays in one slot):

- ``mlog:{uid}``    hash: ``seq`` (the last offset given out), ``epoch``, ``nonce`` (of the last
  append, which makes a retried append idempotent), ``trimmed`` (the highest offset dropped before
  the client acked it: by length or age).
- ``mstream:{uid}`` stream: one entry per message, id ``<offset>-0``, fields ``t`` (ms) and ``b``
  (the encoded frame payload). Both keys expire ``max_age_s`` after the last append.

The epoch is a random string made when ``mlog:{uid}`` has none (first use, or the history was
lost: a flush, a restart without persistence, the keys expired, a ``seq`` that does not parse);
offsets restart at 1 in a new epoch and a client from an older epoch is told its replay is not
complete.

Topics: ``{topics}:meta`` (hash of ``<topic>:seq|epoch|nonce``) and ``{topics}:log`` (one stream
for every topic, capped at about ``max_len`` entries, fields ``topic o e b``); each node reads it
with XREAD BLOCK from its own cursor (the last stream id it saw).

An append is two round trips: read the next (offset, epoch), build the body that carries them,
then a script writes it only if nobody took that offset meanwhile (else it answers the next
free one and the body is built again), so offsets in a stream are always in order.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

from hongbao.core.adapters.redis_client import LuaScript, RedisClient, text
from hongbao.core.push_ports import Replay, Stored

#: make_body(offset, epoch) -> the encoded message (the ports' body maker).
BodyMaker = Callable[[int, str], bytes]

log = logging.getLogger("hongbao.redis_push")

TOPIC_META = "{topics}:meta"
TOPIC_STREAM = "{topics}:log"
#: Longest XREAD BLOCK (seconds): below the client's socket timeout; callers read in a loop.
MAX_BLOCK_S = 2.0

# ensure(meta, prefix, new_epoch) -> seq, epoch, fresh: a new epoch when there is none or seq is bad.
_ENSURE = """
local function ensure(meta, p, new_epoch)
  local epoch = redis.call('HGET', meta, p .. 'epoch')
  local seq = tonumber(redis.call('HGET', meta, p .. 'seq') or '0')
  if epoch and seq then return seq, epoch, 0 end
  local fresh = 1
  if epoch then fresh = 2 end
  redis.call('HSET', meta, p .. 'epoch', new_epoch, p .. 'seq', 0)
  return 0, new_epoch, fresh
end
local function user_ensure(new_epoch)
  local seq, epoch, fresh = ensure(KEYS[1], '', new_epoch)
  if fresh ~= 0 then
    redis.call('DEL', KEYS[2])
    redis.call('HDEL', KEYS[1], 'trimmed')
  end
  return seq, epoch, fresh
end
-- claim(p, offset, epoch, nonce) -> 1 write it, 2 already written (a retry), 0 taken
local function claim(p, seq, epoch, offset, want_epoch, nonce)
  if epoch == want_epoch and seq == offset and redis.call('HGET', KEYS[1], p .. 'nonce') == nonce then return 2 end
  if epoch ~= want_epoch or seq + 1 ~= offset then return 0 end
  redis.call('HSET', KEYS[1], p .. 'seq', offset, p .. 'nonce', nonce)
  return 1
end
"""
# Drop the oldest entries while the stream is longer than ARGV maxlen or older than cutoff (ms).
_TRIM = """
local function trim(maxlen, cutoff)
  local len = redis.call('XLEN', KEYS[2])
  local dropped = nil
  while len > 0 do
    local first = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)[1]
    local t = nil
    for i = 1, #first[2], 2 do
      if first[2][i] == 't' then t = tonumber(first[2][i + 1]) end
    end
    if len <= maxlen and t and t >= cutoff then break end
    redis.call('XDEL', KEYS[2], first[1])
    dropped = first[1]
    len = len - 1
  end
  if dropped then redis.call('HSET', KEYS[1], 'trimmed', string.match(dropped, '^%d+')) end
end
"""
#: KEYS mlog, mstream. ARGV new_epoch -> {next offset, epoch, fresh}
USER_PEEK = LuaScript(_ENSURE + """
local seq, epoch, fresh = user_ensure(ARGV[1])
return {seq + 1, epoch, fresh}
""")
#: KEYS mlog, mstream. ARGV offset, epoch, nonce, body, now_ms, maxlen, cutoff_ms, ttl_ms, new_epoch
#: -> {1, offset, epoch} written, or {0, next offset, epoch} when the offset was taken.
USER_PUT = LuaScript(_ENSURE + _TRIM + """
local seq, epoch = user_ensure(ARGV[9])
local offset = tonumber(ARGV[1])
local verdict = claim('', seq, epoch, offset, ARGV[2], ARGV[3])
if verdict == 0 then return {0, seq + 1, epoch} end
if verdict == 1 then redis.call('XADD', KEYS[2], offset .. '-0', 't', ARGV[5], 'b', ARGV[4]) end
trim(tonumber(ARGV[6]), tonumber(ARGV[7]))
redis.call('PEXPIRE', KEYS[1], ARGV[8])
redis.call('PEXPIRE', KEYS[2], ARGV[8])
return {1, offset, epoch}
""")
#: KEYS mlog, mstream. ARGV new_epoch, cutoff_ms, maxlen, client epoch ('' none), after ('' none)
#: -> {epoch, complete 0/1, XRANGE entries}
USER_REPLAY = LuaScript(_ENSURE + _TRIM + """
local seq, epoch = user_ensure(ARGV[1])
trim(tonumber(ARGV[3]), tonumber(ARGV[2]))
local trimmed = tonumber(redis.call('HGET', KEYS[1], 'trimmed') or '0') or 0
local after = tonumber(ARGV[5])
local same = ARGV[4] == epoch or (ARGV[4] == '' and after == nil)
local start = '-'
if same and after then start = (after + 1) .. '-0' end
local complete = 0
if same and trimmed <= (after or 0) then complete = 1 end
return {epoch, complete, redis.call('XRANGE', KEYS[2], start, '+')}
""")
#: KEYS meta, stream. ARGV prefix, new_epoch -> {next offset, epoch, fresh}
TOPIC_PEEK = LuaScript(_ENSURE + """
local seq, epoch, fresh = ensure(KEYS[1], ARGV[1], ARGV[2])
return {seq + 1, epoch, fresh}
""")
#: KEYS meta, stream. ARGV offset, epoch, nonce, body, prefix, maxlen, new_epoch, topic
TOPIC_PUT = LuaScript(_ENSURE + """
local seq, epoch = ensure(KEYS[1], ARGV[5], ARGV[7])
local offset = tonumber(ARGV[1])
local verdict = claim(ARGV[5], seq, epoch, offset, ARGV[2], ARGV[3])
if verdict == 0 then return {0, seq + 1, epoch} end
if verdict == 1 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[6], '*', 'topic', ARGV[8], 'o', offset, 'e', epoch, 'b', ARGV[4])
end
return {1, offset, epoch}
""")


def mlog_key(uid: str) -> str:
    """``mlog:{uid}``: the user's log counters (hash)."""
    return f"mlog:{{{uid}}}"


def mstream_key(uid: str) -> str:
    """``mstream:{uid}``: the user's held messages (stream)."""
    return f"mstream:{{{uid}}}"


def _peeked(uid: str, reply: list[Any]) -> tuple[int, str]:
    if int(reply[2]) == 2:
        log.warning("message log of %s had an unreadable seq: new epoch, history reported lost", uid)
    return int(reply[0]), text(reply[1])


class RedisMessageLog:
    """MessageLog on Redis: per-user streams, at most ``max_len`` messages none older than
    ``max_age_s`` seconds (see the module for keys and epochs)."""

    __slots__ = ("_max_age_ms", "_max_len", "_redis")

    def __init__(self, redis: RedisClient, max_len: int, max_age_s: float) -> None:
        self._redis = redis
        self._max_len = max_len
        self._max_age_ms = int(max_age_s * 1000)

    async def append(self, uid: str, make_body: BodyMaker, now_ms: int) -> Stored:
        """Append ``make_body(offset, epoch)`` as the next message of ``uid`` (offsets 1, 2, ...
        per epoch, in order), trimming what is past the bounds; safe to retry."""
        keys = [mlog_key(uid), mstream_key(uid)]
        offset, epoch = _peeked(uid, await USER_PEEK(self._redis, keys, [secrets.token_urlsafe(8)]))
        nonce = secrets.token_urlsafe(8)
        while True:
            body = make_body(offset, epoch)
            reply = await USER_PUT(self._redis, keys, [offset, epoch, nonce, body, now_ms, self._max_len,
                                                       now_ms - self._max_age_ms, self._max_age_ms, secrets.token_urlsafe(8)])
            if int(reply[0]) == 1:
                return Stored(offset, epoch, body)
            offset, epoch = int(reply[1]), text(reply[2])

    async def ack(self, uid: str, offset: int) -> None:
        """Drop ``uid``'s messages up to and including ``offset``."""
        await self._redis.xtrim(mstream_key(uid), minid=f"{offset + 1}-0", approximate=False)

    async def replay(self, uid: str, after: int | None, epoch: str | None, now_ms: int) -> Replay:
        """The held messages after ``after`` in order (all held ones when ``after`` is None or the
        epoch differs). ``complete`` is False when the epoch differs (a client with an offset but
        no epoch included) or a message after ``after`` was dropped unacked."""
        keys = [mlog_key(uid), mstream_key(uid)]
        reply = await USER_REPLAY(self._redis, keys, [secrets.token_urlsafe(8), now_ms - self._max_age_ms, self._max_len,
                                                      epoch or "", "" if after is None else after])
        current = text(reply[0])
        messages = [Stored(int(text(entry_id).split("-")[0]), current, _field(fields, b"b"))
                    for entry_id, fields in reply[2]]
        return Replay(current, messages, bool(reply[1]))


def _field(flat: list[bytes], name: bytes) -> bytes:
    """The value of ``name`` in a flat [field, value, ...] stream entry."""
    return flat[flat.index(name) + 1]


class RedisTopicLog:
    """TopicLog on Redis: one stream for every topic, about ``max_len`` entries long."""

    __slots__ = ("_max_len", "_redis")

    def __init__(self, redis: RedisClient, max_len: int) -> None:
        self._redis = redis
        self._max_len = max_len

    async def publish(self, topic: str, make_body: BodyMaker) -> Stored:
        """Append ``make_body(offset, epoch)`` to ``topic`` (per-topic offsets, in order)."""
        keys = [TOPIC_META, TOPIC_STREAM]
        prefix = f"{topic}:"
        offset, epoch = _peeked(topic, await TOPIC_PEEK(self._redis, keys, [prefix, secrets.token_urlsafe(8)]))
        nonce = secrets.token_urlsafe(8)
        while True:
            body = make_body(offset, epoch)
            reply = await TOPIC_PUT(self._redis, keys, [offset, epoch, nonce, body, prefix, self._max_len,
                                                        secrets.token_urlsafe(8), topic])
            if int(reply[0]) == 1:
                return Stored(offset, epoch, body)
            offset, epoch = int(reply[1]), text(reply[2])

    async def read(self, cursor: str | None, timeout_s: float) -> tuple[str, list[tuple[str, Stored]]]:
        """(new cursor, [(topic, message)]) after ``cursor`` (None: the stream's current end),
        waiting at most ``min(timeout_s, MAX_BLOCK_S)`` seconds (XREAD BLOCK) for the first one.
        Entries missing a field are logged and skipped (left in the stream)."""
        if cursor is None:
            last: Any = await self._redis.xrevrange(TOPIC_STREAM, count=1)
            cursor = text(last[0][0]) if last else "0-0"
        block_ms = max(1, int(min(timeout_s, MAX_BLOCK_S) * 1000))
        reply: Any = await self._redis.xread({TOPIC_STREAM: cursor}, count=1000, block=block_ms)  # redis-py types it loosely
        messages: list[tuple[str, Stored]] = []
        for _stream, entries in reply:
            for entry_id, fields in entries:
                cursor = text(entry_id)
                try:
                    messages.append((text(fields[b"topic"]), Stored(int(fields[b"o"]), text(fields[b"e"]), fields[b"b"])))
                except (KeyError, ValueError):
                    log.warning("topic log entry %s is unreadable; skipped", cursor)
        return cursor, messages
