"""Admission pair (try_enter + leave on one key): the native shared-memory table against a
multiprocessing.Value guarded by its own lock doing the same check-and-increment / decrement.

Group "admission_pair", impls "native" and "mp_value_lock". One benchmarked call runs
PAIRS_PER_CALL pairs so the timer's own overhead does not swamp a ~100 ns pair; measured runs
save the median per pair as extra_info["ns_per_pair"]."""

from __future__ import annotations

import multiprocessing as mp
import os
import uuid
from collections.abc import Callable, Iterator
from multiprocessing.sharedctypes import Synchronized

import hongbao_native as hn
import pytest

KEY = "12402290000000000421"
LIMIT = 8
PAIRS_PER_CALL = 100


class ValueLockTable:
    """The same contract as AdmissionTable for one process's view: a shared counter per key."""

    __slots__ = ("counters",)

    def __init__(self, keys: list[str]) -> None:
        self.counters: dict[str, Synchronized[int]] = {k: mp.Value("q", 0) for k in keys}

    def try_enter(self, key: str, limit: int) -> bool:
        counter = self.counters[key]
        with counter.get_lock():
            if counter.value >= limit:
                return False
            counter.value += 1
            return True

    def leave(self, key: str) -> None:
        counter = self.counters[key]
        with counter.get_lock():
            if counter.value <= 0:
                raise ValueError("no admission held for this key")
            counter.value -= 1

    def in_flight(self, key: str) -> int:
        counter = self.counters[key]
        with counter.get_lock():
            return int(counter.value)


@pytest.fixture
def native_table() -> Iterator[hn.AdmissionTable]:
    table = hn.AdmissionTable.create(f"bench-{os.getpid()}-{uuid.uuid4().hex[:8]}", 1024)
    table.unlink()  # the mapping lives on; nothing is left in /dev/shm
    yield table


def _pairs(table: hn.AdmissionTable | ValueLockTable) -> Callable[[], int]:
    try_enter, leave, calls = table.try_enter, table.leave, range(PAIRS_PER_CALL)

    def pairs() -> int:
        entered = 0
        for _ in calls:
            entered += try_enter(KEY, LIMIT)
            leave(KEY)
        return entered

    return pairs


# The group is fixed before the timed call: pytest-benchmark reads it when it starts measuring.
pytestmark = pytest.mark.benchmark(group="admission_pair")


def _record(benchmark, impl: str, correct: bool) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info["impl"] = impl
    benchmark.extra_info["correct"] = correct
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        benchmark.extra_info["ns_per_pair"] = round(stats.stats.median * 1e9 / PAIRS_PER_CALL, 1)
    assert correct


def _check(table: hn.AdmissionTable | ValueLockTable) -> bool:
    """The contract the pair relies on: exactly LIMIT admitted, then refused, and back to 0."""
    admitted = [table.try_enter(KEY, LIMIT) for _ in range(LIMIT + 1)]
    for _ in range(LIMIT):
        table.leave(KEY)
    return admitted == [True] * LIMIT + [False] and table.in_flight(KEY) == 0


def test_admission_pair_native(benchmark, native_table: hn.AdmissionTable) -> None:  # type: ignore[no-untyped-def]
    """try_enter + leave pairs on the native shared-memory table."""
    result = benchmark(_pairs(native_table))
    correct = result == PAIRS_PER_CALL and native_table.in_flight(KEY) == 0 and len(native_table) == 0
    _record(benchmark, "native", correct and _check(native_table))


def test_admission_pair_mp_value_lock(benchmark) -> None:  # type: ignore[no-untyped-def]
    """try_enter + leave pairs on a multiprocessing.Value with its lock."""
    table = ValueLockTable([KEY])
    result = benchmark(_pairs(table))
    _record(benchmark, "mp_value_lock", result == PAIRS_PER_CALL and table.in_flight(KEY) == 0 and _check(table))
