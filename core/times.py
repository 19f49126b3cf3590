"""Time helpers: ms since the epoch <-> RFC 3339 strings, and the business day of an order id."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

BUSINESS_TZ = ZoneInfo("Asia/Shanghai")


def rfc3339(ms: int) -> str:
    """UTC RFC 3339 with milliseconds, e.g. ``2026-11-29T23:18:00.123Z`` (RFC 3339 section 5.6)."""
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def business_yymmdd(ms: int, tz: ZoneInfo = BUSINESS_TZ) -> int:
    """The business day of an instant as the int yymmdd of the order id (docs/architecture.md section 4)."""
    day = datetime.fromtimestamp(ms // 1000, tz)
    return (day.year % 100) * 10000 + day.month * 100 + day.day


def business_year(ms: int, tz: ZoneInfo = BUSINESS_TZ) -> int:
    """The calendar year of an instant in the business time zone (yearly list summaries)."""
    return datetime.fromtimestamp(ms // 1000, tz).year
