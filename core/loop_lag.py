"""How far behind its own timers a worker's event loop runs: the signal that tells an overloaded
worker from a slow dependency.

A timer set ``INTERVAL_S`` ahead fires late by however long the loop was busy with other
callbacks (uvloop, like libuv, runs due timers once per iteration, before polling I/O). A
worker with more work than CPU answers everything late, and a bound on a database call that
passes then is no evidence that the database hangs: its reply may be waiting in the socket
buffer while the loop runs other callbacks. ``LoopLag`` keeps the lateness of its recent ticks
so that callers can ask "how long was the loop unavailable since t" (a bound that passed, see
hongbao.core.adapters.mysql.db) and "how late is it now" (the HTTP layer sheds new requests
with 429 busy while it is far behind, server/app.py).
"""

from __future__ import annotations

import asyncio
from collections import deque

INTERVAL_S = 0.025  # a tick every 25 ms: 40 callbacks a second per worker
KEEP_S = 5.0  # ticks remembered (the longest bound a caller asks about)


class LoopLag:
    """The lateness of a ticker on the running loop (``start``), in milliseconds. Before
    ``start`` (or after ``stop``) every answer is 0: nothing is known to lag."""

    __slots__ = ("_loop", "_handle", "_due", "_ticks")

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._ticks: deque[tuple[float, float]] = deque(maxlen=round(KEEP_S / INTERVAL_S))  # (fired at, late s)

    def start(self) -> None:
        """Tick every INTERVAL_S on the running loop (raises RuntimeError outside one)."""
        self._loop = asyncio.get_running_loop()
        self._arm(self._loop.time())

    def stop(self) -> None:
        """Stop ticking; the answers fall back to 0."""
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self._loop = None, None
        self._ticks.clear()

    def _arm(self, now: float) -> None:
        assert self._loop is not None
        self._due = now + INTERVAL_S
        self._handle = self._loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        assert self._loop is not None
        now = self._loop.time()
        self._ticks.append((now, now - self._due))
        self._arm(now)

    def _overdue_s(self) -> float:
        """How late the next tick already is (0 when it is not due yet, or nothing ticks)."""
        return 0.0 if self._loop is None else max(0.0, self._loop.time() - self._due)

    def behind_ms(self) -> float:
        """How late the loop runs now: the later of the last tick's lateness and how overdue the
        next one is (ms)."""
        last = self._ticks[-1][1] if self._ticks else 0.0
        return 1000 * max(last, self._overdue_s())

    def now(self) -> float:
        """The loop's clock (``loop.time()``, seconds) for a later :meth:`lagged`; 0 before ``start``."""
        return 0.0 if self._loop is None else self._loop.time()

    def lagged(self, since: float) -> bool:
        """True when the loop was unavailable to timers for a third or more of the time since
        ``since`` (a :meth:`now` within the last KEEP_S): a bound that passed meanwhile says the
        worker is overloaded, not that its dependency went silent. False before ``start``."""
        if self._loop is None:
            return False
        return 3 * self.stalled_ms(since) >= 1000 * (self._loop.time() - since)

    def stalled_ms(self, since: float) -> float:
        """How long the loop was unavailable to timers since ``since`` (a ``loop.time()``, within
        the last KEEP_S): the part after ``since`` of the lateness of every tick fired after it
        and of how overdue the next one is (ms)."""
        if self._loop is None:
            return 0.0
        late = min(self._overdue_s(), self._loop.time() - since)
        for fired, lateness in reversed(self._ticks):
            if fired <= since:
                break
            late += min(lateness, fired - since)  # the part of its stall after ``since``
        return 1000 * late
