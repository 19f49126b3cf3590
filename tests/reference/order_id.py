"""Reference order-id codec (docs/architecture.md section 4), mirroring native/src/order_id.rs.

An id is 20 ASCII digits: region(1) yymmdd(6) source(1) sequence(11) check(1), the check digit
being Damm's (H. Michael Damm, 2004) over the first 19. Errors are ValueError with the same
messages as the native module, each naming the broken field."""

from __future__ import annotations

import datetime
import operator
from dataclasses import dataclass

ORDER_ID_LEN = 20
SEQUENCE_LIMIT = 10**11
REGIONS = (1, 2)  # north, south
SOURCES = (0, 1)  # redis INCR, DB block allocator
_DIGITS = "0123456789"

# The standard order-10 weakly totally anti-symmetric quasigroup (Damm 2004), zero diagonal.
DAMM_TABLE = (
    (0, 3, 1, 7, 5, 9, 8, 6, 4, 2),
    (7, 0, 9, 2, 1, 5, 4, 8, 6, 3),
    (4, 2, 0, 6, 8, 7, 1, 3, 5, 9),
    (1, 7, 5, 0, 9, 8, 3, 4, 2, 6),
    (6, 1, 2, 3, 0, 4, 5, 9, 7, 8),
    (3, 6, 7, 4, 2, 0, 9, 5, 8, 1),
    (5, 8, 6, 9, 7, 2, 0, 1, 3, 4),
    (8, 9, 4, 5, 3, 6, 2, 0, 1, 7),
    (9, 4, 3, 8, 6, 1, 7, 2, 0, 5),
    (2, 5, 8, 1, 4, 3, 6, 7, 9, 0),
)


def damm(digits: str) -> int:
    """Damm's interim digit of a string of ASCII digits: the check digit to append (0 if valid)."""
    interim = 0
    for c in digits:
        interim = DAMM_TABLE[interim][_DIGITS.index(c)]
    return interim


@dataclass(frozen=True)
class Parts:
    region: int
    yymmdd: int
    day: int
    source: int
    sequence: int


def _region_error(v: int) -> ValueError:
    return ValueError(f"order id region: {v} is not 1 (north) or 2 (south)")


def _date_error(v: int) -> ValueError:
    return ValueError(f"order id date: yymmdd {v} is not a calendar date in 2000-2099")


def _source_error(v: int) -> ValueError:
    return ValueError(f"order id source: {v} is not 0 (redis) or 1 (db)")


def _sequence_error(v: int) -> ValueError:
    return ValueError(f"order id sequence: {v} is not in [0, 10**11)")


def is_calendar_date(yymmdd: int) -> bool:
    """Whether yymmdd names a real day of year 2000 + yy."""
    if not 0 <= yymmdd <= 991231:
        return False
    try:
        datetime.date(2000 + yymmdd // 10000, yymmdd // 100 % 100, yymmdd % 100)
    except ValueError:
        return False
    return True


def _check_fields(region: int, yymmdd: int, source: int, sequence: int) -> None:
    if region not in REGIONS:
        raise _region_error(region)
    if not is_calendar_date(yymmdd):
        raise _date_error(yymmdd)
    if source not in SOURCES:
        raise _source_error(source)
    if not 0 <= sequence < SEQUENCE_LIMIT:
        raise _sequence_error(sequence)


def encode(region: int, yymmdd: int, source: int, sequence: int) -> str:
    """The 20-digit id; ValueError naming the first invalid field (region, date, source, sequence)."""
    region, yymmdd, source, sequence = (operator.index(v) for v in (region, yymmdd, source, sequence))
    _check_fields(region, yymmdd, source, sequence)
    body = f"{region:01d}{yymmdd:06d}{source:01d}{sequence:011d}"
    return body + str(damm(body))


def decode(s: str) -> Parts:
    """Parse an id, checking length, digits, check digit, region, date, source in that order."""
    if not isinstance(s, str):
        raise TypeError(f"{type(s).__name__!r} object is not an instance of 'str'")
    if len(s) != ORDER_ID_LEN:
        raise ValueError(f"order id length: expected 20 characters, got {len(s)}")
    for i, c in enumerate(s):
        if c not in _DIGITS:
            raise ValueError(f"order id digits: character {i} is not an ASCII digit")
    expected, found = damm(s[:19]), int(s[19])
    if expected != found:
        raise ValueError(f"order id check digit: expected {expected}, got {found}")
    region, yymmdd, source, sequence = int(s[0]), int(s[1:7]), int(s[7]), int(s[8:19])
    _check_fields(region, yymmdd, source, sequence)
    return Parts(region, yymmdd, yymmdd % 100, source, sequence)


def is_valid(s: object) -> bool:
    """True for a well-formed id, False for anything else (never raises)."""
    if not isinstance(s, str):
        return False
    try:
        decode(s)
    except ValueError:
        return False
    return True
