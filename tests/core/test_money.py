"""Wire amounts become integer fen exactly (money case M-01), and nothing else is accepted."""

import pytest
from hongbao.core.errors import InvalidAmount
from hongbao.core.money import parse_fen, parse_yuan
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("text", "fen"),
    [("0.30", 30), ("0.3", 30), ("12.34", 1234), ("200", 20000), ("0.01", 1), ("1.10", 110), ("99999.99", 9999999)],
)
def test_yuan_strings_parse_exactly(text: str, fen: int) -> None:
    """M-01: "0.30" is 30 fen; every accepted yuan string maps to its exact fen value."""
    assert parse_yuan(text) == fen


@pytest.mark.parametrize(
    "bad",
    [
        "0.001",
        "1.234",
        "-1",
        "-0.01",
        "0",
        "0.00",
        "1e2",
        " 1",
        "1 ",
        "01.00",
        "1.",
        ".5",
        "",
        "１",
        "NaN",
        "inf",
        "+1",
    ],
)
def test_bad_yuan_strings_are_refused(bad: str) -> None:
    """More than two decimals, signs, zero, exponents, spaces and non-ASCII digits are invalid_amount."""
    with pytest.raises(InvalidAmount) as info:
        parse_yuan(bad)
    assert info.value.code == "invalid_amount" and info.value.status == 400


@pytest.mark.parametrize("bad", [12.34, 100, None, b"1.00"])
def test_yuan_requires_a_string(bad: object) -> None:
    """A number or bytes where a yuan string belongs is refused rather than guessed at."""
    with pytest.raises(InvalidAmount):
        parse_yuan(bad)


@given(st.integers(min_value=1, max_value=10**15))
def test_yuan_round_trip(fen: int) -> None:
    """Formatting fen as yuan with two decimals and parsing it back gives the same fen."""
    assert parse_yuan(f"{fen // 100}.{fen % 100:02d}") == fen


@pytest.mark.parametrize("bad", [100.0, 0.3, True, False, "100", 0, -1, 2**63, None, [100]])
def test_fen_must_be_a_positive_int64(bad: object) -> None:
    """Floats (even 100.0), booleans, strings, zero, negatives and values past int64 are refused."""
    with pytest.raises(InvalidAmount):
        parse_fen(bad)


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (None, "null or nothing"),
        (1e32, "a number with a fraction or out of range"),
        ("100", "a string"),
        (True, "a boolean"),
        ([100], "an array"),
    ],
)
def test_a_refused_fen_is_named_in_json_words(bad: object, named: str) -> None:
    """The message says what the JSON value was (no Python type names: a 32-digit integer arrives as a float)."""
    with pytest.raises(InvalidAmount, match=f"amount_fen must be a positive integer number of fen, got {named}"):
        parse_fen(bad)


def test_fen_accepts_positive_integers() -> None:
    """Positive integers up to 2**63-1 pass through unchanged."""
    assert parse_fen(1) == 1
    assert parse_fen(20000) == 20000
    assert parse_fen(2**63 - 1) == 2**63 - 1
