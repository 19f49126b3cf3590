"""Fairness of the lucky split against an exact oracle: every position's expected share is m/n
(docs/architecture.md section 3).

The oracle is exact rational arithmetic, kept as integers over one common denominator per position: the
remainder's distribution before each opening, and each position's share distribution, follow from the
transition out of (m, n), a mixture of two uniform ranges of x (difference arrays make each step O(m)).
Expectations and variances are exact Fractions for every case, (10000, 10) included (about 50 000-bit
denominators, ~15 s); only the chi-square's expected counts are rounded to float64 at the very end.
"""

import functools
import math
from collections.abc import Callable
from fractions import Fraction

import hongbao_native as hn
import numpy as np
import pytest
from scipy.stats import chi2

from tests.reference import split as ref

# (probability numerator, probability denominator, U): with that probability x is uniform on {0..U}.
Kernel = Callable[[int, int], list[tuple[int, int, int]]]
Dist = tuple[int, list[int], int]  # (value of weights[0], integer weights, common denominator)

CASES = [(6, 3), (200, 100), (100, 10), (10000, 10), (1000, 3)]
PACKETS = 200_000


def exact_rule(m: int, n: int) -> list[tuple[int, int, int]]:
    """docs/architecture.md section 3: U = floor(2F/n), plus one with probability (2F mod n)/n."""
    q, r = divmod(2 * (m - n), n)
    return [(n - r, n, q), (r, n, q + 1)] if r else [(1, 1, q)]


def naive_rule(m: int, n: int) -> list[tuple[int, int, int]]:
    """The rule as usually written: share uniform on 1..floor(2m/n), capped to leave 1 fen for each of the rest."""
    return [(1, 1, min(2 * m // n, m - n + 1) - 1)]


def oracle(total: int, count: int, rule: Kernel) -> list[Dist]:
    """Each position's exact share distribution for a packet of `total` fen over `count` shares."""
    lo, weights, denom = total, [1], 1  # remainder distribution before the current opening
    shares: list[Dist] = []
    for opened in range(count):
        n = count - opened
        if n == 1:
            shares.append((lo, weights, denom))
            break
        live = [(m, w, rule(m, n)) for m, w in zip(range(lo, lo + len(weights)), weights, strict=True) if w]
        common = math.lcm(*{den * (u + 1) for _, _, parts in live for num, den, u in parts if num})
        widest = max(u for _, _, parts in live for num, _, u in parts if num)
        new_lo = lo - 1 - widest
        rem_diff = [0] * (lo + len(weights) - new_lo + 1)
        share_diff = [0] * (widest + 3)
        factors: dict[tuple[int, int, int], int] = {}
        for m, w, parts in live:
            for part in parts:
                num, den, u = part
                if not num:
                    continue
                assert u <= m - n, f"x may exceed F at m={m}, n={n}"
                if part not in factors:
                    factors[part] = num * (common // (den * (u + 1)))
                c = w * factors[part]
                share_diff[1] += c
                share_diff[u + 2] -= c
                rem_diff[m - 1 - u - new_lo] += c
                rem_diff[m - new_lo] -= c
        denom *= common
        share_w = _prefix(share_diff)
        shares.append((0, share_w, denom))
        rem = _prefix(rem_diff)
        first = next(i for i, v in enumerate(rem) if v)
        last = max(i for i, v in enumerate(rem) if v)
        lo, weights = new_lo + first, rem[first : last + 1]
    return shares


def _prefix(diff: list[int]) -> list[int]:
    acc, out = 0, []
    for d in diff[:-1]:
        acc += d
        out.append(acc)
    return out


def moments(dist: Dist) -> tuple[Fraction, Fraction]:
    """Exact mean and variance of a distribution."""
    lo, w, d = dist
    assert sum(w) == d
    s1 = sum((lo + i) * v for i, v in enumerate(w))
    s2 = sum((lo + i) ** 2 * v for i, v in enumerate(w))
    mean = Fraction(s1, d)
    return mean, Fraction(s2, d) - mean * mean


def probabilities(dist: Dist, size: int) -> np.ndarray:
    """The distribution as float64 probabilities indexed by share value 0..size-1."""
    lo, w, d = dist
    shift = max(d.bit_length() - 64, 0)
    d_small = d >> shift
    p = np.zeros(size)
    for i, v in enumerate(w):
        p[lo + i] = (v >> shift) / d_small
    return p


@functools.cache
def exact(total: int, count: int) -> list[Dist]:
    return oracle(total, count, exact_rule)


@functools.cache
def sampled(total: int, count: int) -> np.ndarray:
    """Histograms (position x share value) of 200 000 seeded native packets."""
    splitter = hn.Splitter(total * 1_000 + count)
    hist = np.zeros((count, total + 1), dtype=np.int64)
    chunk = 10_000
    for _ in range(PACKETS // chunk):
        block = np.array([splitter.split_all(total, count) for _ in range(chunk)], dtype=np.int64)
        assert (block.sum(axis=1) == total).all() and block.min() >= 1
        for pos in range(count):
            hist[pos] += np.bincount(block[:, pos], minlength=total + 1)
    return hist


def chi_square_p(observed: np.ndarray, expected: np.ndarray) -> float | None:
    """Chi-square p-value after merging neighbouring bins until each expects >= 5; None if one bin is left."""
    support = np.nonzero(expected > 0)[0]
    bins_o: list[float] = []
    bins_e: list[float] = []
    acc_o = acc_e = 0.0
    for s in support:
        acc_o += observed[s]
        acc_e += expected[s]
        if acc_e >= 5:
            bins_o.append(acc_o)
            bins_e.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0:
        if bins_e:
            bins_o[-1] += acc_o
            bins_e[-1] += acc_e
        else:
            bins_o.append(acc_o)
            bins_e.append(acc_e)
    if len(bins_e) < 2:
        return None
    o, e = np.array(bins_o), np.array(bins_e)
    return float(chi2.sf(((o - e) ** 2 / e).sum(), len(e) - 1))


@pytest.mark.parametrize(("total", "count"), CASES)
def test_every_position_expects_exactly_total_over_count(total: int, count: int) -> None:
    """Exact oracle: every opening position's expected share is exactly T/N, as a Fraction."""
    dists = exact(total, count)
    assert len(dists) == count
    for pos, dist in enumerate(dists):
        assert sum(dist[1]) == dist[2]
        assert moments(dist)[0] == Fraction(total, count), pos


def violations(hist: np.ndarray, total: int, count: int) -> list[str]:
    """Positions whose sample mean is over 5 SE from T/N or whose histogram fails chi-square (p < 1e-4)."""
    target = Fraction(total, count)
    problems = []
    for pos, dist in enumerate(exact(total, count)):
        observed = hist[pos]
        packets = int(observed.sum())
        mean = Fraction(int((observed * np.arange(total + 1)).sum()), packets)
        se = math.sqrt(moments(dist)[1] / packets)
        if abs(float(mean - target)) > 5 * se + 1e-12:
            problems.append(
                f"position {pos}: mean {float(mean):.4f} is {float(mean - target) / se:.1f} SE from {total}/{count}"
            )
        expected = packets * probabilities(dist, total + 1)
        impossible = int(observed[expected == 0].sum())
        if impossible:
            problems.append(f"position {pos}: {impossible} shares the oracle gives probability 0")
        p = chi_square_p(observed, expected)
        if p is None:
            if observed.max() != packets:
                problems.append(f"position {pos}: the oracle has one value, the sample several")
        elif p < 1e-4:
            problems.append(f"position {pos}: chi-square p = {p:.2e}")
    return problems


@pytest.mark.parametrize(("total", "count"), CASES)
def test_seeded_native_packets_match_the_oracle(total: int, count: int) -> None:
    """200 000 seeded native packets: each position's mean is within 5 SE of T/N and its histogram passes chi-square."""
    hist = sampled(total, count)
    assert (hist.sum(axis=1) == PACKETS).all()
    assert violations(hist, total, count) == []


def numpy_packets(total: int, count: int, coin_bias: int, seed: int) -> np.ndarray:
    """Histograms of 200 000 packets of the rule simulated in numpy; coin_bias=1 turns `c < r` into `c <= r`."""
    rng = np.random.default_rng(seed)
    m = np.full(PACKETS, total, dtype=np.int64)
    hist = np.zeros((count, total + 1), dtype=np.int64)
    for pos in range(count):
        n = count - pos
        if n == 1:
            share = m.copy()
        else:
            q, r = np.divmod(2 * (m - n), n)
            upper = q + (rng.integers(0, n, size=PACKETS) < r + coin_bias)
            share = 1 + rng.integers(0, upper + 1)
        m -= share
        hist[pos] = np.bincount(share, minlength=total + 1)
    assert (m == 0).all()
    return hist


def test_sampling_check_has_teeth() -> None:
    """The same sampling check passes a numpy simulation of the rule and rejects an off-by-one coin (c <= r)."""
    assert violations(numpy_packets(100, 10, 0, seed=7), 100, 10) == []
    caught = violations(numpy_packets(100, 10, 1, seed=7), 100, 10)
    assert any("SE from" in v for v in caught) and any("chi-square" in v for v in caught), caught


class _NeedDraw(Exception):
    def __init__(self, k: int) -> None:
        self.k = k


def enumerate_draw_paths(total: int, count: int) -> dict[tuple[int, ...], Fraction]:
    """Every draw path of the reference rule (coin and x draws alike) with its exact probability."""
    paths: dict[tuple[int, ...], Fraction] = {}

    def explore(prefix: list[int], prob: Fraction) -> None:
        it = iter(prefix)

        def below(k: int) -> int:
            v = next(it, None)
            if v is None:
                raise _NeedDraw(k)
            assert 0 <= v < k
            return v

        try:
            shares = tuple(ref.split_all(total, count, below))
        except _NeedDraw as need:
            for v in range(need.k):
                explore([*prefix, v], prob / need.k)
            return
        assert sum(shares) == total and min(shares) >= 1
        paths[shares] = paths.get(shares, Fraction(0)) + prob

    explore([], Fraction(1))
    return paths


def _marginals(paths: dict[tuple[int, ...], Fraction], count: int) -> list[dict[int, Fraction]]:
    out: list[dict[int, Fraction]] = [{} for _ in range(count)]
    for shares, prob in paths.items():
        for pos, s in enumerate(shares):
            out[pos][s] = out[pos].get(s, Fraction(0)) + prob
    return out


def _as_fractions(dist: Dist) -> dict[int, Fraction]:
    lo, w, d = dist
    return {lo + i: Fraction(v, d) for i, v in enumerate(w) if v}


def test_t6_n3_exhaustive_paths_equal_the_oracle() -> None:
    """T=6, N=3: enumerating every draw path gives exactly the oracle's per-position distributions."""
    paths = enumerate_draw_paths(6, 3)
    assert sum(paths.values()) == 1
    assert _marginals(paths, 3) == [_as_fractions(d) for d in exact(6, 3)]
    third = Fraction(1, 3)
    assert _marginals(paths, 3)[0] == {1: third, 2: third, 3: third}
    assert paths[(1, 1, 4)] == third * Fraction(1, 4)


@functools.cache
def draw_path_count(m: int, n: int) -> int:
    """How many draw paths the rule's tree has from (m, n): coin draws in [0, n) branch n ways."""
    if n == 1:
        return 1
    q, r = divmod(2 * (m - n), n)
    narrow = sum(draw_path_count(m - 1 - x, n - 1) for x in range(q + 1))
    if not r:
        return narrow
    return (n - r) * narrow + r * (narrow + draw_path_count(m - 2 - q, n - 1))


def test_small_packets_exhaustive_paths_equal_the_oracle() -> None:
    """Every T <= 12, N <= T with at most 20 000 draw paths: exhaustive marginals equal the oracle, means T/N."""
    checked = 0
    for total in range(1, 13):
        for count in range(1, total + 1):
            if draw_path_count(total, count) > 20_000:
                continue  # 13 of the 78 cases, e.g. (12, 11) has 57 million paths
            paths = enumerate_draw_paths(total, count)
            assert sum(paths.values()) == 1
            marginals = _marginals(paths, count)
            assert marginals == [_as_fractions(d) for d in oracle(total, count, exact_rule)], (total, count)
            for m in marginals:
                assert sum(s * p for s, p in m.items()) == Fraction(total, count)
            checked += 1
    assert checked == 65


def test_naive_rule_fails_the_oracle() -> None:
    """The usual rule (uniform 1..floor(2m/n)) gives T=200, N=100 a first share of 2.5 and a last of ~1.19, not 2."""
    dists = oracle(200, 100, naive_rule)
    means = [moments(d)[0] for d in dists]
    assert means[0] == Fraction(5, 2)
    assert abs(float(means[-1]) - 1.19) < 0.005
    assert sum(means) == 200
    assert sum(m != 2 for m in means) >= 99
