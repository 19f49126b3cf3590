"""A circuit breaker: after ``threshold`` consecutive failures of a dependency, calls skip it for
``cooldown_s`` seconds (raising :class:`BreakerOpen` at once, so the caller takes its fallback in
microseconds instead of waiting out connection retries); then one trial call per cooldown goes
through, and the first success closes the breaker (Nygard, *Release It!*, "Circuit Breaker").

Our own ~60 lines rather than a library: the hot path is one attribute read and no await;
aiobreaker (last release 2021) is unmaintained, pybreaker's async support goes through Tornado,
and purgatory keeps its state behind an async repository API -- an await per request for nothing.
Opening and closing are logged (``hongbao.breaker``) and counted in ``counts`` (the worker's
metrics events, see hongbao.server.metrics): ``<name>_breaker_opens``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from hongbao.core.loop_lag import LoopLag

log = logging.getLogger("hongbao.breaker")
T = TypeVar("T")


def tally(counts: dict[str, int], name: str, n: int = 1) -> None:
    """Add ``n`` to event counter ``name`` of ``counts`` (a worker's metrics events: the fallbacks
    and breaker openings of every adapter, exported by hongbao.server.metrics)."""
    counts[name] = counts.get(name, 0) + n


class BreakerOpen(Exception):
    """The dependency is considered down: the call was skipped, or it failed with a down error
    (then chained as ``__cause__``). Callers catch it and take their fallback."""


class Breaker:
    """One dependency's breaker, shared by every adapter of that dependency in one worker.

    ``errors``: the exception types that mean "down" (others propagate unchanged and do not
    count); ``threshold``: consecutive down errors that open it; ``cooldown_s``: seconds open
    before a trial call; ``counts``: event counters bumped on opening; ``now``: a monotonic clock
    in seconds (tests may pass their own). ``lag``: the worker's loop lag
    (hongbao.core.loop_lag), with ``timeouts``: the down errors that mean a bound passed. Such an
    error in a call during which the loop was unavailable for a third of the time or more fails
    that call alone (BreakerOpen, its fallback) and does not count: the reply may have been
    waiting in the socket while the loop ran other callbacks (an asyncio timeout fires before the
    task it cancels resumes), so it says the worker is overloaded, not that the dependency is down."""

    __slots__ = (
        "name",
        "errors",
        "threshold",
        "cooldown_s",
        "counts",
        "lag",
        "timeouts",
        "_now",
        "_failures",
        "_open_until",
    )

    def __init__(
        self,
        name: str,
        errors: tuple[type[BaseException], ...],
        counts: dict[str, int],
        *,
        threshold: int = 2,
        cooldown_s: float = 1.0,
        now: Callable[[], float] = time.monotonic,
        lag: LoopLag | None = None,
        timeouts: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.name, self.errors, self.counts = name, errors, counts
        self.lag, self.timeouts = lag, timeouts
        self.threshold, self.cooldown_s, self._now = threshold, cooldown_s, now
        self._failures = 0
        self._open_until: float | None = None  # None: closed

    @property
    def is_open(self) -> bool:
        """True while calls are being skipped (or only trial calls go through)."""
        return self._open_until is not None

    @property
    def is_clean(self) -> bool:
        """True when closed with no failure counted: a call made around :meth:`call` (a fast path
        that falls back to ``call`` on any error) changes nothing in the breaker by succeeding."""
        return self._open_until is None and not self._failures

    async def call(self, op: Callable[[], Awaitable[T]]) -> T:
        """``await op()`` unless the breaker is open. Raises BreakerOpen when skipped or when
        ``op`` raised one of ``errors``; any other exception of ``op`` propagates."""
        if self._open_until is not None:
            now = self._now()
            if now < self._open_until:
                raise BreakerOpen(f"{self.name} is down (breaker open)")
            self._open_until = now + self.cooldown_s  # this call is the trial; the others keep skipping
        lag = self.lag
        started = 0.0 if lag is None else lag.now()
        try:
            result = await op()
        except self.errors as exc:
            if lag is not None and isinstance(exc, self.timeouts) and lag.lagged(started):
                raise BreakerOpen(f"{self.name} answered late while this worker's loop lagged: {exc!r}") from exc
            self._failed(exc)
            raise BreakerOpen(f"{self.name} is down: {exc!r}") from exc
        if self._failures or self._open_until is not None:
            if self._open_until is not None:
                log.warning("%s is back: breaker closed", self.name)
            self._failures, self._open_until = 0, None
        return result

    def _failed(self, exc: BaseException) -> None:
        self._failures += 1
        if self._open_until is None and self._failures >= self.threshold:
            self._open_until = self._now() + self.cooldown_s
            tally(self.counts, f"{self.name}_breaker_opens")
            log.warning(
                "%s is down (%r): breaker open, fallbacks for %.1f s before a trial", self.name, exc, self.cooldown_s
            )
        elif self._open_until is not None:
            self._open_until = self._now() + self.cooldown_s
