"""Order-id codec and shard routing, native vs the pure-Python reference (report: ns per call).

Groups: "order_id_roundtrip" (encode then decode one id) and "shard_of" (route one id to
(db, table, day)); impls "native" and "reference"."""

from __future__ import annotations

from typing import Any

import hongbao_native as hn
from pytest_benchmark.fixture import BenchmarkFixture

from tests.reference import order_id as ref_id
from tests.reference import routing as ref_routing

PARTS = (2, 250815, 1, 123456789)
ORDER_ID = "22508151001234567894"  # encode_order_id(*PARTS)
N_DB, N_TABLES = 16, 32


def _native_roundtrip() -> Any:
    return hn.decode_order_id(hn.encode_order_id(*PARTS))


def _reference_roundtrip() -> Any:
    return ref_id.decode(ref_id.encode(*PARTS))


def _fields(p: Any) -> tuple[int, int, int, int]:
    return (p.region, p.yymmdd, p.source, p.sequence)


def test_roundtrip_native(benchmark: BenchmarkFixture) -> None:
    """Native encode + decode of one order id."""
    benchmark.group = "order_id_roundtrip"
    benchmark.extra_info["impl"] = "native"
    result = benchmark(_native_roundtrip)
    correct = _fields(result) == PARTS and result.day == 15
    benchmark.extra_info["correct"] = correct
    assert correct


def test_roundtrip_reference(benchmark: BenchmarkFixture) -> None:
    """Reference encode + decode of one order id."""
    benchmark.group = "order_id_roundtrip"
    benchmark.extra_info["impl"] = "reference"
    result = benchmark(_reference_roundtrip)
    correct = _fields(result) == PARTS and result.day == 15
    benchmark.extra_info["correct"] = correct
    assert correct


def test_shard_of_native(benchmark: BenchmarkFixture) -> None:
    """Native shard_of (validates the id, hashes it with xxh3-64)."""
    benchmark.group = "shard_of"
    benchmark.extra_info["impl"] = "native"
    result = benchmark(hn.shard_of, ORDER_ID, N_DB, N_TABLES)
    correct = result == ref_routing.shard_of(ORDER_ID, N_DB, N_TABLES) and result[2] == 15
    benchmark.extra_info["correct"] = correct
    assert correct


def test_shard_of_reference(benchmark: BenchmarkFixture) -> None:
    """Reference shard_of (pure-Python decode, C xxhash)."""
    benchmark.group = "shard_of"
    benchmark.extra_info["impl"] = "reference"
    result = benchmark(ref_routing.shard_of, ORDER_ID, N_DB, N_TABLES)
    correct = result == hn.shard_of(ORDER_ID, N_DB, N_TABLES) and result[2] == 15
    benchmark.extra_info["correct"] = correct
    assert correct
