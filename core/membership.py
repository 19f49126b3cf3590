"""Group membership behind two cache levels (docs/architecture.md section 6): this worker's memory,
then the shared level (Redis: a generation-tokened view, hongbao.core.view_cache.SharedViews),
then the database. Every open, send, grab and group push asks whether a user is a member; without
these levels each asked the database.

A group's members are kept whole (a frozenset per group id). A change (create, add, remove) writes
the database first, then drops this worker's copy, bumps the shared entry (a view read before the
write and stored after it is never served) and announces the group id on the membership feed.
Every worker follows the feed (``follow``, every FOLLOW_S) and drops the groups it names, so a
change reaches every worker's memory within about FOLLOW_S. While the feed cannot be read (Redis
down) a worker keeps copies for SHORT_TTL_MS only, and the first read that succeeds again clears
its memory (it may have missed announcements). A copy read from the database while an
announcement arrived is kept for SHORT_TTL_MS only (it may predate the change).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

import orjson
from hongbao.core.breaker import BreakerOpen, tally
from hongbao.core.clock import Clock
from hongbao.core.ports import GroupStore
from hongbao.core.ttl_cache import TtlCache
from hongbao.core.view_cache import Fills, SharedViews

log = logging.getLogger("hongbao.membership")
MEMBERS_TTL_MS = 60_000  # a group's members in memory while the feed is followed
SHORT_TTL_MS = 1_000  # ... while it is not (or for a copy that may predate a change)
SHARED_TTL_MS = 3_600_000  # on the shared level (a bump hides it at once; this bounds a lost bump)
MAX_GROUPS = 20_000  # groups kept in one worker's memory
FOLLOW_S = 0.1  # how often a worker reads the feed


def members_entry(group_id: str) -> str:
    """The shared-level entry of a group's members (hash tagged by the group id)."""
    return f"members:{{{group_id}}}"


class MembershipFeed(Protocol):
    """The announcements of membership changes, read by every worker with its own cursor.
    Both calls raise ``hongbao.core.breaker.BreakerOpen`` while the feed is down."""

    async def announce(self, group_ids: Sequence[str]) -> None:
        """Announce that the members of ``group_ids`` changed."""
        ...

    async def read(self, cursor: str | None) -> tuple[str, list[str]]:
        """(new cursor, the group ids announced after ``cursor``); None: from now on (no ids)."""
        ...


class CachedGroups:
    """GroupStore over ``inner`` (the database) with this worker's memory and the ``shared`` level
    in front of its reads, following ``feed`` (see the module's docstring); ``counts``: the
    worker's metrics events (``membership_lost_announcements``)."""

    __slots__ = (
        "inner",
        "shared",
        "feed",
        "clock",
        "counts",
        "_fills",
        "_memory",
        "_creators",
        "_cursor",
        "_live",
        "_changes",
    )

    def __init__(
        self, inner: GroupStore, shared: SharedViews, feed: MembershipFeed, clock: Clock, counts: dict[str, int]
    ) -> None:
        self.inner, self.shared, self.feed, self.clock, self.counts = inner, shared, feed, clock, counts
        self._fills = Fills(shared)
        self._memory: TtlCache[str, frozenset[str]] = TtlCache(MEMBERS_TTL_MS, MAX_GROUPS)
        self._creators: TtlCache[str, str] = TtlCache(MEMBERS_TTL_MS * 10, MAX_GROUPS)  # a creator never changes
        self._cursor: str | None = None
        self._live = False  # the feed was read at the last try
        self._changes = 0  # announcements seen (and changes made) by this worker

    async def create(self, group_id: str, creator_id: str, members: Sequence[str], now_ms: int) -> None:
        """Create the group in the database, then announce it (GroupStore.create)."""
        await self.inner.create(group_id, creator_id, members, now_ms)
        await self._changed(group_id)

    async def add_members(self, group_id: str, members: Sequence[str]) -> int:
        """Add members in the database, then announce the change; how many were new."""
        added = await self.inner.add_members(group_id, members)
        await self._changed(group_id)
        return added

    async def remove_member(self, group_id: str, user_id: str) -> bool:
        """Remove one member in the database, then announce the change; False if absent."""
        removed = await self.inner.remove_member(group_id, user_id)
        await self._changed(group_id)
        return removed

    async def creator(self, group_id: str) -> str | None:
        """The creator (kept in memory once known), or None for an unknown group."""
        now_ms = self.clock.now_ms()
        creator = self._creators.get(group_id, now_ms)
        if creator is None:
            creator = await self.inner.creator(group_id)
            if creator is not None:
                self._creators.put(group_id, creator, now_ms)
        return creator

    async def of_member(self, user_id: str, offset: int, limit: int) -> list[tuple[str, str]]:
        """The groups of ``user_id`` (GroupStore.of_member), from the database: a listing, not the
        request path's membership check."""
        return await self.inner.of_member(user_id, offset, limit)

    async def is_member(self, group_id: str, user_id: str) -> bool:
        """Whether ``user_id`` is a member of ``group_id`` (from the first level that has the group)."""
        return user_id in await self.member_set(group_id)

    def held_member(self, group_id: str, user_id: str) -> bool | None:
        """Whether ``user_id`` is a member of ``group_id``, from this worker's memory alone (no
        I/O); None when the group's members are not held here (then ``is_member``)."""
        held = self._memory.get(group_id, self.clock.now_ms())
        return None if held is None else user_id in held

    async def members(self, group_id: str) -> list[str]:
        """Every member, sorted (from the first level that has the group)."""
        return sorted(await self.member_set(group_id))

    async def member_set(self, group_id: str) -> frozenset[str]:
        """The members of ``group_id`` (empty for an unknown group): memory, the shared level,
        then the database (which fills both; the shared level's put is not waited for: ``Fills``).
        Raises what the database raises (Degraded)."""
        now_ms = self.clock.now_ms()
        held = self._memory.get(group_id, now_ms)
        if held is not None:
            return held
        changes = self._changes
        entry, token = members_entry(group_id), None
        try:
            token, raw = await self.shared.get(entry, "m")
        except BreakerOpen:
            raw = None
        if raw is not None:
            members = frozenset(orjson.loads(raw))
        else:
            members = frozenset(await self.inner.members(group_id))
            if token is not None:
                self._fills.put(entry, "m", token, orjson.dumps(sorted(members)), SHARED_TTL_MS)
        trusted = self._live and changes == self._changes  # no announcement came while it was read
        self._memory.put(group_id, members, now_ms, MEMBERS_TTL_MS if trusted else SHORT_TTL_MS)
        return members

    async def follow(self) -> None:
        """Read the feed once and forget the groups it names. A failed read clears this worker's
        memory and keeps copies short-lived until a read succeeds again, which clears it once
        more (announcements may have been missed meanwhile). Raises BreakerOpen while it is down."""
        try:
            self._cursor, changed = await self.feed.read(self._cursor)
        except Exception:
            self._forget_all(live=False)
            raise
        if not self._live:
            self._forget_all(live=True)
        for group_id in changed:
            self._memory.drop(group_id)
        self._changes += len(changed)

    def _forget_all(self, *, live: bool) -> None:
        self._memory.clear()
        self._live = live
        self._changes += 1

    async def _changed(self, group_id: str) -> None:
        """After a database write: forget the group here, bump it on the shared level and
        announce it (a lost announcement is logged and counted: other workers' copies then live
        out their MEMBERS_TTL_MS)."""
        self._memory.drop(group_id)
        self._changes += 1
        await self.shared.bump([members_entry(group_id)])
        try:
            await self.feed.announce([group_id])
        except Exception as exc:
            tally(self.counts, "membership_lost_announcements")
            if not isinstance(exc, BreakerOpen):
                log.exception("could not announce the change of group %s", group_id)
