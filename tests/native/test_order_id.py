"""hongbao_native order ids (native/src/order_id.rs) against tests/reference/order_id.py."""

from __future__ import annotations

import datetime
import random
from collections.abc import Callable
from typing import Any

import hongbao_native as hn
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.reference import order_id as ref

GOLDEN = [
    ((1, 240229, 0, 42), "12402290000000000421"),
    ((2, 991231, 1, 10**11 - 1), "29912311999999999997"),
    ((1, 101, 0, 0), "10001010000000000004"),
    ((2, 250815, 0, 123456789), "22508150001234567899"),
]

dates = st.dates(datetime.date(2000, 1, 1), datetime.date(2099, 12, 31)).map(
    lambda d: (d.year - 2000) * 10000 + d.month * 100 + d.day
)
valid_parts = st.tuples(st.sampled_from([1, 2]), dates, st.sampled_from([0, 1]), st.integers(0, 10**11 - 1))


def outcome(f: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """A call's result, or its exception type and message (TypeError text is the binding's own)."""
    try:
        result = f(*args)
    except TypeError:
        return ("TypeError",)
    except ValueError as e:
        return (type(e).__name__, str(e))
    if hasattr(result, "sequence"):
        return ("ok", result.region, result.yymmdd, result.day, result.source, result.sequence)
    return ("ok", result)


def sample_ids(n: int, seed: int) -> list[str]:
    """n valid ids from a seeded generator, with varied digits in every field."""
    rng = random.Random(seed)
    start = datetime.date(2000, 1, 1).toordinal()
    out = []
    for _ in range(n):
        d = datetime.date.fromordinal(start + rng.randrange(36525))
        yymmdd = (d.year - 2000) * 10000 + d.month * 100 + d.day
        out.append(ref.encode(rng.choice((1, 2)), yymmdd, rng.choice((0, 1)), rng.randrange(10**11)))
    return out


def test_golden_ids() -> None:
    """Literal ids stay the same across versions, in both directions."""
    for parts, oid in GOLDEN:
        assert hn.encode_order_id(*parts) == oid
        assert ref.encode(*parts) == oid
        p = hn.decode_order_id(oid)
        assert (p.region, p.yymmdd, p.source, p.sequence) == parts
        assert p.day == parts[1] % 100


def test_damm_reference_table_is_weakly_totally_anti_symmetric() -> None:
    """The reference table is Damm's: a Latin square, zero diagonal, (c*x)*y == (c*y)*x only if x == y."""
    t = ref.DAMM_TABLE
    assert all(sorted(row) == list(range(10)) for row in t)
    assert all(sorted(col) == list(range(10)) for col in zip(*t, strict=True))
    assert all(t[i][i] == 0 for i in range(10))
    for c in range(10):
        for x in range(10):
            for y in range(10):
                if t[t[c][x]][y] == t[t[c][y]][x]:
                    assert x == y
    assert ref.damm("572") == 4 and ref.damm("5724") == 0


@given(valid_parts)
def test_round_trip_matches_reference(parts: tuple[int, int, int, int]) -> None:
    """Every valid field combination encodes like the reference and decodes back to its fields."""
    oid = hn.encode_order_id(*parts)
    assert oid == ref.encode(*parts)
    assert len(oid) == 20 and oid.isascii() and oid.isdigit()
    p = hn.decode_order_id(oid)
    assert (p.region, p.yymmdd, p.source, p.sequence) == parts
    assert p.day == parts[1] % 100
    assert hn.is_valid_order_id(oid)
    assert p == hn.decode_order_id(oid) and hash(p) == hash(hn.decode_order_id(oid))


@given(st.integers(), st.integers(), st.integers(), st.integers())
def test_encode_any_ints_matches_reference(region: int, yymmdd: int, source: int, sequence: int) -> None:
    """Any ints, however large or negative, give the reference's result or its ValueError."""
    assert outcome(hn.encode_order_id, region, yymmdd, source, sequence) == outcome(
        ref.encode, region, yymmdd, source, sequence
    )


@given(
    st.sampled_from([1, 2, 0, 3, -1]),
    st.one_of(dates, st.integers(-5, 10**6)),
    st.sampled_from([0, 1, 2, -1]),
    st.one_of(st.integers(-3, 3), st.integers(10**11 - 3, 10**11 + 3)),
)
def test_encode_near_bounds_matches_reference(region: int, yymmdd: int, source: int, sequence: int) -> None:
    """Values at and just past every field bound give the reference's result or error."""
    assert outcome(hn.encode_order_id, region, yymmdd, source, sequence) == outcome(
        ref.encode, region, yymmdd, source, sequence
    )


def _with_check(body: str) -> str:
    return body + str(ref.damm(body))


@st.composite
def mutated_ids(draw: st.DrawFn) -> str:
    """A valid id with one character replaced by any character, or a slice cut or extended."""
    oid = draw(valid_parts.map(lambda p: ref.encode(*p)))
    i = draw(st.integers(0, 19))
    kind = draw(st.sampled_from(["replace", "cut", "extend"]))
    if kind == "replace":
        return oid[:i] + draw(st.characters()) + oid[i + 1 :]
    if kind == "cut":
        return oid[:i]
    return oid + draw(st.text(min_size=1, max_size=3))


id_like = st.one_of(
    st.text(max_size=24),
    st.text(alphabet="0123456789", min_size=18, max_size=22),
    st.from_regex(r"[0-9]{19}", fullmatch=True).map(_with_check),
    st.from_regex(r"[12][0-9]{6}[01][0-9]{11}", fullmatch=True).map(_with_check),
    mutated_ids(),
)


@given(id_like)
def test_decode_matches_reference(s: str) -> None:
    """Any string decodes to the reference's fields or fails with the reference's message."""
    native, expected = outcome(hn.decode_order_id, s), outcome(ref.decode, s)
    assert native == expected
    assert hn.is_valid_order_id(s) is (expected[0] == "ok")


def test_every_single_substitution_and_adjacent_swap_is_rejected() -> None:
    """For 200 ids, all 180 one-digit substitutions and all adjacent swaps fail the check digit."""
    checked = 0
    for oid in sample_ids(200, seed=20240229):
        variants = [oid[:i] + d + oid[i + 1 :] for i in range(20) for d in "0123456789" if d != oid[i]]
        variants += [oid[:i] + oid[i + 1] + oid[i] + oid[i + 2 :] for i in range(19) if oid[i] != oid[i + 1]]
        for v in variants:
            assert not hn.is_valid_order_id(v)
            with pytest.raises(ValueError, match=r"^order id check digit: "):
                hn.decode_order_id(v)
            assert not ref.is_valid(v)
        checked += len(variants)
    assert checked >= 200 * 180


@pytest.mark.parametrize(
    ("s", "message"),
    [
        ("", "order id length: expected 20 characters, got 0"),
        ("1240229000000000042", "order id length: expected 20 characters, got 19"),
        ("124022900000000004\u00e9", "order id length: expected 20 characters, got 19"),
        ("1240229000000000042\u00e9", "order id digits: character 19 is not an ASCII digit"),
        ("12402290000000\u066400042", "order id digits: character 14 is not an ASCII digit"),
        ("1240229000000 000421", "order id digits: character 13 is not an ASCII digit"),
        ("12402290000000000423", "order id check digit: expected 1, got 3"),
        (_with_check("3240229000000000042"), "order id region: 3 is not 1 (north) or 2 (south)"),
        (_with_check("1230229000000000042"), "order id date: yymmdd 230229 is not a calendar date in 2000-2099"),
        (_with_check("1241301000000000042"), "order id date: yymmdd 241301 is not a calendar date in 2000-2099"),
        (_with_check("1240229200000000042"), "order id source: 2 is not 0 (redis) or 1 (db)"),
    ],
)
def test_decode_error_names_the_field(s: str, message: str) -> None:
    """Each kind of broken id gets a ValueError naming its field, the same as the reference."""
    with pytest.raises(ValueError) as native:
        hn.decode_order_id(s)
    assert str(native.value) == message
    with pytest.raises(ValueError) as reference:
        ref.decode(s)
    assert str(reference.value) == message


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 240229, 0, 1), "order id region: 0 is not 1 (north) or 2 (south)"),
        ((1, 240230, 0, 1), "order id date: yymmdd 240230 is not a calendar date in 2000-2099"),
        ((1, -1, 0, 1), "order id date: yymmdd -1 is not a calendar date in 2000-2099"),
        ((1, 240229, 2, 1), "order id source: 2 is not 0 (redis) or 1 (db)"),
        ((1, 240229, 0, -1), "order id sequence: -1 is not in [0, 10**11)"),
        ((1, 240229, 0, 10**11), "order id sequence: 100000000000 is not in [0, 10**11)"),
        ((1, 240229, 0, 2**64), "order id sequence: 18446744073709551616 is not in [0, 10**11)"),
        ((-(2**100), 240229, 0, 1), f"order id region: {-(2**100)} is not 1 (north) or 2 (south)"),
    ],
)
def test_encode_error_names_the_field(args: tuple[int, int, int, int], message: str) -> None:
    """Out-of-range fields, huge ints included, raise ValueError (never OverflowError) naming the field."""
    with pytest.raises(ValueError) as e:
        hn.encode_order_id(*args)
    assert str(e.value) == message
    assert type(e.value) is ValueError


def test_calendar_dates_match_datetime_exhaustively() -> None:
    """yymmdd is accepted exactly when it is a real date in 2000-2099, leap days included."""
    for yy in range(100):
        for mm in range(14):
            for dd in range(33):
                yymmdd = yy * 10000 + mm * 100 + dd
                try:
                    datetime.date(2000 + yy, mm, dd)
                    real = True
                except ValueError:
                    real = False
                assert (outcome(hn.encode_order_id, 1, yymmdd, 0, 7)[0] == "ok") is real, yymmdd
    assert hn.decode_order_id(hn.encode_order_id(2, 229, 1, 5)).yymmdd == 229
    assert hn.decode_order_id(hn.encode_order_id(2, 960229, 1, 5)).day == 29


def test_non_str_input() -> None:
    """Non-str ids raise TypeError from decode and are simply invalid for is_valid_order_id."""
    oid = GOLDEN[0][1]
    for bad in (None, 12402290000000000421, oid.encode(), bytearray(oid.encode()), [oid]):
        with pytest.raises(TypeError):
            hn.decode_order_id(bad)  # type: ignore[arg-type]
        assert hn.is_valid_order_id(bad) is False
    for bad_int in (1.0, "1", None):
        with pytest.raises(TypeError):
            hn.encode_order_id(bad_int, 240229, 0, 1)  # type: ignore[arg-type]


def test_lone_surrogates_are_rejected_without_panic() -> None:
    """Strings that are not valid UTF-8 get the same length/digit errors as the reference."""
    for s in ["\ud800" * 20, "1240229000\udfff000000421", "\ud800", "12402290000000000421\ud800"]:
        assert outcome(hn.decode_order_id, s) == outcome(ref.decode, s)
        assert outcome(hn.decode_order_id, s)[0] == "ValueError"
        assert hn.is_valid_order_id(s) is False


def test_order_id_parts_is_a_frozen_value() -> None:
    """OrderIdParts compares and hashes by value, has a readable repr and cannot be mutated."""
    a = hn.decode_order_id(GOLDEN[0][1])
    b = hn.decode_order_id(GOLDEN[0][1])
    c = hn.decode_order_id(GOLDEN[1][1])
    assert a == b and a != c and hash(a) == hash(b)
    assert a != (1, 240229, 29, 0, 42)
    assert len({a, b, c}) == 2
    assert repr(a) == "OrderIdParts(region=1, yymmdd=240229, day=29, source=0, sequence=42)"
    with pytest.raises(AttributeError):
        a.region = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        hn.OrderIdParts()  # type: ignore[call-arg]
    assert isinstance(hn.decode_order_id(GOLDEN[0][1]), hn.OrderIdParts)
