"""The push channel's browser assets, served from ``server/static/`` (package data): the plain
JavaScript client at ``GET /v1/ws/client.js`` and a demo page that uses it at ``GET /v1/ws/demo``
(docs/architecture.md section 7). Both need no token (a ``<script src>`` sends no Authorization header); each
file is read once, when the worker builds its routes."""

from __future__ import annotations

from importlib.resources import files

from hongbao.server.context import Context
from hongbao.server.responses import Response
from hongbao.server.router import Route

ASSETS = (
    ("/v1/ws/client.js", "hongbao-push.js", "application/javascript; charset=utf-8"),
    ("/v1/ws/demo", "demo.html", "text/html; charset=utf-8"),
)


def asset_routes() -> list[Route]:
    """One GET route per asset of ASSETS, answering the file with its content type."""
    return [asset_route(path, name, content_type) for path, name, content_type in ASSETS]


def asset_route(path: str, name: str, content_type: str) -> Route:
    """A GET route at ``path`` answering server/static/``name`` with ``content_type``, no token."""
    body = (files("hongbao.server") / "static" / name).read_bytes()
    response = Response(200, body, [("content-type", content_type), ("cache-control", "no-cache")])

    async def serve(_ctx: Context) -> Response:
        return response

    serve.__doc__ = f"GET {path}: server/static/{name}."
    return Route("GET", path, serve, auth="none")
