"""The clock port: every expiry and TTL reads time through it, so tests can move time.

Times are integer milliseconds since the Unix epoch, UTC.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol


class Clock(Protocol):
    """Source of the current time in milliseconds since the epoch (UTC)."""

    def now_ms(self) -> int:
        """Current time, ms since the Unix epoch."""
        ...


class SystemClock:
    """The wall clock (time.time_ns), truncated to milliseconds."""

    __slots__ = ()

    def now_ms(self) -> int:
        """Current wall-clock time, ms since the Unix epoch."""
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when told to (tests, replays)."""

    __slots__ = ("_now_ms",)

    def __init__(self, start_ms: int) -> None:
        self._now_ms = start_ms

    def now_ms(self) -> int:
        """The time last set, ms since the Unix epoch."""
        return self._now_ms

    def set_ms(self, now_ms: int) -> None:
        """Jump to ``now_ms`` (ms since the epoch); time may move backwards only in tests."""
        self._now_ms = now_ms

    def advance_ms(self, delta_ms: int) -> None:
        """Move forward by ``delta_ms`` milliseconds."""
        self._now_ms += delta_ms


class OffsetFileClock:
    """The wall clock plus an offset in ms kept in a file, shared by every worker of a test
    server (``test_clock``); the file is replaced on every change and re-read only when its
    (inode, mtime) changes. A frozen clock (``set_ms(..., frozen=True)``) stands still at the
    time set, so a test can act at an exact millisecond (the expiry edge: an open at expires_at - 1
    ms succeeds, one at expires_at is refused)."""

    __slots__ = ("_path", "_offset_ms", "_frozen_ms", "_version")

    def __init__(self, path: Path) -> None:
        self._path, self._offset_ms, self._version = path, 0, (0, 0)
        self._frozen_ms: int | None = None

    def now_ms(self) -> int:
        """Wall-clock ms since the epoch plus the shared offset (or the frozen time)."""
        try:
            st = self._path.stat()
            version = (st.st_ino, st.st_mtime_ns)
        except FileNotFoundError:
            version, self._offset_ms, self._frozen_ms = (0, 0), 0, None
        if version != self._version and version != (0, 0):
            text = self._path.read_text().strip()
            if text.startswith("="):
                self._frozen_ms = int(text[1:])
            else:
                self._offset_ms, self._frozen_ms = int(text or 0), None
        self._version = version
        if self._frozen_ms is not None:
            return self._frozen_ms
        return time.time_ns() // 1_000_000 + self._offset_ms

    def set_ms(self, now_ms: int, *, frozen: bool = False) -> None:
        """Move every worker's clock so that it reads ``now_ms`` now; with ``frozen`` it stays
        there until the next call."""
        text = f"={now_ms}" if frozen else str(now_ms - time.time_ns() // 1_000_000)
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self._path)
