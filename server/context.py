"""What a handler sees of one request: who is asking, the path parameters, the body and query."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import orjson
from hongbao.core.errors import InvalidRequest
from hongbao.server.auth import Identity
from hongbao_native import Request


@dataclass(slots=True)
class Context:
    """One request as handlers see it. ``identity`` is None only on routes without auth."""

    identity: Identity | None
    params: dict[str, str]
    request: Request

    @property
    def body(self) -> bytes:
        """The request body, bytes."""
        return self.request.body

    @property
    def query(self) -> str:
        """The raw query string (after '?', not decoded)."""
        return self.request.query

    @property
    def user_id(self) -> str:
        """The caller's user id, from the verified token only (never from the body)."""
        assert self.identity is not None
        return self.identity.user_id

    def json(self) -> dict[str, Any]:
        """The body as a JSON object; InvalidRequest for malformed JSON, deep nesting, a name twice
        in one object (``unique_names``) or anything but an object (an empty body and ``null``
        included: every JSON route requires its body)."""
        if not self.body:
            raise InvalidRequest("the body must be a JSON object")
        try:
            value = orjson.loads(self.body)
        except orjson.JSONDecodeError as exc:
            if "UTF-8" in str(exc):  # orjson's words for bytes that are not UTF-8 text
                raise InvalidRequest("the body must be JSON text in UTF-8 (RFC 8259 section 8.1)") from None
            raise InvalidRequest(f"malformed JSON body: {exc}") from None
        if not isinstance(value, dict):
            raise InvalidRequest("the body must be a JSON object")
        unique_names(self.body)
        return value

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (any case; repeated fields joined with ", "), or None."""
        return self.request.header(name)

    def query_int(self, name: str, default: int, low: int, high: int) -> int:
        """Integer query parameter ``name`` in [low, high]; InvalidRequest otherwise."""
        values = parse_qs(self.query).get(name)
        if not values:
            return default
        text = values[-1]
        # ASCII digits only ("²".isdigit() is True but int() refuses it) and short enough for int()
        if not (text.isascii() and text.isdigit()) or len(text) > 18 or not low <= int(text) <= high:
            raise InvalidRequest(f"{name} must be an integer in {low}..{high}")
        return int(text)


def _pairs_once(pairs: list[tuple[str, Any]]) -> None:
    """``object_pairs_hook`` of ``unique_names``: InvalidRequest at the first name seen twice."""
    seen = set()
    for name, _ in pairs:
        if name in seen:
            raise InvalidRequest(f"the name {name!r} appears twice in one JSON object (RFC 7493 section 2.3)")
        seen.add(name)


def unique_names(body: bytes) -> None:
    """Raise InvalidRequest when an object of ``body`` (JSON text orjson already parsed) has a member
    name twice, at any depth: orjson, as RFC 8259 section 4 allows, keeps the last value, so
    ``{"amount_fen": 1, "amount_fen": 100}`` would mean whatever the last parser to read it says;
    I-JSON (RFC 7493 section 2.3) forbids such names. The check is the standard library's parser
    with an ``object_pairs_hook`` (orjson has none): about 4 us for a send's body, on the routes
    that take a body only; a nesting past Python's recursion limit is InvalidRequest too."""
    try:
        json.loads(body, object_pairs_hook=_pairs_once)
    except RecursionError:
        raise InvalidRequest("the JSON body nests too deep") from None
