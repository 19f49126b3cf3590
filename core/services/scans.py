"""The windows of the reconciler's scans: each scan goes on from a cursor kept in a flag (shared
by every worker and node), so a run reads only what happened since the last one."""

from __future__ import annotations

from hongbao.core.clock import Clock
from hongbao.core.ports import Flags


async def scan_window(
    flags: Flags, clock: Clock, cursor_flag: str, window_ms: int, lookback_ms: int
) -> tuple[int, int]:
    """[start, end) in ms of a scan: from the time in flag ``cursor_flag`` (at most ``lookback_ms``
    back, and from there when the clock moved back past it) to ``window_ms`` ago."""
    end = clock.now_ms() - window_ms
    cursor = int(await flags.get(cursor_flag) or 0)
    return (cursor if end - lookback_ms <= cursor <= end else end - lookback_ms), end
