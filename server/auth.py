"""Bearer tokens: JWT verification with a bounded cache, the embedded key file, and minting.

Tokens (docs/architecture.md section 12): HS256 with the configured secret (or RS256/ES256 against a public
key), ``sub`` = the user id (1..64 of [A-Za-z0-9_-]), ``exp`` required, ``role: "admin"`` for
admins. PyJWT does the cryptography and the registered-claim checks (RFC 7519 section 4.1);
a verified token is cached until its ``exp`` (PyJWT's HS256 check costs ~55 us, a cache hit
under 1 us; past CACHE_SIZE tokens the oldest cached one goes first). No token is ever logged.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import jwt
from hongbao.core.errors import Unauthorized
from hongbao.core.rules import valid_user_id

KEY_FILE = "jwt.key"
CACHE_SIZE = 65536
#: A 401's text for a token PyJWT cannot parse (its DecodeError text quotes the decoder: codec, padding).
NOT_A_JWT = "not a JWT (RFC 7519: three base64url parts, JSON header and claims)"
#: The time claims: NumericDates, each a JSON number (RFC 7519 sections 2 and 4.1).
_TIME_CLAIMS = ("exp", "nbf", "iat")


def numeric_date(claim: str) -> str:
    """The 401 text for a time ``claim`` ("exp", "nbf", "iat") that is not a number."""
    return f"invalid token: {claim} must be a NumericDate (RFC 7519 section 2)"


def _not_numeric(claims: dict[str, object]) -> str | None:
    """The first time claim present in ``claims`` whose value is not a JSON number (a string,
    a boolean, a list...), or None. PyJWT reads them with ``int()``: ``"0"`` and ``true`` pass it
    as 0 and 1, ``"never"`` fails it as a DecodeError."""
    return next((c for c in _TIME_CLAIMS if c in claims and type(claims[c]) not in (int, float)), None)


def _refusal(token: str, exc: jwt.PyJWTError) -> str:
    """The 401 text for PyJWT's refusal ``exc`` of ``token``: a time claim that is not a number is
    named (``numeric_date``; the claims are read again without the signature, which PyJWT checks
    first: not for a bad signature or algorithm), else PyJWT's words, or NOT_A_JWT for a token it
    cannot parse (its DecodeError text quotes the decoder)."""
    if not isinstance(exc, jwt.InvalidSignatureError | jwt.InvalidAlgorithmError):
        with contextlib.suppress(jwt.PyJWTError):
            bad = _not_numeric(jwt.decode(token, options={"verify_signature": False}))
            if bad is not None:
                return numeric_date(bad)
    return f"invalid token: {NOT_A_JWT if type(exc) is jwt.DecodeError else exc}"


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a verified token speaks for: ``user_id``, ``admin``, and ``exp`` (s since the epoch)."""

    user_id: str
    admin: bool
    exp: float


def embedded_secret(data_dir: Path) -> str:
    """The HS256 secret of the embedded default: ``data_dir/jwt.key`` (mode 0600), created on first
    use. Processes that create it at the same instant all read the one key that won: it is written
    whole to a file of its own, then linked into place (link(2) fails when the name exists), so no
    reader ever sees it half-written."""
    path = data_dir / KEY_FILE
    data_dir.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        draft = data_dir / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_hex(32) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(FileExistsError):  # another process's key won
                os.link(draft, path)
        finally:
            draft.unlink()
    return path.read_text().strip()


class TokenVerifier:
    """Verify bearer tokens: ``key`` is the HS256 secret or a PEM public key, ``algorithms`` the
    accepted algorithms, ``leeway_s`` the allowed clock skew in seconds."""

    __slots__ = ("_key", "_algorithms", "_leeway_s", "_cache", "_headers")

    def __init__(self, key: str, algorithms: list[str], leeway_s: float = 5.0) -> None:
        self._key, self._algorithms, self._leeway_s = key, algorithms, leeway_s
        self._cache: dict[str, Identity] = {}  # insertion order: the oldest goes first
        self._headers: dict[str, tuple[float, Identity]] = {}  # header value -> (exp + leeway, identity)

    def bearer(self, header: str | None) -> Identity:
        """The identity of an ``Authorization`` header value ``Bearer <token>`` (the scheme in any
        case, RFC 9110 section 11.1, RFC 6750 section 2.1); raises Unauthorized for a missing
        header or another scheme, and as ``verify``. A header value seen before costs one lookup
        and the expiry check (the per-request path of every authenticated route)."""
        if header is None:
            raise Unauthorized("missing bearer token")
        cached = self._headers.get(header)
        if cached is not None:
            if cached[0] > time.time():
                return cached[1]
            del self._headers[header]
        if header[:7].lower() != "bearer ":
            raise Unauthorized("missing bearer token")
        token = header[7:].strip()
        if "," in token or " " in token:  # repeated Authorization fields arrive joined with ", "
            raise Unauthorized("send one Authorization: Bearer <token> field with one token")
        identity = self.verify(token)
        self._headers[header] = (identity.exp + self._leeway_s, identity)
        if len(self._headers) > CACHE_SIZE:
            del self._headers[next(iter(self._headers))]
        return identity

    def verify(self, token: str) -> Identity:
        """The token's identity; raises Unauthorized (not a JWT, bad signature, expired, no exp, a
        time claim that is not a NumericDate, bad sub)."""
        cached = self._cache.get(token)
        if cached is not None:
            if cached.exp + self._leeway_s > time.time():
                return cached
            del self._cache[token]
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=self._algorithms,
                leeway=self._leeway_s,
                options={"require": ["exp", "sub"]},
            )
        except jwt.PyJWTError as exc:
            raise Unauthorized(_refusal(token, exc)) from None
        bad = _not_numeric(claims)
        if bad is not None:
            raise Unauthorized(numeric_date(bad))
        user_id = claims.get("sub")
        if not valid_user_id(user_id):
            raise Unauthorized("invalid token: sub must be 1..64 of [A-Za-z0-9_-]")
        identity = Identity(str(user_id), claims.get("role") == "admin", float(claims["exp"]))
        self._cache[token] = identity
        if len(self._cache) > CACHE_SIZE:
            del self._cache[next(iter(self._cache))]
        return identity


def mint(
    secret: str, user_id: str, *, admin: bool = False, ttl_s: float = 24 * 3600, expires_at: int | None = None
) -> str:
    """An HS256 token for ``user_id`` valid for ``ttl_s`` seconds, or until ``expires_at`` (s since
    the epoch) when given (``role: admin`` if ``admin``). The same arguments give the same token
    (HS256 is deterministic), whichever process mints it. Raises ValueError for an invalid user id.
    (A negative ``ttl_s`` mints an expired token, which tests need; the CLI refuses one.)"""
    if not valid_user_id(user_id):
        raise ValueError("user id must be 1..64 of [A-Za-z0-9_-]")
    exp = int(time.time() + ttl_s) if expires_at is None else expires_at
    claims: dict[str, object] = {"sub": user_id, "exp": exp}
    if admin:
        claims["role"] = "admin"
    return jwt.encode(claims, secret, algorithm="HS256")
