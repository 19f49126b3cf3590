"""Redis adapters of the message ports of ``hongbao.core.push_ports``: the per-user message log
(the offline queue) and the broadcast topic log, on a single Redis or a Redis Cluster.

Per user (one hash tag, so every script below stays in one slot):

- ``mlog:{uid}``    hash: ``seq`` (the last offset given out), ``epoch``, ``acked`` (the last
  offset the client acked), ``nonce`` (of the last append, which makes a retried append
  idempotent), ``run`` and ``gen`` (the incarnation, push_lua), ``t0`` (ms, no later than the
  oldest entry's ``t``: push_lua's trim), ``x`` (ms of the append that last renewed the expiry).
- ``mstream:{uid}`` stream: one entry per message, id ``<offset>-0``, fields ``t`` (ms) and ``b``
  (the encoded frame payload). Both keys expire between ``max_age_s`` and 1.1 x ``max_age_s``
  after the last append: an append renews them (to 1.1 x) once a tenth of ``max_age_s`` has
  passed since ``x``, so most appends set no expiry.

The epoch is a random string made when ``mlog:{uid}`` has none (first use, or the history was
lost: a flush, a restart without persistence, the keys expired, a ``seq`` that does not parse,
or a node deleted both keys because an append to them failed); offsets restart at 1 in a new epoch
and a client from an older epoch is told its replay is not complete. ``{push}:lost`` (a stream, one
entry per renewed user, field ``u``) names those renewals to every node, which reads it from its
own cursor with ``{push}:generation`` once a second.

Topics: ``{topics}:meta`` (hash of ``<topic>:seq|epoch|nonce``) and ``{topics}:log`` (one stream
for every topic, capped at about ``max_len`` entries, fields ``topic o e b``); each node reads it
with XREAD BLOCK from its own cursor (the last stream id it saw).

An append takes one round trip whatever the batch: a pipeline of USER_APPEND runs, each over up
to USERS_PER_SCRIPT users (on a cluster, users of one hash slot), which takes each user's next
offsets and writes each message's body as its head followed by its offset and epoch (``place``),
the same bytes the caller builds from the answered first offset. A script runs alone, so a user's
offsets are consecutive in the order given and the stream is always in offset order.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Sequence
from typing import Any

from hongbao.core.adapters.redis.client import Pipelines, RedisClient, text
from hongbao.core.adapters.redis.push_lua import (
    GENERATION,
    LOST,
    TOPIC_PEEK,
    TOPIC_PUT,
    USER_ACK,
    USER_APPEND,
    USER_REPLAY,
)
from hongbao.core.push_ports import BodyMaker, Gaps, Replay, SharedBody, Stored

log = logging.getLogger("hongbao.redis_push")

TOPIC_META = "{topics}:meta"
TOPIC_STREAM = "{topics}:log"
#: Longest XREAD BLOCK (seconds): below the client's socket timeout; callers read in a loop.
MAX_BLOCK_S = 2.0


def mlog_key(uid: str) -> str:
    """``mlog:{uid}``: the user's log counters (hash)."""
    return f"mlog:{{{uid}}}"


def mstream_key(uid: str) -> str:
    """``mstream:{uid}``: the user's held messages (stream)."""
    return f"mstream:{{{uid}}}"


def _peeked(name: str, reply: list[Any]) -> tuple[int, str]:
    if int(reply[2]) == 2:
        log.warning("message log of %s had an unreadable seq: new epoch, history reported lost", name)
    return int(reply[0]), text(reply[1])


def _epoch() -> str:
    return secrets.token_urlsafe(6)


#: The generation of every stream's incarnation (redis_push_lua): raised by a node that lost appends
#: it cannot name; LOST_KEY names the streams renewed for appends that failed (same slot).
GENERATION_KEY = "{push}:generation"
LOST_KEY = "{push}:lost"
LOST_MAX_LEN = 100_000  # entries kept in LOST_KEY: a node reads them every second, so it never lags that far
LOST_READ = 10_000  # uids one sync reads at most (the rest at the next)
#: Users one USER_APPEND run writes to at most: a run holds Redis ~14 us per user (30 000 appends
#: of one message each, Redis 7.0 on loopback), ~2 ms in all, while a run per user repeats the
#: script's fixed cost (the INFO read, the call) for each: 27 us a user that way.
USERS_PER_SCRIPT = 128


class Generation:
    """The incarnation generation one node's logs pass to their scripts (a decimal string; "0"
    until read), shared by its message log and its topic log, the ``run_id`` of the Redis
    process holding GENERATION_KEY when last read, and the node's ``cursor`` in LOST_KEY."""

    __slots__ = ("cursor", "run", "value")

    def __init__(self) -> None:
        self.value, self.run, self.cursor = "0", "", ""

    async def sync(self, pipes: Pipelines, *, raise_: bool = False) -> Gaps:
        """Take the stored generation (GENERATION_KEY) when it is higher, store this one when it is
        lower (a restore from an older dump lowered it), and one above both with ``raise_`` (every
        stream starts a new epoch at its next use), and read LOST_KEY past the cursor. ``every``
        when the generation rose or the process holding it changed (a restart, a failover) since
        the last call; ``uids``: the streams renewed since (none on the first call)."""
        args: list[str | int | bytes] = [self.value, int(raise_), self.cursor, LOST_READ]
        reply = await pipes.script(GENERATION, [GENERATION_KEY, LOST_KEY], args)
        before, self.value = self.value, str(reply[0])
        was, self.run = self.run, text(reply[1])
        self.cursor = text(reply[2])
        every = self.value != before or (bool(was) and self.run != was)
        return Gaps(every, tuple(text(uid) for uid in reply[3]))


class RedisMessageLog:
    """MessageLog on Redis: per-user streams, at most ``max_len`` messages none older than
    ``max_age_s`` seconds (see the module for keys, epochs and the one round trip of an append)."""

    __slots__ = ("_generation", "_max_age_ms", "_max_len", "_pipes")

    def __init__(self, pipes: Pipelines, max_len: int, max_age_s: float, generation: Generation | None = None) -> None:
        self._pipes = pipes
        self._max_len = max_len
        self._max_age_ms = int(max_age_s * 1000)
        self._generation = generation or Generation()

    async def append(self, entries: Sequence[tuple[str, SharedBody]], now_ms: int) -> list[Stored]:
        """Append ``make_body(offset, epoch)`` to each (uid, make_body)'s stream (a uid's messages
        take consecutive offsets in the order given), trimming what is past the bounds, in one
        round trip (USER_APPEND runs of up to USERS_PER_SCRIPT users, which build each body from
        ``make_body.head``); the Stored messages in the order of ``entries``. Safe to retry."""
        heads: dict[str, list[bytes]] = {}
        for uid, make_body in entries:
            heads.setdefault(uid, []).append(make_body.head)
        uids = list(heads)
        # a stream's new epoch is drawn once per round trip (shared by its users' streams)
        common: list[str | int | bytes] = [secrets.token_urlsafe(8), now_ms, self._max_len]
        common += [now_ms - self._max_age_ms, self._max_age_ms, _epoch(), self._generation.value]
        groups = [
            [uids[i] for i in group] for group in self._pipes.slot_groups(list(map(mlog_key, uids)), USERS_PER_SCRIPT)
        ]
        calls: list[tuple[list[str], list[str | int | bytes]]] = []
        for group in groups:
            args = list(common)
            for uid in group:
                args += [len(heads[uid]), *heads[uid]]
            calls.append(([key for uid in group for key in _keys(uid)], args))
        replies = await self._pipes.scripts(USER_APPEND, calls)
        places = {
            uid: _peeked(uid, placed)
            for group, reply in zip(groups, replies, strict=True)
            for uid, placed in zip(group, reply, strict=True)
        }
        taken = dict.fromkeys(heads, 0)
        stored: list[Stored] = []
        for uid, make_body in entries:
            start, epoch = places[uid]
            offset = start + taken[uid]
            taken[uid] += 1
            stored.append(Stored(offset, epoch, make_body(offset, epoch)))
        return stored

    async def lost(self, uids: Sequence[str] | None = None) -> None:
        """Renew the streams of ``uids`` (their keys deleted: the next use starts a new epoch, and
        an append still in flight finds its claim refused) and name them in LOST_KEY for every
        node; ``None``: raise the generation, every stream (and topic) starts a new epoch at its
        next use (the streams LOST_KEY names meanwhile are among them: the read is dropped)."""
        if uids is None:
            await self._generation.sync(self._pipes, raise_=True)
            return
        unique = sorted(set(uids))
        await self._pipes.commands([(mlog_key(uid), ("DEL", *_keys(uid))) for uid in unique])
        await self._pipes.script(LOST, [LOST_KEY], [LOST_MAX_LEN, *unique])

    async def sync(self) -> Gaps:
        """The streams renewed since the last call (MessageLog.sync): the generation other nodes
        may have raised (or a Redis restart) and the uids named in LOST_KEY."""
        return await self._generation.sync(self._pipes)

    async def ack(self, acks: Sequence[tuple[str, int, str]]) -> None:
        """For each (uid, offset, epoch): drop the user's messages up to ``offset`` (past the last:
        the last), and remember it as the acked offset, while the stream is of ``epoch``; one
        script each, in one tick."""

        if acks:
            await asyncio.gather(
                *(self._pipes.script(USER_ACK, _keys(uid), [offset, epoch]) for uid, offset, epoch in acks)
            )

    async def replay(self, uid: str, after: int | None, epoch: str | None, now_ms: int) -> Replay:
        """The held messages after ``after`` (None: after the acked offset) in order, or every
        held one when ``epoch`` is given and is not the stream's. Not ``complete`` then, nor
        when ``after`` is past the last offset or a message after it is no longer held (length,
        age). ``last``: the stream's last offset. Creates the stream (new epoch) when there is none."""
        args: list[str | int | bytes] = [
            _epoch(),
            now_ms - self._max_age_ms,
            self._max_len,
            epoch or "",
            "" if after is None else after,
            self._generation.value,
        ]
        reply = await self._pipes.script(USER_REPLAY, _keys(uid), args)
        current = text(reply[0])
        messages = [
            Stored(int(text(entry_id).split("-")[0]), current, _field(fields, b"b")) for entry_id, fields in reply[2]
        ]
        return Replay(current, messages, bool(reply[1]), int(reply[3]))


def _keys(uid: str) -> list[str]:
    return [mlog_key(uid), mstream_key(uid)]


def _field(flat: list[bytes], name: bytes) -> bytes:
    """The value of ``name`` in a flat [field, value, ...] stream entry."""
    return flat[flat.index(name) + 1]


class RedisTopicLog:
    """TopicLog on Redis: one stream for every topic, about ``max_len`` entries long; ``reader``:
    the client of the blocking reads (XREAD BLOCK waits up to MAX_BLOCK_S, longer than the request
    path's bound on a reply; None: the client of ``pipes``, whose bound must then exceed MAX_BLOCK_S)."""

    __slots__ = ("_generation", "_max_len", "_pipes", "_reader")

    def __init__(
        self, pipes: Pipelines, max_len: int, *, reader: RedisClient | None = None, generation: Generation | None = None
    ) -> None:
        self._pipes = pipes
        self._max_len = max_len
        self._reader = reader or pipes.client
        self._generation = generation or Generation()

    async def publish(self, topic: str, make_body: BodyMaker) -> Stored:
        """Append ``make_body(offset, epoch)`` to ``topic`` (per-topic offsets, in order)."""
        keys = [TOPIC_META, TOPIC_STREAM]
        prefix = f"{topic}:"
        offset, epoch = _peeked(
            topic, await self._pipes.script(TOPIC_PEEK, keys, [prefix, _epoch(), self._generation.value])
        )
        nonce = secrets.token_urlsafe(8)
        while True:
            body = make_body(offset, epoch)
            reply = await self._pipes.script(
                TOPIC_PUT,
                keys,
                [offset, epoch, nonce, body, prefix, self._max_len, _epoch(), topic, self._generation.value],
            )
            if int(reply[0]) == 1:
                return Stored(offset, epoch, body)
            offset, epoch = int(reply[1]), text(reply[2])

    async def read(self, cursor: str | None, timeout_s: float) -> tuple[str, list[tuple[str, Stored]]]:
        """(new cursor, [(topic, message)]) after ``cursor`` (None: the stream's current end),
        waiting at most ``min(timeout_s, MAX_BLOCK_S)`` seconds (XREAD BLOCK) for the first one.
        Entries missing a field are logged and skipped (left in the stream)."""
        if cursor is None:
            last: Any = await self._pipes.one(lambda pipe: pipe.xrevrange(TOPIC_STREAM, count=1))
            cursor = text(last[0][0]) if last else "0-0"
        block_ms = max(1, int(min(timeout_s, MAX_BLOCK_S) * 1000))
        reply: Any = await self._reader.xread({TOPIC_STREAM: cursor}, count=1000, block=block_ms)  # blocks: not batched
        messages: list[tuple[str, Stored]] = []
        for _stream, entries in reply:
            for entry_id, fields in entries:
                cursor = text(entry_id)
                try:
                    messages.append(
                        (text(fields[b"topic"]), Stored(int(fields[b"o"]), text(fields[b"e"]), fields[b"b"]))
                    )
                except (KeyError, ValueError):
                    log.warning("topic log entry %s is unreadable; skipped", cursor)
        return cursor, messages
