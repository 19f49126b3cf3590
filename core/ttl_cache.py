"""A small per-worker memory cache with a time-to-live, read through the clock port.

The first cache level of DESIGN.md section 6 (per-worker memory with a short TTL). Entries are
plain Python objects; the size is bounded and the oldest entry goes first when it is full.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

from hongbao.core.clock import Clock

K = TypeVar("K")
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """Map K -> V where each entry lives ``ttl_ms`` milliseconds; at most ``max_entries`` entries."""

    __slots__ = ("_clock", "_ttl_ms", "_max", "_data")

    def __init__(self, clock: Clock, ttl_ms: int, max_entries: int = 100_000) -> None:
        self._clock, self._ttl_ms, self._max = clock, ttl_ms, max_entries
        self._data: OrderedDict[K, tuple[int, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The live value for ``key``, or None (missing or expired)."""
        entry = self._data.get(key)
        if entry is None:
            return None
        if entry[0] <= self._clock.now_ms():
            del self._data[key]
            return None
        return entry[1]

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` for the TTL, evicting the oldest entry when full."""
        self._data[key] = (self._clock.now_ms() + self._ttl_ms, value)
        self._data.move_to_end(key)
        if len(self._data) > self._max:
            self._data.popitem(last=False)

    def drop(self, key: K) -> None:
        """Forget ``key``."""
        self._data.pop(key, None)
