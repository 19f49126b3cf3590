"""The membership feed on Redis (hongbao.core.membership.MembershipFeed): one stream,
``members:changed``, about FEED_MAX_LEN entries long, each entry ``{g: <group id>}``. Every worker
reads it with its own cursor, without blocking (XREAD with no BLOCK, on the lean path of
:class:`~hongbao.core.adapters.redis.client.Pipelines`): one cheap command every FOLLOW_S per
worker. One key, so a Redis Cluster serves it from one slot. Both calls go through the worker's
Redis breaker and raise BreakerOpen while Redis is down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from hongbao.core.adapters.redis.client import Pipelines, text
from hongbao.core.breaker import Breaker

FEED = "members:changed"
FEED_MAX_LEN = 10_000  # announcements kept (a reader more than this many behind has been down: it clears)
READ_COUNT = 1_000  # announcements taken by one read


class RedisMembershipFeed:
    """MembershipFeed on the stream FEED through ``pipes`` and ``breaker``."""

    __slots__ = ("_pipes", "_breaker")

    def __init__(self, pipes: Pipelines, breaker: Breaker) -> None:
        self._pipes, self._breaker = pipes, breaker

    async def announce(self, group_ids: Sequence[str]) -> None:
        """Append one entry per group id (the commands of one tick)."""
        adds = [("XADD", FEED, "MAXLEN", "~", FEED_MAX_LEN, "*", "g", group_id) for group_id in group_ids]
        await self._breaker.call(lambda: asyncio.gather(*(self._pipes.command(FEED, *add) for add in adds)))

    async def read(self, cursor: str | None) -> tuple[str, list[str]]:
        """(new cursor, the group ids announced after ``cursor``); None: the stream's end, no ids."""
        if cursor is None:
            last: Any = await self._breaker.call(
                lambda: self._pipes.command(FEED, "XREVRANGE", FEED, "+", "-", "COUNT", 1)
            )
            return (text(last[0][0]) if last else "0-0"), []
        start = cursor
        reply: Any = await self._breaker.call(
            lambda: self._pipes.command(FEED, "XREAD", "COUNT", READ_COUNT, "STREAMS", FEED, start)
        )
        group_ids: list[str] = []
        for _stream, entries in reply or ():
            for entry_id, fields in entries:
                cursor = text(entry_id)
                pairs = dict(zip(fields[::2], fields[1::2], strict=True))
                if b"g" in pairs:
                    group_ids.append(text(pairs[b"g"]))
        return cursor, group_ids
