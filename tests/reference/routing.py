"""Reference routing hashes (docs/architecture.md section 4), mirroring native/src/routing.rs.

The hash is xxh3-64 with seed 0 from the `xxhash` package (the C library by Yann Collet), an
implementation independent of the Rust crate; jump hash is the paper's C++ pseudo-code
(Lamping & Veach 2014, arXiv:1406.2294, figure 1) with the same float operations."""

from __future__ import annotations

import xxhash

from tests.reference import order_id

ONLINE_SHARDS = 16
COUNT_LIMIT = 2**31
_U64 = 2**64


def xxh3_64(data: bytes) -> int:
    """xxh3-64 of data, seed 0."""
    return xxhash.xxh3_64_intdigest(data, seed=0)


def jump_hash(key: int, n_buckets: int) -> int:
    """Bucket in [0, n_buckets) of a 64-bit key."""
    b, j = -1, 0
    while j < n_buckets:
        b = j
        key = (key * 2862933555777941757 + 1) % _U64
        j = int((b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return b


def _check_count(name: str, value: int) -> None:
    if not 1 <= value < COUNT_LIMIT:
        raise ValueError(f"{name} must be in [1, 2**31), got {value}")


def shard_of(oid: str, n_db: int, n_tables: int) -> tuple[int, int, int]:
    """(db, table, day): db = h mod N, table = (h div N) mod M, day = the id's dd."""
    _check_count("n_db", n_db)
    _check_count("n_tables", n_tables)
    day = order_id.decode(oid).day
    h = xxh3_64(oid.encode("ascii"))
    return h % n_db, h // n_db % n_tables, day


def node_of(key: str, n_nodes: int) -> int:
    """Jump consistent hash of xxh3-64(key as UTF-8)."""
    _check_count("n_nodes", n_nodes)
    return jump_hash(xxh3_64(key.encode("utf-8")), n_nodes)


def online_shard(user_id: str) -> int:
    """xxh3-64(user id as UTF-8) mod 16."""
    return xxh3_64(user_id.encode("utf-8")) % ONLINE_SHARDS
