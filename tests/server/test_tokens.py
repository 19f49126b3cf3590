"""The 401 messages of TokenVerifier: each names what is wrong with the token in the terms of
RFC 7519, never the JSON or base64 decoder's own text."""

from __future__ import annotations

import time

import jwt
import pytest
from hongbao.core.errors import Unauthorized
from hongbao.server.auth import TokenVerifier, numeric_date

KEY = "k" * 64
NOT_JWT = "invalid token: not a JWT (RFC 7519: three base64url parts, JSON header and claims)"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("abc.def.ghi", NOT_JWT),  # the header decodes to bytes that are not UTF-8
        ("not.a.token", NOT_JWT),
        ("e30.e30", NOT_JWT),  # two parts
        ("e30.e30.", "invalid token: Algorithm not specified"),  # {} as the header
        ("", NOT_JWT),
        (
            jwt.encode({"sub": "bob", "exp": time.time() + 60}, "another-key-of-at-least-32-bytes!", "HS256"),
            "invalid token: Signature verification failed",
        ),
        (jwt.encode({"sub": "bob", "exp": time.time() - 60}, KEY, "HS256"), "invalid token: Signature has expired"),
        (jwt.encode({"sub": "bob", "exp": "never"}, KEY, "HS256"), numeric_date("exp")),
        (  # the signature first: a forged token's claims are not read
            jwt.encode({"sub": "bob", "exp": "never"}, "another-key-of-at-least-32-bytes!", "HS256"),
            "invalid token: Signature verification failed",
        ),
        (jwt.encode({"sub": "bob", "exp": True}, KEY, "HS256"), numeric_date("exp")),  # not 1 s past the epoch
        (
            jwt.encode({"sub": "bob", "exp": "4102444800"}, KEY, "HS256"),
            numeric_date("exp"),
        ),  # a string, however numeric
        (jwt.encode({"sub": "bob", "exp": time.time() + 60, "nbf": "now"}, KEY, "HS256"), numeric_date("nbf")),
        (jwt.encode({"sub": "bob", "exp": time.time() + 60, "iat": [1]}, KEY, "HS256"), numeric_date("iat")),
        (jwt.encode({"sub": "bob", "exp": time.time() + 60, "nbf": "0"}, KEY, "HS256"), numeric_date("nbf")),
        (jwt.encode({"sub": "bob", "exp": time.time() + 60, "nbf": True}, KEY, "HS256"), numeric_date("nbf")),
        (jwt.encode({"sub": "bob", "exp": time.time() + 60, "iat": False}, KEY, "HS256"), numeric_date("iat")),
    ],
    ids=[
        "not-utf8",
        "not-base64-json",
        "two-parts",
        "no-alg",
        "empty",
        "wrong-key",
        "expired",
        "exp-word",
        "exp-word-wrong-key",
        "exp-true",
        "exp-text",
        "nbf",
        "iat",
        "nbf-text",
        "nbf-true",
        "iat-false",
    ],
)
def test_a_bad_token_is_refused_with_a_plain_message(token: str, message: str) -> None:
    """401 with the message given: no codec, padding or JSON decoder text; a time claim that is not
    a number is named as such, not as a token that is no JWT."""
    with pytest.raises(Unauthorized) as refused:
        TokenVerifier(KEY, ["HS256"]).verify(token)
    assert (refused.value.status, refused.value.code) == (401, "unauthorized")
    assert str(refused.value) == message
