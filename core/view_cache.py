"""The two cache levels of the read side (docs/architecture.md section 6: "details / lists: two cache levels
(per-worker memory with a short TTL, then Redis), then the DB"), and the port of the shared level
(Redis in production, hongbao.core.adapters.redis.views).

A view is a JSON-ready dict (details of one packet, one page of a user's list) stored under an
``entry`` (a shared-level key with its hash tag: ``details:{<order_id>}``, ``lists:{<user_id>}``)
and a ``field`` within it. Writes go to the database first; then the writer *bumps* the entry:
a fresh generation token that makes every view stored under it before the write invisible.
A reader takes the entry's token in the same round trip as the view, and stores what it read
from the database under that token, so a view read before a write and stored after it is never
served (no stale details after an open, no stale list after a drain). Final views (a finished or
refunded packet's details never change) live long; the others briefly (TTLs below).

Memory: this worker's bumps drop its own copies at once, and its reads of an entry wait while
its bump is under way; another worker's memory copy of a changing view lives at most
MEMORY_TTL_MS (a client's keep-alive connection stays on one worker, so it reads its own writes,
even when the write's answer did not wait for the bump). Shared level down: reads go to the database (counted as
``redis_fallback_<kind>`` in ``counts``, the worker's metrics events) and nothing is stored there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import orjson
from hongbao.core.breaker import BreakerOpen, tally
from hongbao.core.ttl_cache import TtlCache

log = logging.getLogger("hongbao.service")
View = dict[str, object]
MEMORY_TTL_MS = 1000  # a changing view in one worker's memory
FINAL_MEMORY_TTL_MS = 600_000  # a view that never changes, in memory
SHARED_TTL_MS = 60_000  # a changing view on the shared level (bumps hide it earlier; this bounds a lost bump)
FINAL_SHARED_TTL_MS = 86_400_000  # a final view on the shared level


class SharedViews(Protocol):
    """The shared level: views under generation tokens. ``get`` and ``put`` raise
    ``hongbao.core.breaker.BreakerOpen`` while it is down; ``bump`` never raises (a lost bump is
    retried before this worker's next read and counted)."""

    async def get(self, entry: str, field: str) -> tuple[str, bytes | None]:
        """(the entry's current token, the view stored under ``field`` with that token or None)."""
        ...

    async def put(self, entry: str, field: str, token: str, body: bytes, ttl_ms: int) -> None:
        """Store ``body`` under ``field`` with ``token``; the entry lives ``ttl_ms`` at least."""
        ...

    async def bump(self, entries: Sequence[str]) -> None:
        """Give each entry a fresh token, hiding every view stored before."""
        ...


class Fills:
    """Puts on the shared level ``shared`` that nobody waits for: a reader that loaded a view from
    the database answers at once, and its put follows. The token still guards the put: one that
    lands after a bump is never served. A put that fails leaves the entry for the next reader to
    fill: BreakerOpen (the level went down meanwhile) quietly, anything else in one log line."""

    __slots__ = ("_shared", "_running")

    def __init__(self, shared: SharedViews) -> None:
        self._shared = shared
        self._running: set[asyncio.Task[None]] = set()  # held until done (the loop keeps weak references)

    def put(self, entry: str, field: str, token: str, body: bytes, ttl_ms: int) -> None:
        """Start ``SharedViews.put`` of ``body`` under ``entry``/``field`` with ``token`` (``ttl_ms``)."""
        task = asyncio.ensure_future(self._shared.put(entry, field, token, body, ttl_ms))
        self._running.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        error = None if task.cancelled() else task.exception()
        if error is not None and not isinstance(error, BreakerOpen):
            log.warning("a shared view was not stored (the next reader stores it): %r", error)


def details_entry(order_id: str) -> str:
    """The entry of a packet's details."""
    return f"details:{{{order_id}}}"


def lists_entry(user_id: str) -> str:
    """The entry of a user's sent and received lists (every page and year)."""
    return f"lists:{{{user_id}}}"


class ViewCache:
    """Memory, then ``shared``, then the loader (the database). ``counts``: the worker's metrics
    events. Holds this worker's group memberships too (``members``, MEMORY_TTL_MS), which cached
    details are checked against."""

    __slots__ = ("_shared", "_fills", "_counts", "_memory", "_bumping", "members")

    def __init__(self, shared: SharedViews, counts: dict[str, int]) -> None:
        self._shared, self._counts = shared, counts
        self._fills = Fills(shared)
        # entry -> {field: (expires at ms, view)}: one drop forgets every field of an entry
        self._memory: TtlCache[str, dict[str, tuple[int, View]]] = TtlCache(FINAL_MEMORY_TTL_MS)
        self._bumping: dict[str, asyncio.Future[None]] = {}  # entry -> this worker's bump of it under way
        self.members: TtlCache[tuple[str, str], bool] = TtlCache(MEMORY_TTL_MS)

    def _remember(self, entry: str, field: str, view: View, final: bool, now_ms: int) -> None:
        fields = self._memory.get(entry, now_ms) or {}
        fields[field] = (now_ms + (FINAL_MEMORY_TTL_MS if final else MEMORY_TTL_MS), view)
        self._memory.put(entry, fields, now_ms)

    async def read(
        self, entry: str, field: str, now_ms: int, load: Callable[[], Awaitable[tuple[View, bool]]], kind: str
    ) -> View:
        """The view from the first level holding it; else ``load()`` -> (view, final), kept on
        both levels (the shared level's put is not waited for: ``Fills``). While this worker's bump
        of ``entry`` is under way, the shared level is read after it. Raises what ``load`` raises
        (nothing is kept then)."""
        held = (self._memory.get(entry, now_ms) or {}).get(field)
        if held is not None and held[0] > now_ms:
            return held[1]
        bumping = self._bumping.get(entry)
        if bumping is not None:
            await asyncio.shield(bumping)
        token: str | None
        try:
            token, raw = await self._shared.get(entry, field)
        except BreakerOpen:
            tally(self._counts, f"redis_fallback_{kind}")
            token, raw = None, None
        if raw is not None:
            view: View = orjson.loads(raw[1:])  # the first byte says whether it is final
            self._remember(entry, field, view, raw[:1] == b"1", now_ms)
            return view
        view, final = await load()  # raises: nothing kept
        self._remember(entry, field, view, final, now_ms)
        if token is not None:
            body = (b"1" if final else b"0") + orjson.dumps(view)
            self._fills.put(entry, field, token, body, FINAL_SHARED_TTL_MS if final else SHARED_TTL_MS)
        return view

    def changed(self, entries: Sequence[str]) -> asyncio.Future[None]:
        """After a database write: drop this worker's copies of ``entries`` at once and start their
        bump on the shared level; until it is done, this worker's reads of them wait for it, so a
        read here that follows the write never gets a view from before it, whether or not the
        writer waited. The future: the bump done (it never fails: SharedViews.bump)."""
        for entry in entries:
            self._memory.drop(entry)
        bump = asyncio.ensure_future(self._shared.bump(entries))
        for entry in entries:
            self._bumping[entry] = bump
        bump.add_done_callback(lambda done: self._bumped(entries, done))
        return bump

    def _bumped(self, entries: Sequence[str], done: asyncio.Future[None]) -> None:
        for entry in entries:
            if self._bumping.get(entry) is done:
                del self._bumping[entry]
