"""The storm's tokens: one per user for the whole storm, whichever load process mints it."""

from __future__ import annotations

import time

import jwt
import pytest
from hongbao.bench.storm.wire import Tokens, token_expiry
from hongbao.server.auth import TokenVerifier

SECRET = "storm-test-secret-of-32-bytes-at-least"


def test_processes_started_seconds_apart_mint_one_token_per_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """Load processes start at different instants but share the run's expiry: a user's token is
    the same in all of them, so the server verifies it once, not once per process."""
    exp = token_expiry()
    first = Tokens(SECRET, exp).bearer("alice")
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + 7.0)
    later = Tokens(SECRET, exp).bearer("alice")
    assert later == first
    assert jwt.decode(first[7:], SECRET, algorithms=["HS256"])["exp"] == exp
    verifier = TokenVerifier(SECRET, ["HS256"])
    assert verifier.bearer(first) is verifier.bearer(later)


def test_admin_and_user_tokens_differ() -> None:
    """The admin's token carries ``role: admin``; the user's of the same name does not."""
    tokens = Tokens(SECRET)
    verifier = TokenVerifier(SECRET, ["HS256"])
    assert verifier.bearer(tokens.bearer("ops", admin=True)).admin
    assert not verifier.bearer(tokens.bearer("ops")).admin
