"""A small per-worker memory cache with a time-to-live, on the caller's clock reading.

The first cache level of docs/architecture.md section 6 (per-worker memory with a short TTL). Entries are
plain Python objects; the size is bounded and the oldest entry goes first when it is full. The
caller passes ``now_ms`` (its clock port's reading), so a request that reads several caches
reads the clock once.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """Map K -> V where each entry lives ``ttl_ms`` milliseconds; at most ``max_entries`` entries."""

    __slots__ = ("_ttl_ms", "_max", "_data")

    def __init__(self, ttl_ms: int, max_entries: int = 100_000) -> None:
        self._ttl_ms, self._max = ttl_ms, max_entries
        self._data: OrderedDict[K, tuple[int, V]] = OrderedDict()

    def get(self, key: K, now_ms: int) -> V | None:
        """The value for ``key`` if it is still live at ``now_ms``, else None (missing or expired)."""
        entry = self._data.get(key)
        if entry is None:
            return None
        if entry[0] <= now_ms:
            del self._data[key]
            return None
        return entry[1]

    def put(self, key: K, value: V, now_ms: int, ttl_ms: int | None = None) -> None:
        """Keep ``value`` until ``now_ms`` + ``ttl_ms`` (None: the cache's TTL), evicting the oldest
        entry when full."""
        self._data[key] = (now_ms + (self._ttl_ms if ttl_ms is None else ttl_ms), value)
        self._data.move_to_end(key)
        if len(self._data) > self._max:
            self._data.popitem(last=False)

    def drop(self, key: K) -> None:
        """Forget ``key``."""
        self._data.pop(key, None)

    def clear(self) -> None:
        """Forget every entry."""
        self._data.clear()
