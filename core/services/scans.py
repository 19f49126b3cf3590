"""The windows of the reconciler's scans: each scan goes on from a cursor kept in a flag (shared
by every worker and node), so a run reads only what happened since the last one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from hongbao.core.clock import Clock
from hongbao.core.ports import Flags

T = TypeVar("T")


async def scan_window(
    flags: Flags, clock: Clock, cursor_flag: str, window_ms: int, lookback_ms: int
) -> tuple[int, int]:
    """[start, end) in ms of a scan: from the time in flag ``cursor_flag`` (at most ``lookback_ms``
    back, and from there when the clock moved back past it) to ``window_ms`` ago."""
    end = clock.now_ms() - window_ms
    cursor = int(await flags.get(cursor_flag) or 0)
    return (cursor if end - lookback_ms <= cursor <= end else end - lookback_ms), end


#: Items of one millisecond a scan reads at once when a whole page fell within it (no bound in practice).
ONE_MS_MAX = 1_000_000


async def page(
    read: Callable[[int, int, int], Awaitable[list[T]]], at: Callable[[T], int], start: int, end: int, limit: int
) -> tuple[list[T], int]:
    """One page of a scan of [start, end) ms: ``read(start, end, limit)`` (oldest first, at most
    ``limit``) and where the next page starts: ``end`` after a page that is not full, else the
    page's last time ``at(item)`` (that millisecond is read again: the caller is idempotent);
    when the whole full page is within ``start``'s millisecond, every item of that millisecond
    (``read(start, start + 1, ONE_MS_MAX)``) and ``start + 1``, so the cursor always moves on."""
    found = await read(start, end, limit)
    if len(found) < limit:
        return found, end
    last = at(found[-1])
    if last > start:
        return found, last
    return await read(start, start + 1, ONE_MS_MAX), start + 1
