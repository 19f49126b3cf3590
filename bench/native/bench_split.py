"""Lucky split, native vs the pure-Python reference rule (docs/architecture.md section 3).

Group "split_all_100": a whole 100-share packet, `split_all(10000, 100)`; impls "native" (a seeded
`Splitter`, ChaCha20) and "reference" (`tests.reference.split.split_all` with the reference's own rejection rule
`below_u64` over `random.Random.getrandbits(64)`, so the race is the per-share arithmetic, not a
pure-Python ChaCha20).
The release gate's floor is 30x.

Group "split_lucky_call": one share, `split_lucky(10000, 10)`; impls "native" (OS-seeded thread-local
ChaCha20) and "reference" (`tests.reference.split.lucky_share`, same u64 source).
Reported for the per-call overhead."""

from __future__ import annotations

import functools
import random

import hongbao_native as hn
from pytest_benchmark.fixture import BenchmarkFixture

from tests.reference import split as ref

TOTAL, COUNT = 10000, 100
ONE_TOTAL, ONE_COUNT = 10000, 10


def _reference_below(seed: int) -> ref.Below:
    """The reference's integer-in-[0, k) rule over Mersenne Twister u64 words instead of ChaCha20."""
    return functools.partial(ref.below_u64, functools.partial(random.Random(seed).getrandbits, 64))


def _packet_ok(shares: list[int]) -> bool:
    return len(shares) == COUNT and sum(shares) == TOTAL and min(shares) >= 1


def _share_ok(share: int) -> bool:
    # F = 9990, U <= ceil(2F / 10) = 1998, so a share is in 1..1999.
    return 1 <= share <= 1999


def test_split_all_100_native(benchmark: BenchmarkFixture) -> None:
    """Native seeded Splitter.split_all of a 100-share packet."""
    benchmark.group = "split_all_100"
    benchmark.extra_info["impl"] = "native"
    splitter = hn.Splitter(20240603)
    result = benchmark(splitter.split_all, TOTAL, COUNT)
    correct = _packet_ok(result)
    benchmark.extra_info["correct"] = correct
    assert correct


def test_split_all_100_reference(benchmark: BenchmarkFixture) -> None:
    """Reference rule over random.Random u64 words for a 100-share packet."""
    benchmark.group = "split_all_100"
    benchmark.extra_info["impl"] = "reference"
    below = _reference_below(20240603)
    result = benchmark(ref.split_all, TOTAL, COUNT, below)
    correct = _packet_ok(result)
    benchmark.extra_info["correct"] = correct
    assert correct


def test_split_lucky_call_native(benchmark: BenchmarkFixture) -> None:
    """Native split_lucky: one OS-seeded share."""
    benchmark.group = "split_lucky_call"
    benchmark.extra_info["impl"] = "native"
    result = benchmark(hn.split_lucky, ONE_TOTAL, ONE_COUNT)
    correct = _share_ok(result)
    benchmark.extra_info["correct"] = correct
    assert correct


def test_split_lucky_call_reference(benchmark: BenchmarkFixture) -> None:
    """Reference lucky_share over random.Random u64 words: one share."""
    benchmark.group = "split_lucky_call"
    benchmark.extra_info["impl"] = "reference"
    below = _reference_below(20240603)
    result = benchmark(ref.lucky_share, ONE_TOTAL, ONE_COUNT, below)
    correct = _share_ok(result)
    benchmark.extra_info["correct"] = correct
    assert correct
