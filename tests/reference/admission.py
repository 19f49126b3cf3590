"""Reference semantics of hongbao_native.AdmissionTable (native/src/admission.rs), as plain
Python over a dict, with the process id passed explicitly.

The native table adds what a dict cannot give: shared memory, a lock across processes, and slot
reuse through backward-shift deletion. This model states only the observable contract."""

from __future__ import annotations

from collections import Counter

LIMIT_MAX = 2**32 - 1


class TableFull(Exception):
    """The model's counterpart of hongbao_native.AdmissionTableFull."""


class AdmissionModel:
    """Counts per (key, pid); at most `capacity` pairs with a count > 0."""

    __slots__ = ("capacity", "counts")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.counts: Counter[tuple[str, int]] = Counter()

    def in_flight(self, key: str) -> int:
        """Sum of the key's counts over every pid."""
        return sum(c for (k, _), c in self.counts.items() if k == key)

    def try_enter(self, key: str, limit: int, pid: int) -> bool:
        """Enter if fewer than `limit` are inside `key`; TableFull if a new pair finds no room."""
        if not 0 <= limit <= LIMIT_MAX:
            raise ValueError(f"limit must be in [0, {LIMIT_MAX}], got {limit}")
        if self.in_flight(key) >= limit:
            return False
        if (key, pid) not in self.counts and len(self.counts) >= self.capacity:
            raise TableFull(key)
        self.counts[(key, pid)] += 1
        return True

    def leave(self, key: str, pid: int) -> None:
        """Give one back; ValueError if `pid` holds none for `key`."""
        held = self.counts.get((key, pid), 0)
        if held == 0:
            raise ValueError("this process holds no admission for this key")
        if held == 1:
            del self.counts[(key, pid)]
        else:
            self.counts[(key, pid)] = held - 1

    def reclaim(self, pid: int) -> int:
        """Drop every count of `pid`; return how many."""
        mine = [pair for pair in self.counts if pair[1] == pid]
        return sum(self.counts.pop(pair) for pair in mine)

    def __len__(self) -> int:
        return len(self.counts)
