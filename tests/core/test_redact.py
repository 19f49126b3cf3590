"""``redact``, the one way a setting reaches a message: secrets masked whole, URL passwords masked, the rest as is."""

from __future__ import annotations

from pathlib import Path

import pytest
from hongbao.core.redact import redact


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("mysql://u:pw@h:3306", "mysql://u:***@h:3306"),
        ("mysql://u:p@ss@h:1,mysql://v:q@h2:2", "mysql://u:***@h:1,mysql://v:***@h2:2"),
        ("mysql://u:p:w@h", "mysql://u:***@h"),
        ("redis://:pw@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("rediss://default:pw@h:6380", "rediss://default:***@h:6380"),
        ("redis://h:6379/0?password=pw&db=1", "redis://h:6379/0?password=***&db=1"),
        ("mysql://u@h:3306", "mysql://u@h:3306"),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("127.0.0.1", "127.0.0.1"),
        ("", ""),
    ],
)
def test_url_passwords_are_masked(value: str, shown: str) -> None:
    """Every URL's password, in a list of DSNs too, with a raw "@" or ":" in it, becomes ***; nothing else changes."""
    assert redact(value) == shown
    assert redact(value, "mysql_dsn") == shown


@pytest.mark.parametrize("name", ["jwt_secret", "internal_secret", "smtp_password", "JWT_SECRET"])
def test_secret_settings_are_masked_whole(name: str) -> None:
    """A setting named like a secret shows *** whatever its value, and "" when empty (nothing to hide)."""
    assert redact("hunter2", name) == "***"
    assert redact(12345, name) == "***"
    assert redact("", name) == ""


def test_other_values_are_unchanged() -> None:
    """Numbers, booleans, paths and tuples come back as they are, so their repr reads as before."""
    for value in (8080, 0.05, True, Path("var"), ("https://a.example",)):
        assert redact(value, "port") is value


def test_redact_hides_passwords_only() -> None:
    """Every password of a DSN list or URL becomes ***; users, hosts, ports and paths stay."""
    assert redact("mysql://hb:pw@db1:3306,mysql://hb:p%40w@db2") == "mysql://hb:***@db1:3306,mysql://hb:***@db2"
    assert redact("redis://:pw@cache:6379/0") == "redis://:***@cache:6379/0"
    assert redact("rediss://cache:6379?password=pw&db=1") == "rediss://cache:6379?password=***&db=1"
    assert redact("mysql://db1:3306,mysql://root@db2") == "mysql://db1:3306,mysql://root@db2"
