"""hongbao_native routing hashes (native/src/routing.rs) against tests/reference/routing.py."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import hongbao_native as hn
import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from tests.reference import order_id as ref_id
from tests.reference import routing as ref

# XXH3_64bits(seed 0) of the first n bytes of bytes((7 * i + 3) % 256 for i in range(2048)), from the
# C xxHash library; the lengths cross every size class of XXH3 (0, 1-3, 4-8, 9-16, 17-128, 129-240, more).
BUF = bytes((7 * i + 3) % 256 for i in range(2048))
XXH3_GOLDEN = {
    0: 0x2D06800538D394C2,
    1: 0x13E608BC156DEFED,
    3: 0xA9088DDA485B481C,
    4: 0x6D9253B16C8B1ED3,
    8: 0x60539DB630471163,
    9: 0xFEFF668361D723A8,
    16: 0xB8C859B0F030B585,
    17: 0x714A04408E79B80F,
    128: 0x67425A03650261BF,
    129: 0xC664BF3311C6ABC4,
    240: 0x64556DC6B462A6CF,
    241: 0x8BEADD3A8874FE17,
    1024: 0x9B81661C641C72B1,
    2048: 0xABE604813BA62ED1,
}
# order id -> (shard_of(id, 4, 8), shard_of(id, 16, 32))
SHARD_GOLDEN = {
    "12402290000000000421": ((0, 4, 29), (0, 21, 29)),
    "29912311999999999997": ((1, 2, 31), (9, 14, 31)),
    "10001010000000000004": ((2, 5, 1), (6, 1, 1)),
    "22508150001234567899": ((3, 3, 15), (15, 28, 15)),
}
NODE_COUNTS = (1, 2, 3, 10, 100, 1000)
# key -> ([node_of(key, n) for n in NODE_COUNTS], online_shard(key))
NODE_GOLDEN = {
    "": ([0, 0, 0, 0, 52, 241], 2),
    "user:1": ([0, 1, 1, 1, 69, 198], 1),
    "\u7ea2\u5305": ([0, 1, 2, 6, 94, 743], 7),
    "order:12402290000000000421": ([0, 0, 0, 8, 8, 680], 9),
}

dates = st.dates(datetime.date(2000, 1, 1), datetime.date(2099, 12, 31)).map(
    lambda d: (d.year - 2000) * 10000 + d.month * 100 + d.day
)
valid_ids = st.tuples(st.sampled_from([1, 2]), dates, st.sampled_from([0, 1]), st.integers(0, 10**11 - 1)).map(
    lambda p: ref_id.encode(*p)
)
counts = st.one_of(st.integers(1, 64), st.integers(1, 2**31 - 1))
keys = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=64)


def outcome(f: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """A call's result, or its exception type and message (TypeError text is the binding's own)."""
    try:
        return ("ok", f(*args))
    except TypeError:
        return ("TypeError",)
    except ValueError as e:
        return (type(e).__name__, str(e))


def test_xxh3_golden_vectors() -> None:
    """xxh3_64 returns the literal XXH3_64bits values across all input size classes."""
    for n, h in XXH3_GOLDEN.items():
        assert hn.xxh3_64(BUF[:n]) == h
        assert xxhash.xxh3_64_intdigest(BUF[:n]) == h


@given(st.binary(max_size=2100))
def test_xxh3_matches_c_xxhash(data: bytes) -> None:
    """xxh3_64 equals the C xxHash library's XXH3_64bits with seed 0 for any bytes."""
    assert hn.xxh3_64(data) == xxhash.xxh3_64_intdigest(data, seed=0)


def test_xxh3_takes_only_bytes() -> None:
    """xxh3_64 rejects str and other non-bytes objects with TypeError."""
    for bad in ("abc", None, 5):
        with pytest.raises(TypeError):
            hn.xxh3_64(bad)  # type: ignore[arg-type]


def test_jump_hash_reference_matches_published_vectors() -> None:
    """The reference jump hash reproduces ClickHouse's jumpConsistentHash test vectors."""
    # ClickHouse tests/queries/0_stateless/00580_consistent_hashing_functions.{sql,reference}
    cases = [
        (1, 1, 0),
        (42, 57, 43),
        (256, 1024, 520),
        (3735883980, 1, 0),
        (3735883980, 666, 361),
        (16045690984833335023, 255, 237),
    ]
    for key, n, expected in cases:
        assert ref.jump_hash(key, n) == expected


def test_shard_golden_vectors() -> None:
    """shard_of returns the literal (db, table, day) of known ids, like the reference."""
    for oid, (small, large) in SHARD_GOLDEN.items():
        assert hn.shard_of(oid, 4, 8) == small == ref.shard_of(oid, 4, 8)
        assert hn.shard_of(oid, 16, 32) == large == ref.shard_of(oid, 16, 32)
        h = xxhash.xxh3_64_intdigest(oid.encode())
        assert small == (h % 4, h // 4 % 8, int(oid[5:7]))


def test_node_and_online_shard_golden_vectors() -> None:
    """node_of and online_shard return the literal values of known keys, like the reference."""
    for key, (nodes, shard) in NODE_GOLDEN.items():
        assert [hn.node_of(key, n) for n in NODE_COUNTS] == nodes
        assert [ref.node_of(key, n) for n in NODE_COUNTS] == nodes
        assert hn.online_shard(key) == shard == ref.online_shard(key)


@given(valid_ids, counts, counts)
def test_shard_of_matches_reference(oid: str, n_db: int, n_tables: int) -> None:
    """shard_of of any valid id and counts equals the reference and stays in range."""
    db, table, day = hn.shard_of(oid, n_db, n_tables)
    assert (db, table, day) == ref.shard_of(oid, n_db, n_tables)
    assert 0 <= db < n_db and 0 <= table < n_tables and day == hn.decode_order_id(oid).day


@given(
    st.one_of(valid_ids, st.text(max_size=22), st.from_regex(r"[0-9]{20}", fullmatch=True)),
    st.one_of(counts, st.integers()),
    st.one_of(counts, st.integers()),
)
def test_shard_of_errors_match_reference(oid: str, n_db: int, n_tables: int) -> None:
    """Bad counts and bad ids raise the reference's ValueError (counts checked first)."""
    assert outcome(hn.shard_of, oid, n_db, n_tables) == outcome(ref.shard_of, oid, n_db, n_tables)


@given(keys, counts)
def test_node_of_matches_reference(key: str, n_nodes: int) -> None:
    """node_of equals the paper's jump hash of xxh3-64(key) and lies in [0, n_nodes)."""
    node = hn.node_of(key, n_nodes)
    assert node == ref.node_of(key, n_nodes)
    assert 0 <= node < n_nodes


@given(keys)
def test_online_shard_matches_reference(key: str) -> None:
    """online_shard equals xxh3-64(user id) mod 16."""
    assert hn.online_shard(key) == ref.online_shard(key) == xxhash.xxh3_64_intdigest(key.encode()) % 16


@pytest.mark.parametrize("bad", [0, -1, 2**31, 2**64, -(2**70)])
def test_counts_out_of_range_raise_value_error(bad: int) -> None:
    """Counts outside [1, 2**31) raise ValueError naming the argument, never OverflowError."""
    oid = next(iter(SHARD_GOLDEN))
    for call, name in [
        (lambda: hn.shard_of(oid, bad, 2), "n_db"),
        (lambda: hn.shard_of(oid, 2, bad), "n_tables"),
        (lambda: hn.node_of("k", bad), "n_nodes"),
    ]:
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value) == f"{name} must be in [1, 2**31), got {bad}"
        assert type(e.value) is ValueError
    assert hn.node_of("k", 2**31 - 1) == ref.node_of("k", 2**31 - 1)


def test_shard_of_rejects_invalid_ids_like_decode() -> None:
    """shard_of validates the id with decode_order_id's messages, TypeError for non-str."""
    for bad in ["12402290000000000423", "1240229000000000042", "\ud800" * 20]:
        with pytest.raises(ValueError) as e:
            hn.shard_of(bad, 2, 2)
        with pytest.raises(ValueError) as d:
            hn.decode_order_id(bad)
        assert str(e.value) == str(d.value)
    with pytest.raises(TypeError):
        hn.shard_of(b"12402290000000000421", 2, 2)  # type: ignore[arg-type]
    for f in (hn.node_of, lambda k, _n: hn.online_shard(k)):
        with pytest.raises(TypeError):
            f(b"user", 3)
        with pytest.raises(ValueError):
            f("\ud800", 3)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 10, 31, 99])
def test_growing_the_cluster_moves_about_one_share_to_the_new_node(n: int) -> None:
    """From n to n+1 nodes, about 1/(n+1) of 100 000 keys move, every one of them to node n."""
    keys = [f"user:{i}" for i in range(100_000)]
    before = [hn.node_of(k, n) for k in keys]
    after = [hn.node_of(k, n + 1) for k in keys]
    moved = [(b, a) for b, a in zip(before, after, strict=True) if a != b]
    assert all(a == n for _, a in moved)
    p = 1 / (n + 1)
    sd = (len(keys) * p * (1 - p)) ** 0.5
    assert abs(len(moved) - len(keys) * p) < 5 * sd, (len(moved), len(keys) * p)
    assert len(set(after)) == n + 1


def test_node_of_is_balanced() -> None:
    """100 000 keys over 10 nodes pass a chi-square uniformity test at p >= 1e-4."""
    counts = Counter(hn.node_of(f"packet:{i}", 10) for i in range(100_000))
    assert sorted(counts) == list(range(10))
    assert stats.chisquare([counts[i] for i in range(10)]).pvalue >= 1e-4


def test_online_shard_is_in_range_and_uniform() -> None:
    """online_shard of 100 000 user ids lies in [0, 16), each shard within 5% of 1/16, chi-square p >= 1e-4."""
    counts = Counter(hn.online_shard(f"u{i}") for i in range(100_000))
    assert sorted(counts) == list(range(16))
    assert all(abs(c - 6250) < 0.05 * 6250 for c in counts.values())
    assert stats.chisquare([counts[i] for i in range(16)]).pvalue >= 1e-4


def test_routing_is_stable_across_processes() -> None:
    """A fresh interpreter with another PYTHONHASHSEED routes every key and id the same way."""
    code = (
        "import hongbao_native as hn\n"
        "print([hn.node_of(k, 100) for k in ('', 'user:1', 'a' * 300)],"
        " [hn.online_shard(k) for k in ('', 'user:1')],"
        " hn.shard_of('12402290000000000421', 16, 32), hn.xxh3_64(b'hongbao'))\n"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    here = (
        f"{[hn.node_of(k, 100) for k in ('', 'user:1', 'a' * 300)]}"
        f" {[hn.online_shard(k) for k in ('', 'user:1')]}"
        f" {hn.shard_of('12402290000000000421', 16, 32)} {hn.xxh3_64(b'hongbao')}"
    )
    assert out.strip() == here
    assert hn.xxh3_64(b"hongbao") == xxhash.xxh3_64_intdigest(b"hongbao")
