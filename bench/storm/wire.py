"""The storm's HTTP side: tokens for every user, and one request with its outcome.

The client is ``http1.Http1Client`` (asyncio protocols and httptools), not httpx or aiohttp: the
storm is an open-loop generator whose own CPU must stay small next to the server's (httpx stays
in the tests, where clarity matters more than throughput). Tokens are minted with the target's
HS256 key, read from its data directory (``jwt.key``, docs/architecture.md section 12) or given
as a secret.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from hongbao.bench.storm.http1 import Http1Client, HttpError
from hongbao.server.auth import KEY_FILE, mint

TOKEN_TTL_S = 6 * 3600


def storm_secret(data_dir: Path | None, jwt_secret: str | None) -> str:
    """The HS256 secret to mint with: ``jwt_secret`` if given, else ``data_dir/jwt.key`` (never
    created here: a key made in the wrong directory would only yield 401s). Raises ValueError
    when neither is given, FileNotFoundError when the key file is missing."""
    if jwt_secret:
        return jwt_secret
    if data_dir is None:
        raise ValueError("give the target's --data-dir (to read its jwt.key) or --jwt-secret")
    path = data_dir / KEY_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: is {data_dir} the target server's data directory?")
    return path.read_text().strip()


def token_expiry() -> int:
    """The ``exp`` (s since the epoch) of a storm's tokens: ``TOKEN_TTL_S`` from now."""
    return int(time.time()) + TOKEN_TTL_S


class Tokens:
    """Tokens per user, minted once (HS256) with one ``expires_at`` (s since the epoch; default
    ``token_expiry()``); the admin's for top-ups. Instances given the same secret and expiry mint
    the same token for a user, so a user holds one token across the storm's processes, as a real
    client does (and the server's verifier cache sees one token per user, not one per process)."""

    __slots__ = ("_secret", "_expires_at", "_cache")

    def __init__(self, secret: str, expires_at: int | None = None) -> None:
        self._secret = secret
        self._expires_at = token_expiry() if expires_at is None else expires_at
        self._cache: dict[tuple[str, bool], str] = {}

    def jwt(self, user: str, admin: bool = False) -> str:
        """The JWT of ``user`` (an admin token if ``admin``)."""
        value = self._cache.get((user, admin))
        if value is None:
            value = self._cache[(user, admin)] = mint(self._secret, user, admin=admin, expires_at=self._expires_at)
        return value

    def bearer(self, user: str, admin: bool = False) -> str:
        """``Bearer <jwt>`` for ``user`` (an admin token if ``admin``)."""
        return "Bearer " + self.jwt(user, admin)


@dataclass(slots=True)
class Answer:
    """One request's outcome: HTTP ``status`` (0: no answer), error ``code`` ("" on 2xx; the
    body's ``error.code``, or ``timeout`` / the client exception's name), the JSON ``body`` of a
    2xx, ``retry_after_s`` of a 429, and ``started`` / ``latency_s`` (monotonic seconds)."""

    status: int
    code: str
    body: dict[str, Any] | None
    retry_after_s: float
    started: float
    latency_s: float


async def request(
    client: Http1Client, path: str, method: str, auth: str, payload: bytes | None, key: str | None
) -> Answer:
    """Send one request and read the whole answer; never raises for network errors or timeouts."""
    headers = [("Authorization", auth)]
    if payload is not None:
        headers.append(("Content-Type", "application/json"))
    if key is not None:
        headers.append(("Idempotency-Key", key))
    started = time.monotonic()
    try:
        status, raw, retry = await client.request(method, path, headers, payload)
    except TimeoutError:
        return Answer(0, "timeout", None, 0.0, started, time.monotonic() - started)
    except (OSError, HttpError) as exc:
        return Answer(0, type(exc).__name__, None, 0.0, started, time.monotonic() - started)
    latency = time.monotonic() - started
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        body = {}
    if status < 400:
        return Answer(status, "", body, 0.0, started, latency)
    error = body.get("error") if isinstance(body, dict) else None
    code = str(error.get("code", status)) if isinstance(error, dict) else str(status)
    return Answer(status, code, None, _seconds(retry), started, latency)


def _seconds(value: str | None) -> float:
    try:
        return max(0.0, float(value)) if value is not None else 0.0
    except ValueError:
        return 0.0
