"""Response values and the one mapping of errors to HTTP answers (docs/architecture.md section 12)."""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson
from hongbao.core.errors import HongbaoError
from hongbao_native import encode_response

JSON = ("content-type", "application/json")


@dataclass(frozen=True, slots=True)
class Response:
    """An HTTP answer: ``status``, extra ``headers`` (lower-case names), ``body`` bytes; ``wire``:
    the whole HTTP/1.1 answer already encoded (``prebuilt``), else empty (encoded when sent)."""

    status: int
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)
    wire: bytes = field(default=b"", compare=False, repr=False)


def prebuilt(response: Response) -> Response:
    """``response`` with its HTTP/1.1 bytes encoded once (``wire``): for the constant answers of
    hot routes, sent as they are to every keep-alive HTTP/1.1 request."""
    return Response(
        response.status,
        response.body,
        response.headers,
        encode_response(response.status, response.headers, response.body),
    )


def json_response(status: int, payload: object, headers: list[tuple[str, str]] | None = None) -> Response:
    """``payload`` serialised with orjson, with a JSON content type."""
    return Response(status, orjson.dumps(payload), [JSON, *(headers or [])])


def error_response(status: int, code: str, message: str, headers: list[tuple[str, str]] | None = None) -> Response:
    """``{"error": {"code", "message"}}`` with ``status``."""
    return json_response(status, {"error": {"code": code, "message": message}}, headers)


def from_error(exc: HongbaoError) -> Response:
    """The answer for a HongbaoError: its status, code, message and extra headers."""
    return error_response(exc.status, exc.code, exc.message, exc.headers)
