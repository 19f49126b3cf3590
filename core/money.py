"""Money is an integer number of fen (100 fen = 1 yuan) everywhere; no float ever touches it.

The API takes amounts as JSON integers of fen (``amount_fen``) or as yuan strings (``"12.34"``)
parsed exactly (docs/architecture.md section 3). Range checks against the packet limits are
the packet rules' job; these functions only turn wire values into fen.
"""

from __future__ import annotations

import re

from hongbao.core.errors import InvalidAmount

FEN_PER_YUAN = 100
_YUAN = re.compile(r"(0|[1-9][0-9]{0,15})(?:\.([0-9]{1,2}))?")
_INT64_MAX = 2**63 - 1


def parse_fen(value: object, field: str = "amount_fen") -> int:
    """Return ``value`` as a positive number of fen.

    Accepts only a JSON integer (a Python ``int`` that is not a ``bool``) in 1..2**63-1.
    Raises InvalidAmount for floats (even ``100.0``), strings, booleans, zero, negatives and
    values beyond int64, naming ``field``.
    """
    if type(value) is not int:
        raise InvalidAmount(f"{field} must be a positive integer number of fen, got {_json_kind(value)}")
    if value <= 0:
        raise InvalidAmount(f"{field} must be positive, got {value}")
    if value > _INT64_MAX:
        raise InvalidAmount(f"{field} is out of range")
    return value


def _json_kind(value: object) -> str:
    """What a JSON value is, in JSON's words (a number past int64 arrives as a float)."""
    if value is None:
        return "null or nothing"
    if isinstance(value, float):
        return "a number with a fraction or out of range"
    kinds = {bool: "a boolean", str: "a string", list: "an array", dict: "an object"}
    return kinds.get(type(value), type(value).__name__)


def parse_yuan(value: object, field: str = "amount_yuan") -> int:
    """Parse a yuan string such as ``"12.34"`` exactly into fen (1234).

    Shape: digits, optionally a point and one or two decimals; no sign, exponent, spaces or
    leading zeros. Raises InvalidAmount for anything else (more than two decimals, negative, zero,
    floats or numbers instead of strings), naming ``field``.
    """
    if not isinstance(value, str):
        raise InvalidAmount(f'{field} must be a string such as "12.34"')
    match = _YUAN.fullmatch(value)
    if match is None:
        raise InvalidAmount(f'{field} must look like "12.34" (at most two decimals), got {value!r}')
    whole, decimals = match.group(1), match.group(2) or ""
    fen = int(whole) * FEN_PER_YUAN + int(decimals.ljust(2, "0"))
    if fen <= 0:
        raise InvalidAmount(f"{field} must be positive, got {value!r}")
    return fen
