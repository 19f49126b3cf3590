"""Pure-Python reference of the lucky and equal split (docs/architecture.md section 3) and of its seeded generator.

The rule, with m fen and n shares left: n == 1 gives m. Otherwise F = m - n, q, r = divmod(2F, n);
U = q, plus one when a coin `below(n)` is < r (drawn only when r > 0); the share is 1 + below(U + 1),
where below(1) is 0 and draws nothing. `below(k)` is the rejection rule of docs/architecture.md section 3: draw a
u64 v, reject while v >= 2**64 - (2**64 mod k), return v mod k. The seeded source is ChaCha20 keyed by
the seed's 8 little-endian bytes zero-padded to 32, stream 0 (see `tests.reference.chacha20`), so
`Splitter(seed).split_all` here equals `hongbao_native.Splitter(seed).split_all` value for value.

The rule functions take any `below(k) -> int` callable, so the benchmarks can race the per-share
arithmetic over `random.Random.randrange` instead of the (slow) pure-Python ChaCha20.
"""

import secrets
from collections.abc import Callable

from tests.reference.chacha20 import ChaCha20U64Stream

INT64_MAX = 2**63 - 1
MAX_SPLIT_ALL_COUNT = 1_000_000
_TWO_64 = 1 << 64

Below = Callable[[int], int]


def below_u64(next_u64: Callable[[], int], k: int) -> int:
    """An integer uniform on [0, k) from u64 draws by the rejection rule; k <= 1 draws nothing."""
    if k <= 1:
        return 0
    limit = _TWO_64 - _TWO_64 % k
    while True:
        v = next_u64()
        if v < limit:
            return v % k


def _int64(value: int, name: str) -> int:
    if not -(2**63) <= value <= INT64_MAX:
        raise ValueError(f"{name} is beyond the int64 range")
    return value


def _check(total: int, count: int) -> None:
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if total < 0:
        raise ValueError(f"total must not be negative, got {total} fen")
    if total < count:
        raise ValueError(f"total {total} fen is below count {count}: every share is at least 1 fen")


def _share(m: int, n: int, below: Below) -> int:
    if n == 1:
        return m
    q, r = divmod(2 * (m - n), n)
    upper = q + 1 if r > 0 and below(n) < r else q
    return 1 + (below(upper + 1) if upper > 0 else 0)


def lucky_share(remaining_fen: int, remaining_count: int, below: Below) -> int:
    """One lucky share of `remaining_fen` over `remaining_count` shares, drawing from `below`."""
    m = _int64(remaining_fen, "remaining_fen")
    n = _int64(remaining_count, "remaining_count")
    _check(m, n)
    return _share(m, n, below)


def split_all(total_fen: int, count: int, below: Below) -> list[int]:
    """Every share of a lucky packet in opening order, drawing from `below`."""
    total = _int64(total_fen, "total_fen")
    n = _int64(count, "count")
    _check(total, n)
    if n > MAX_SPLIT_ALL_COUNT:
        raise ValueError(f"count {n} is above split_all's limit of {MAX_SPLIT_ALL_COUNT} shares")
    shares = []
    m = total
    for left in range(n, 0, -1):
        s = _share(m, left, below)
        m -= s
        shares.append(s)
    return shares


def split_equal(total_fen: int, count: int) -> int:
    """The per-share amount of an equal packet; ValueError on any remainder."""
    total = _int64(total_fen, "total_fen")
    n = _int64(count, "count")
    _check(total, n)
    if total % n:
        raise ValueError(f"total {total} fen is not a multiple of count {n}: equal packets never round")
    return total // n


def seed_key(seed: int) -> bytes:
    """The ChaCha20 key of a seed: its 8 little-endian bytes, zero-padded to 32."""
    if not 0 <= seed < _TWO_64:
        raise ValueError("seed must be None or an int in [0, 2**64)")
    return seed.to_bytes(8, "little") + bytes(24)


class Splitter:
    """Reference of `hongbao_native.Splitter`: seeded ChaCha20, or the OS (`secrets`) when seed is None."""

    __slots__ = ("below",)

    def __init__(self, seed: int | None = None) -> None:
        if seed is None:

            def next_u64() -> int:
                return secrets.randbits(64)

        else:
            next_u64 = ChaCha20U64Stream(seed_key(seed)).next_u64
        self.below: Below = lambda k: below_u64(next_u64, k)

    def next(self, remaining_fen: int, remaining_count: int) -> int:
        """One lucky share."""
        return lucky_share(remaining_fen, remaining_count, self.below)

    def split_all(self, total_fen: int, count: int) -> list[int]:
        """A whole packet's shares in opening order."""
        return split_all(total_fen, count, self.below)
