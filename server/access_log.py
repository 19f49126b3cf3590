"""The access log and the audit log of admin actions (docs/operations.md "Logs"), written by
``App`` once a request's answer is made (and by the connection for a WebSocket upgrade).

- Access, logger ``hongbao.access`` at INFO, only when ``access_log`` is on (the caller checks
  its flag first, so a server without it pays one attribute test a request): ``GET
  /v1/packets/{order_id} path=/v1/packets/1261129... status=200 ms=0.412 user=alice``; "-" for no
  user. Never a header and never the query (``?token=`` of a WebSocket upgrade), so never a token.
- Audit, logger ``hongbao.audit``, always: one line per request to an admin route (top-ups, the
  crediting mode, the test clock, admin pushes: every route with ``auth="admin"``), refused ones
  included: who (the token's sub, "-" without a valid token), the route and path, the arguments
  (the JSON body's fields and the Idempotency-Key; only the body's size when the caller is no
  admin), the status and the answer. WARNING when the caller was refused (401, 403: someone tried
  an admin action without the right), else INFO (a dependency that was down has its own line).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from hongbao.server.auth import Identity
from hongbao.server.logs import ACCESS_LOGGER, AUDIT_LOGGER, Compact
from hongbao.server.responses import Response
from hongbao.server.router import Route
from hongbao_native import Request

ACCESS = logging.getLogger(ACCESS_LOGGER)
AUDIT = logging.getLogger(AUDIT_LOGGER)
ACCESS_LINE = "%(method)s %(route)s path=%(path)s status=%(status)d ms=%(ms).3f user=%(user)s"
AUDIT_LINE = "user=%(user)s action=%(action)s path=%(path)s args=%(args)s status=%(status)d outcome=%(outcome)s"
#: An audit argument whose JSON is longer than this (an admin push's ``data``) shows its size instead.
ARGUMENT_MAX_BYTES = 512


def access(request: Request, route: str, status: int, elapsed_s: float, identity: Identity | None) -> None:
    """Log the access line of ``request`` answered with ``status`` after ``elapsed_s`` seconds;
    ``route`` is its route's template ("unmatched" for none), ``identity`` its verified caller."""
    ACCESS.info(
        ACCESS_LINE,
        {
            "method": request.method,
            "route": route,
            "path": request.path,
            "status": status,
            "ms": round(elapsed_s * 1000, 3),
            "user": "-" if identity is None else identity.user_id,
        },
    )


def audit(request: Request, route: Route, identity: Identity | None, response: Response) -> None:
    """Log the audit line of ``request`` to the admin route ``route``, by ``identity`` (None: no
    valid token), answered with ``response`` (a JSON body, as every route's)."""
    admin = identity is not None and identity.admin
    AUDIT.log(
        logging.WARNING if response.status in (401, 403) else logging.INFO,
        AUDIT_LINE,
        {
            "user": "-" if identity is None else identity.user_id,
            "action": f"{route.method} {route.template}",
            "path": request.path,
            "args": Compact(_arguments(request) if admin else {"body_bytes": len(request.body)}),
            "status": response.status,
            "outcome": Compact(_decoded(response.body)),
        },
    )


def _arguments(request: Request) -> dict[str, Any]:
    """What an admin asked for: the body's fields (each as sent, or ``"<N bytes of JSON>"`` past
    ARGUMENT_MAX_BYTES) and the Idempotency-Key when there is one."""
    arguments: dict[str, Any] = {}
    key = request.header("idempotency-key")
    if key is not None:
        arguments["idempotency_key"] = key
    body = _decoded(request.body) if request.body else {}
    if not isinstance(body, dict):
        return {**arguments, "body": f"<{len(request.body)} bytes, not a JSON object>"}
    for name, value in body.items():
        size = len(orjson.dumps(value))
        arguments[name] = value if size <= ARGUMENT_MAX_BYTES else f"<{size} bytes of JSON>"
    return arguments


def _decoded(body: bytes) -> Any:
    """``body`` as JSON, or ``"<N bytes, not JSON>"``."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return f"<{len(body)} bytes, not JSON>"
