"""hongbao_native's split (native/src/split/) against tests/reference/split.py; money cases M-01..M-06, M-18."""

import os
import random
import threading
from collections.abc import Callable

import hongbao_native as hn
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.reference import split as ref
from tests.reference.chacha20 import ChaCha20U64Stream, chacha20_block

INT64_MAX = 2**63 - 1
seeds = st.integers(min_value=0, max_value=2**64 - 1)
any_int = st.one_of(
    st.integers(min_value=-5, max_value=300),
    st.integers(min_value=-(2**63), max_value=INT64_MAX),
    st.integers(min_value=-(2**70), max_value=2**70),
)


def _outcome(fn: Callable[..., int], *args: int) -> tuple[str, int | str]:
    try:
        return ("ok", fn(*args))
    except ValueError as e:
        return ("ValueError", str(e))


# --- the pure-Python ChaCha20 the reference stands on --------------------------------------------


def test_chacha20_block_matches_rfc8439_section_2_3_2() -> None:
    """The reference block function reproduces RFC 8439's section 2.3.2 test vector."""
    block = chacha20_block(bytes(range(32)), 1, bytes.fromhex("000000090000004a00000000"))
    assert block.hex() == (
        "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
        "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e"
    )


def test_zero_key_stream_is_rfc8439_appendix_a1_keystream() -> None:
    """Seed 0's u64 stream is RFC 8439 A.1's zero-key keystream (blocks 0 and 1) read little-endian."""
    block0 = bytes.fromhex(
        "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"
        "da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586"
    )
    stream = ChaCha20U64Stream(ref.seed_key(0))
    words = [stream.next_u64() for _ in range(9)]
    assert words[:8] == [int.from_bytes(block0[i : i + 8], "little") for i in range(0, 64, 8)]
    assert words[8] == int.from_bytes(bytes.fromhex("9f07e7be5551387a"), "little")


# --- golden vectors and differential tests ---------------------------------------------------------

GOLDEN = {
    0: [4, 21, 5, 18, 4, 15, 4, 8, 14, 7],
    42: [11, 5, 13, 2, 15, 19, 2, 9, 13, 11],
    2**64 - 1: [19, 7, 12, 1, 4, 5, 6, 25, 1, 20],
}


@pytest.mark.parametrize("seed", sorted(GOLDEN))
def test_golden_vectors_t100_n10(seed: int) -> None:
    """Seeded T=100, N=10 packets are the hard-coded golden shares, natively and in the reference."""
    assert hn.Splitter(seed).split_all(100, 10) == GOLDEN[seed]
    assert ref.Splitter(seed).split_all(100, 10) == GOLDEN[seed]
    assert hn.Splitter(seed=seed).split_all(100, 10) == GOLDEN[seed]


@given(seed=seeds, count=st.integers(1, 100), extra=st.integers(0, 20_000))
def test_seeded_split_all_equals_reference(seed: int, count: int, extra: int) -> None:
    """A seeded native split_all equals the reference value for value."""
    assert hn.Splitter(seed).split_all(count + extra, count) == ref.Splitter(seed).split_all(count + extra, count)


@given(seed=seeds, count=st.integers(1, 5), total=st.integers(2**40, INT64_MAX))
def test_seeded_split_all_equals_reference_on_huge_totals(seed: int, count: int, total: int) -> None:
    """Near the int64 limit (wide ranges, frequent rejections) native and reference still agree."""
    assert hn.Splitter(seed).split_all(total, count) == ref.Splitter(seed).split_all(total, count)


@given(seed=seeds, steps=st.lists(st.tuples(st.integers(1, 10**6), st.integers(1, 200)), min_size=1, max_size=30))
def test_seeded_next_sequence_equals_reference(seed: int, steps: list[tuple[int, int]]) -> None:
    """Any sequence of seeded next(m, n) calls gives the reference's values, draw for draw."""
    native, reference = hn.Splitter(seed), ref.Splitter(seed)
    for extra, n in steps:
        assert native.next(n + extra, n) == reference.next(n + extra, n)


def test_rejection_path_is_exercised_and_agrees() -> None:
    """Ranges just above 2**64/3 reject about a third of draws; native and reference reject the same ones."""
    k = 2**64 // 3 + 1  # 2**64 mod k is about 2**64 / 3
    draws = 0

    def counting_stream(seed: int) -> Callable[[], int]:
        stream = ChaCha20U64Stream(ref.seed_key(seed))

        def next_u64() -> int:
            nonlocal draws
            draws += 1
            return stream.next_u64()

        return next_u64

    for seed in range(40):
        next_u64 = counting_stream(seed)
        # m = k + 1, n = 2: F = k - 1, U = F, so the share is 1 + below(k).
        expected = 1 + ref.below_u64(next_u64, k)
        assert hn.Splitter(seed).next(k + 1, 2) == expected
        assert ref.Splitter(seed).next(k + 1, 2) == expected
    assert draws > 45  # 40 shares, rejections make more draws


@given(m=any_int, n=any_int)
def test_lucky_errors_equal_reference(m: int, n: int) -> None:
    """For any ints, native and reference agree on the ValueError message or both give a valid share."""
    native = _outcome(hn.Splitter(3).next, m, n)
    reference = _outcome(ref.Splitter(3).next, m, n)
    assert native == reference
    unseeded = _outcome(hn.split_lucky, m, n)
    assert unseeded[0] == reference[0]
    if isinstance(unseeded[1], str):
        assert unseeded == reference
    else:
        assert 1 <= unseeded[1] <= m - n + 1


@given(total=any_int, count=any_int)
def test_split_equal_equals_reference(total: int, count: int) -> None:
    """split_equal agrees with the reference on every int pair, result or ValueError message."""
    assert _outcome(hn.split_equal, total, count) == _outcome(ref.split_equal, total, count)


@given(per_share=st.integers(1, 2**40), count=st.integers(1, 100))
def test_split_equal_returns_the_per_share_amount(per_share: int, count: int) -> None:
    """An exact multiple gives back the per-share amount (docs/architecture.md section 3: the sender gives it)."""
    assert hn.split_equal(per_share * count, count) == per_share


# --- invalid input -------------------------------------------------------------------------------

BAD_LUCKY = [
    ((10, 0), "count must be >= 1, got 0"),
    ((10, -3), "count must be >= 1, got -3"),
    ((-1, 1), "total must not be negative, got -1 fen"),
    ((10, 15), "total 10 fen is below count 15: every share is at least 1 fen"),
    ((0, 1), "total 0 fen is below count 1: every share is at least 1 fen"),
    ((2**63, 2), "remaining_fen is beyond the int64 range"),
    ((-(2**63) - 1, 2), "remaining_fen is beyond the int64 range"),
    ((10, 2**100), "remaining_count is beyond the int64 range"),
]


@pytest.mark.parametrize(("args", "message"), BAD_LUCKY)
def test_invalid_lucky_input_raises_valueerror_with_reason(args: tuple[int, int], message: str) -> None:
    """Bad counts, totals and out-of-int64 ints raise ValueError naming the reason, on every entry point."""
    with pytest.raises(ValueError) as e1:
        hn.split_lucky(*args)
    with pytest.raises(ValueError) as e2:
        hn.Splitter(1).next(*args)
    with pytest.raises(ValueError) as e3:
        hn.Splitter().next(*args)
    assert str(e1.value) == str(e2.value) == str(e3.value) == message
    with pytest.raises(ValueError) as e4:
        hn.Splitter(1).split_all(*args)
    assert str(e4.value) == message.replace("remaining_fen", "total_fen").replace("remaining_count", "count")


def test_split_all_refuses_absurd_counts() -> None:
    """split_all builds a list, so it refuses more than a million shares instead of exhausting memory."""
    with pytest.raises(ValueError, match="above split_all's limit of 1000000 shares"):
        hn.Splitter(1).split_all(INT64_MAX, 10**12)
    assert len(hn.Splitter(1).split_all(10**6, 10**6)) == 10**6


@pytest.mark.parametrize("seed", [-1, 2**64, 2**200, -(2**64)])
def test_seed_out_of_range_raises_valueerror(seed: int) -> None:
    """A seed outside [0, 2**64) is a ValueError, not an OverflowError."""
    with pytest.raises(ValueError, match=r"seed must be None or an int in \[0, 2\*\*64\)"):
        hn.Splitter(seed)
    with pytest.raises(ValueError, match=r"seed must be None or an int in \[0, 2\*\*64\)"):
        ref.Splitter(seed)


@pytest.mark.parametrize("bad", [1.5, 100.0, "100", None, b"1"])
def test_non_int_money_is_a_typeerror(bad: object) -> None:
    """Floats, strings and None never enter a money path: TypeError."""
    with pytest.raises(TypeError):
        hn.split_lucky(bad, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        hn.split_equal(100, bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        hn.Splitter(1).split_all(bad, 1)  # type: ignore[arg-type]
    if bad is not None:
        with pytest.raises(TypeError):
            hn.Splitter(bad)  # type: ignore[arg-type]


def test_int64_extremes_are_accepted() -> None:
    """Totals up to 2**63 - 1 fen split without overflow; n == 1 returns the whole remainder."""
    assert hn.split_lucky(INT64_MAX, 1) == INT64_MAX
    shares = hn.Splitter(9).split_all(INT64_MAX, 7)
    assert sum(shares) == INT64_MAX and min(shares) >= 1 and len(shares) == 7
    assert hn.split_equal(INT64_MAX, 7) == INT64_MAX // 7
    assert hn.Splitter(2**64 - 1).next(INT64_MAX, 2) >= 1


# --- money cases (/work/shared/cases/money.md) -----------------------------------------------------


def test_m01_one_fen_shares_are_exact_ints() -> None:
    """M-01: T=100, N=100 is a hundred ints equal to 1; T=3, N=3 is [1, 1, 1]; no float anywhere."""
    for splitter in (hn.Splitter(), hn.Splitter(1)):
        shares = splitter.split_all(100, 100)
        assert shares == [1] * 100 and all(type(s) is int for s in shares)
        assert splitter.split_all(3, 3) == [1, 1, 1]
    m, got = 100, []
    for n in range(100, 0, -1):
        got.append(hn.split_lucky(m, n))
        m -= got[-1]
    assert got == [1] * 100 and all(type(s) is int for s in got)
    assert type(hn.split_equal(300, 3)) is int and hn.split_equal(300, 3) == 100


def test_m02_equal_packets_never_round() -> None:
    """M-02: T=100 over N=18 is refused as an equal packet; no equal share can be <= 0."""
    with pytest.raises(ValueError, match="not a multiple of count 18: equal packets never round"):
        hn.split_equal(100, 18)
    with pytest.raises(ValueError, match="every share is at least 1 fen"):
        hn.split_equal(5, 10)
    with pytest.raises(ValueError, match="every share is at least 1 fen"):
        hn.split_equal(0, 3)
    assert hn.split_equal(90, 18) == 5
    assert hn.split_equal(18, 18) == 1


def test_m03_sweep_conserves_money() -> None:
    """M-03: sampled over T in 1..300, N in 1..min(T, 100): shares >= 1, sum == T, exactly N shares."""
    pick = random.Random(20240603)
    pairs = [(t, n) for t in range(1, 301) for n in range(1, min(t, 100) + 1)]
    edges = [(t, n) for (t, n) in pairs if n in (1, 2, t, t - 1, min(t, 100))]
    sample = edges + pick.sample(pairs, 3000)
    splitter = hn.Splitter(303)
    for t, n in sample:
        for _ in range(8):
            shares = splitter.split_all(t, n)
            assert len(shares) == n and sum(shares) == t and min(shares) >= 1, (t, n, shares)
    for t, n in pick.sample(pairs, 300):
        m = t
        for left in range(n, 0, -1):
            s = hn.split_lucky(m, left)
            assert 1 <= s <= m - left + 1, (t, n, m, left, s)
            m -= s
        assert m == 0


def test_m04_total_below_count_is_refused() -> None:
    """M-04: T=10, N=15 is a validation error on every entry point."""
    for call in (hn.split_lucky, hn.split_equal, hn.Splitter().next, hn.Splitter(4).split_all):
        with pytest.raises(ValueError, match="total 10 fen is below count 15"):
            call(10, 15)


def test_m05_small_packets_keep_the_floor_for_the_rest() -> None:
    """M-05: T=2,N=2 is always [1,1]; T=3,N=3 always [1,1,1]; T=4,N=3 opens with 1 or 2 only (both occur)."""
    firsts: set[int] = set()
    for seed in range(300):
        sp = hn.Splitter(seed)
        assert sp.split_all(2, 2) == [1, 1]
        assert sp.split_all(3, 3) == [1, 1, 1]
        shares = sp.split_all(4, 3)
        assert sum(shares) == 4 and min(shares) >= 1
        firsts.add(shares[0])
        firsts.add(hn.split_lucky(4, 3))
    assert firsts == {1, 2}


def test_m06_empty_random_range_never_crashes() -> None:
    """M-06: T=15,N=10 keeps every share >= 1; T=10,N=10 is all 1s; T=N+1 has exactly one share of 2."""
    sp = hn.Splitter(606)
    for _ in range(2000):
        shares = sp.split_all(15, 10)
        assert sum(shares) == 15 and min(shares) >= 1 and len(shares) == 10
    assert sp.split_all(10, 10) == [1] * 10
    for n in range(1, 101):
        for splitter in (sp, hn.Splitter()):
            shares = splitter.split_all(n + 1, n)
            assert sorted(shares) == [1] * (n - 1) + [2]


# --- unpredictability: M-18, fork safety, threads --------------------------------------------------


def test_m18_unseeded_packets_never_repeat() -> None:
    """M-18: 10 000 unseeded T=10000, N=10 packets back to back share no amount sequence."""
    unseeded = hn.Splitter()
    packets = {tuple(unseeded.split_all(10000, 10)) for _ in range(10_000)}
    assert len(packets) == 10_000
    stepwise = set()
    for _ in range(10_000):
        m, seq = 10000, []
        for n in range(10, 0, -1):
            seq.append(hn.split_lucky(m, n))
            m -= seq[-1]
        stepwise.add(tuple(seq))
    assert len(stepwise) == 10_000 and not stepwise & packets


def test_unseeded_splitters_are_independent() -> None:
    """Two unseeded Splitters (and split_lucky) never replay each other's stream."""
    a = [hn.Splitter().next(2**62, 2) for _ in range(64)]
    b = [hn.Splitter().next(2**62, 2) for _ in range(64)]
    c = [hn.split_lucky(2**62, 2) for _ in range(64)]
    assert len(set(a) | set(b) | set(c)) == 192


def _draws_in_child(fn: Callable[[], list[int]]) -> list[int]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.close(read_fd)
            os.write(write_fd, b",".join(str(v).encode() for v in fn()))
        finally:
            os._exit(0)
    os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return [int(v) for v in b"".join(chunks).split(b",")]


def test_forked_children_never_replay_the_parent_stream() -> None:
    """After fork, parent and each child draw different OS-seeded streams (the atfork handler rekeys)."""
    hn.split_lucky(2**62, 2)  # the parent's thread-local generator exists before the fork
    shared_unseeded = hn.Splitter()

    def draw() -> list[int]:
        return [hn.split_lucky(2**62, 2) for _ in range(32)] + [shared_unseeded.next(2**62, 2) for _ in range(32)]

    child_a = _draws_in_child(draw)
    child_b = _draws_in_child(draw)
    parent = draw()
    assert len(child_a) == len(child_b) == len(parent) == 64
    assert len(set(child_a) | set(child_b) | set(parent)) == 192


def test_forked_seeded_splitter_is_deterministic() -> None:
    """A seeded Splitter is a replay tool: a forked child continues the very same stream as the parent."""
    sp = hn.Splitter(77)
    sp.next(1000, 10)
    child = _draws_in_child(lambda: sp.split_all(10000, 10))
    assert child == sp.split_all(10000, 10) == _ref_after_one(77)


def _ref_after_one(seed: int) -> list[int]:
    """The reference's split_all(10000, 10) after one next(1000, 10) on the same seeded stream."""
    r = ref.Splitter(seed)
    r.next(1000, 10)
    return r.split_all(10000, 10)


def test_shared_seeded_splitter_is_thread_safe() -> None:
    """Threads sharing a seeded Splitter each take whole draws: together they get the single-thread multiset."""
    sp = hn.Splitter(5)
    results: list[list[int]] = [[] for _ in range(4)]

    def work(i: int) -> None:
        for _ in range(2000):
            results[i].append(sp.next(10**12, 2))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    solo = hn.Splitter(5)
    assert sorted(v for r in results for v in r) == sorted(solo.next(10**12, 2) for _ in range(8000))


def test_unseeded_split_lucky_follows_the_rule() -> None:
    """The OS-seeded path uses the same rule: T=6, N=3 opens with 1, 2 or 3, each about a third of the time."""
    counts = {1: 0, 2: 0, 3: 0}
    for _ in range(30_000):
        counts[hn.split_lucky(6, 3)] += 1
    # each count is Binomial(30000, 1/3): sd ~ 82; 8 sd keeps false alarms below 1e-14
    assert all(abs(c - 10_000) < 660 for c in counts.values()), counts
