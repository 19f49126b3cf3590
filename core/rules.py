"""Packet limits and the validation of a send request (docs/architecture.md section 3).

Defaults follow WeChat: 1..100 shares, at most 20000 fen (200 yuan) a packet, at least 1 fen a
share, expiry 24 h, greeting at most 64 characters, groups of at most 500 members. The
configuration may move each limit within LIMIT_RANGES (tests raise the group size, for example).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hongbao.core.errors import InvalidAmount, InvalidCount, InvalidRequest
from hongbao.core.money import parse_fen, parse_yuan
from hongbao.core.packet import Kind, PacketSpec

USER_ID_MAX = 64
GROUP_ID_MAX = 255  # characters: the width of group_id in the tables (mysql/schema.py takes it from here)
DAY_MS = 24 * 3600 * 1000

# Allowed values of each limit, inclusive. The greeting column is VARCHAR(255) on the production
# backend; a packet's total stays far below the int64 columns; expiry and the payment window are
# at least a second (pay_by and expires_at must not be past when they are handed out) and at most
# 30 days (the day tables are reused every month).
LIMIT_RANGES: dict[str, tuple[int, int]] = {
    "max_count": (1, 10_000),
    "max_total_fen": (1, 100_000_000_000),
    "max_group_size": (2, 100_000),
    "greeting_max_chars": (0, 255),
    "expiry_ms": (1000, 30 * DAY_MS),
    "pay_ttl_ms": (1000, 30 * DAY_MS),
}


@dataclass(frozen=True, slots=True)
class Limits:
    """Configurable limits; amounts in fen, durations in milliseconds."""

    max_count: int = 100
    """Most shares a packet may have."""
    max_total_fen: int = 20_000
    """Largest total of a packet, in fen."""
    max_group_size: int = 500
    """Most members a group may have, its creator included."""
    greeting_max_chars: int = 64
    """Longest greeting, in characters."""
    expiry_ms: int = 24 * 3600 * 1000
    """A packet not fully opened this long after its pay expires, and its remainder is refunded."""
    pay_ttl_ms: int = 15 * 60 * 1000
    """A pre-order must be paid within this long after the send."""

    def checked(self) -> Limits:
        """These limits, if each lies in its LIMIT_RANGES range; ValueError naming the first that does not."""
        for name, (low, high) in LIMIT_RANGES.items():
            check_range(f"limits.{name}", getattr(self, name), low, high)
        return self


def check_range(name: str, value: float, low: float, high: float, note: str = "") -> None:
    """Raise ValueError "{name} must be in {low}..{high}{note}, got {value}" unless low <= value <= high
    (so NaN never passes, nor infinity unless ``high`` is infinite)."""
    if not low <= value <= high:
        raise ValueError(f"{name} must be in {range_text(low, high, note)}, got {value!r}")


def range_text(low: float, high: float, note: str = "") -> str:
    """An inclusive range as errors and docs/settings.md show it: ``1..100``, ``0.001..86400``,
    ``1..100_000_000_000``, followed by ``note`` (what the ends mean)."""
    return f"{_shown(low)}..{_shown(high)}{note}"


def _shown(number: float) -> str:
    """``number`` as a config file would take it: 86400, 0.001, 100_000_000_000."""
    whole = int(number) if float(number).is_integer() else number
    return f"{whole:_}" if abs(whole) >= 100_000 else str(whole)


def valid_user_id(value: object) -> bool:
    """True for a user id: a str of 1..64 characters from [A-Za-z0-9_-] (docs/architecture.md section 12)."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= USER_ID_MAX
        and value.isascii()
        and all(c.isalnum() or c in "_-" for c in value)
    )


def _amount(body: Mapping[str, object], fen_key: str, yuan_key: str) -> int | None:
    if fen_key in body and yuan_key in body:
        raise InvalidRequest(f"give {fen_key} or {yuan_key}, not both")
    if fen_key in body:
        return parse_fen(body[fen_key], fen_key)
    if yuan_key in body:
        return parse_yuan(body[yuan_key], yuan_key)
    return None


def _count(body: Mapping[str, object], limits: Limits) -> int:
    count = body.get("count")
    if type(count) is not int or not 1 <= count <= limits.max_count:
        raise InvalidCount(f"count must be an integer in 1..{limits.max_count}")
    return count


def _total(body: Mapping[str, object], kind: Kind, count: int) -> int:
    total = _amount(body, "total_fen", "total_yuan")
    per_share = _amount(body, "per_share_fen", "per_share_yuan")
    if kind is Kind.EQUAL:
        # equal packets take the per-share amount, so there is never a remainder to round.
        if total is not None and per_share is not None:
            raise InvalidRequest("give per_share_fen or total_fen for an equal packet, not both")
        if per_share is not None:
            return per_share * count
        if total is None:
            raise InvalidAmount("an equal packet needs per_share_fen (or per_share_yuan)")
        if total % count:
            raise InvalidAmount(f"total_fen {total} does not divide into {count} equal shares")
        return total
    if per_share is not None:
        raise InvalidRequest(f"per_share_fen applies to equal packets only, not {kind}")
    if total is None:
        raise InvalidAmount("total_fen (or total_yuan) is required")
    return total


def validate_send(body: Mapping[str, object], sender_id: str, limits: Limits) -> PacketSpec:
    """Turn a send request body into a PacketSpec, or raise.

    Body keys: kind ("lucky" | "equal" | "exclusive"), count, total_fen | total_yuan (or, for
    equal packets, per_share_fen | per_share_yuan), group_id or receiver_id, greeting.
    Raises InvalidRequest (unknown kind, target missing or both, bad greeting, exclusive to self),
    InvalidCount (count outside 1..max_count, count above total, exclusive with count != 1),
    InvalidAmount (not positive integer fen, over max_total_fen, equal remainder).
    """
    try:
        kind = Kind(str(body.get("kind", "lucky")))
    except ValueError:
        raise InvalidRequest("kind must be one of lucky, equal, exclusive") from None
    if kind is Kind.EXCLUSIVE:
        if body.get("count", 1) != 1 or type(body.get("count", 1)) is not int:
            raise InvalidCount("an exclusive packet has count 1")
        count = 1
    else:
        count = _count(body, limits)
    total = _total(body, kind, count)
    if total > limits.max_total_fen:
        raise InvalidAmount(f"total {total} fen is over the limit of {limits.max_total_fen} fen")
    if total < count:
        raise InvalidCount(f"count {count} is more than {total} fen: every share needs at least 1 fen")
    greeting = body.get("greeting", "")
    if not isinstance(greeting, str) or len(greeting) > limits.greeting_max_chars:
        raise InvalidRequest(f"greeting must be a string of at most {limits.greeting_max_chars} characters")
    group_id, receiver_id = body.get("group_id"), body.get("receiver_id")
    if kind is Kind.EXCLUSIVE:
        if group_id is not None or receiver_id is None:
            raise InvalidRequest("an exclusive packet needs a receiver_id and no group_id")
        if not isinstance(receiver_id, str) or not valid_user_id(receiver_id):
            raise InvalidRequest("receiver_id must be a user id: 1..64 of [A-Za-z0-9_-]")
        if receiver_id == sender_id:
            raise InvalidRequest("an exclusive packet cannot be sent to oneself")
        return PacketSpec(kind, 1, total, None, receiver_id, greeting)
    if receiver_id is not None or not isinstance(group_id, str) or not group_id:
        raise InvalidRequest(f"a {kind} packet needs a group_id and no receiver_id")
    if len(group_id) > GROUP_ID_MAX:  # no group has such an id; an error message never echoes it
        raise InvalidRequest(f"group_id must be at most {GROUP_ID_MAX} characters")
    return PacketSpec(kind, count, total, group_id, None, greeting)
