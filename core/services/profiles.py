"""Profiles and greetings: the non-critical fields (docs/architecture.md section 5), read through a
per-worker memory cache and falling back to defaults whenever the store cannot answer, so that no
read (details, the caller's profile) ever fails because of them.

Defaults: a user without a profile (or while the store is down) is shown with ``nickname`` = their
user id and ``avatar_url`` = "" (DEFAULT_AVATAR_URL: the client draws its own placeholder), and an
empty nickname shows as the user id too; a packet without a greeting shows "". A worker keeps
what it read for PROFILE_MEMORY_TTL_MS, so another worker's change shows within that; its own
changes show at once. Defaults read while the store was down are not kept, so the real fields
come back with the store.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Sequence
from urllib.parse import urlsplit

from hongbao.core import errors
from hongbao.core.breaker import BreakerOpen
from hongbao.core.clock import Clock
from hongbao.core.ports import ProfileStore
from hongbao.core.ttl_cache import TtlCache

log = logging.getLogger("hongbao.service")
NICKNAME_MAX_CHARS, AVATAR_URL_MAX_CHARS = 64, 512
DEFAULT_AVATAR_URL = ""
PROFILE_MEMORY_TTL_MS = 5_000
_NOT_IN_A_URL = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf"})  # separators, controls, format characters
_NOT_IN_A_NAME = frozenset({"Zl", "Zp", "Cc"})  # line and paragraph separators, controls (NUL, CR, LF, tab)
#: Unicode's Bidi_Control characters (UAX #9): marks, embeddings, overrides and isolates, which
#: reorder the text shown after a name (U+202E turns "gnp.exe" around); zero-width joiners stay (emoji).
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
#: (nickname, avatar_url)
Names = tuple[str, str]


class Profiles:
    """The non-critical fields over ``store`` (see the module docstring), on ``clock``."""

    __slots__ = ("store", "clock", "_memory")

    def __init__(self, store: ProfileStore, clock: Clock) -> None:
        self.store, self.clock = store, clock
        self._memory: TtlCache[str, Names] = TtlCache(PROFILE_MEMORY_TTL_MS)

    async def set(self, user_id: str, nickname: object, avatar_url: object) -> dict[str, str]:
        """Keep ``user_id``'s nickname (at most 64 characters, none of them a control, a line break
        or a bidirectional control, not only spaces: ``_shown_name``; "" shows the user id) and
        avatar URL (at most 512, an absolute ``http`` or ``https`` URL or "": a client puts it in an
        image's ``src``, where ``javascript:`` or ``data:`` would be a page's script or content of
        the user's choosing); returns the profile as it now shows (``get``'s shape). Raises
        InvalidRequest for anything else, Degraded while the store is down."""
        if not isinstance(nickname, str) or not isinstance(avatar_url, str):
            raise errors.InvalidRequest("nickname and avatar_url must be strings")
        if len(nickname) > NICKNAME_MAX_CHARS:
            raise errors.InvalidRequest(f"nickname is longer than {NICKNAME_MAX_CHARS} characters")
        if len(avatar_url) > AVATAR_URL_MAX_CHARS:
            raise errors.InvalidRequest(f"avatar_url is longer than {AVATAR_URL_MAX_CHARS} characters")
        if not _shown_name(nickname):
            raise errors.InvalidRequest(
                "nickname must have a visible character and no control character, line break or"
                ' bidirectional control (U+202E), or be "" (shown as the user id)'
            )
        if avatar_url and not _web_url(avatar_url):
            raise errors.InvalidRequest(
                "avatar_url must be an absolute http or https URL with a host and no credentials,"
                ' spaces or control characters, or ""'
            )
        try:
            await self.store.set_profile(user_id, nickname, avatar_url)
        except BreakerOpen:
            raise errors.Degraded("the profile store is down; try again shortly") from None
        self._memory.drop(user_id)
        return {"user_id": user_id, "nickname": nickname or user_id, "avatar_url": avatar_url}

    async def get(self, user_id: str) -> dict[str, str]:
        """``{user_id, nickname, avatar_url}`` of ``user_id``, the defaults when unset or unknown."""
        nickname, avatar_url = (await self.names([user_id]))[user_id]
        return {"user_id": user_id, "nickname": nickname, "avatar_url": avatar_url}

    async def names(self, user_ids: Sequence[str]) -> dict[str, Names]:
        """(nickname, avatar_url) of every one of ``user_ids``: from memory, else all the missing
        ones in one read of the store, else (the store down or failing) the defaults. Never raises."""
        now_ms = self.clock.now_ms()
        found: dict[str, Names] = {}
        missing: list[str] = []
        for user_id in user_ids:
            held = self._memory.get(user_id, now_ms)
            if held is None:
                missing.append(user_id)
            else:
                found[user_id] = held
        if not missing:
            return found
        try:
            stored = await self.store.profiles(missing)
        except Exception as exc:  # the store is down (BreakerOpen) or failing: defaults, not kept
            if not isinstance(exc, BreakerOpen):
                log.exception("profile read of %d users failed; defaults shown", len(missing))
            return found | {user_id: (user_id, DEFAULT_AVATAR_URL) for user_id in missing}
        for user_id in missing:
            nickname, avatar_url = stored.get(user_id, ("", DEFAULT_AVATAR_URL))
            names = found[user_id] = (nickname or user_id, avatar_url)
            self._memory.put(user_id, names, now_ms)
        return found

    async def greeting(self, order_id: str) -> str | None:
        """The packet's greeting ("" when it has none), or None when the store cannot answer (show
        "", and do not keep the details for long). Never raises."""
        try:
            return await self.store.greeting(order_id) or ""
        except Exception as exc:
            if not isinstance(exc, BreakerOpen):
                log.exception("greeting read of %s failed; none shown", order_id)
            return None


def _shown_name(nickname: str) -> bool:
    """Whether ``nickname`` shows as itself beside other text: "" (the user id is shown), or some
    character that is not whitespace, and no control character (Cc), line or paragraph separator
    (Zl, Zp) or Unicode Bidi_Control character (UAX #9, ``_BIDI_CONTROLS``)."""
    if not nickname:
        return True
    return not nickname.isspace() and not any(
        c in _BIDI_CONTROLS or unicodedata.category(c) in _NOT_IN_A_NAME for c in nickname
    )


def _web_url(url: str) -> bool:
    """Whether ``url`` is an absolute ``http``/``https`` URL (RFC 3986 section 4.3) with a host of
    non-empty labels, a valid port if any, no user information, and no separator, control or
    format character (Unicode categories Z*, Cc, Cf: a space, CR LF, NUL or a right-to-left override)."""
    if any(unicodedata.category(c) in _NOT_IN_A_URL for c in url):
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port out of range or not a number)
    except ValueError:  # a malformed host (an unclosed IPv6 bracket) or port
        return False
    host = parts.hostname or ""
    return (
        parts.scheme.lower() in ("http", "https")
        and bool(host)
        and "@" not in parts.netloc
        and (":" in host or all(host.split(".")))
    )
