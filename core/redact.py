"""Secrets out of every text a person reads: a setting is echoed (in an error, a warning, a log
line, ``--help``, the generated docs/settings.md) only through ``redact``."""

from __future__ import annotations

import re
from typing import overload

MASK = "***"
SECRET_SUFFIXES = ("secret", "password", "token")  # jwt_secret, internal_secret, ...

# scheme://user:PASSWORD@host: the password runs to the last "@" before a comma (a list of DSNs) or
# a blank, so one written with a raw "@" or "/" in it is masked whole too.
_URL_PASSWORD = re.compile(r"(://[^:/@\s,]*:)[^\s,]*@")
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&\s,]*", re.IGNORECASE)  # redis://host?password=...


@overload
def redact(value: str, name: str = "") -> str: ...


@overload
def redact(value: object, name: str = "") -> object: ...


def redact(value: object, name: str = "") -> object:
    """``value`` as a message may show it. The value of a secret setting (``name`` ending in one of
    SECRET_SUFFIXES, such as ``jwt_secret``) is MASK whatever it is, unless empty; in any other
    string the password of every URL is MASK: ``mysql://user:***@host:3306``, ``redis://:***@host``,
    ``redis://host?password=***`` (several comma-separated DSNs each). Anything else is returned
    unchanged, so ``f"{redact(value, name)!r}"`` reads as ``f"{value!r}"`` does."""
    if name.lower().endswith(SECRET_SUFFIXES) and value not in ("", None):
        return MASK
    if isinstance(value, str):
        return _QUERY_PASSWORD.sub(rf"\1{MASK}", _URL_PASSWORD.sub(rf"\1{MASK}@", value))
    return value
