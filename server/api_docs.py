"""The API's description, served by every node: ``docs/openapi.yaml`` (package data: the
``hongbao.server.docs`` data package maps the repository's ``docs/``, as ``server/static`` is
mapped for the push assets) at ``GET /v1/openapi.yaml``, and a reference page at ``GET /v1/docs``:
plain HTML made from that spec (every operation with its method, path, summary, who may call it,
its description and the statuses it answers), with no script, no stylesheet from elsewhere and
no build step. Neither needs a token. The spec is read once, when the worker builds its routes;
the page is made on its first request and kept.
"""

from __future__ import annotations

from html import escape
from importlib.resources import files
from typing import Any

import yaml
from hongbao.server.context import Context
from hongbao.server.responses import Response
from hongbao.server.router import Route

SPEC_PATH, DOCS_PATH = "/v1/openapi.yaml", "/v1/docs"
SPEC_TYPE = "application/yaml"  # RFC 9512
METHODS = ("get", "put", "post", "delete", "patch")
_STYLE = (
    "body{font:15px/1.45 system-ui,sans-serif;max-width:70em;margin:2em auto;padding:0 1em}"
    "table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:.35em .5em;"
    "text-align:left;vertical-align:top}code{font-size:.95em}details pre{white-space:pre-wrap;margin:.3em 0}"
)


def spec_bytes() -> bytes:
    """docs/openapi.yaml as shipped with the package."""
    return (files("hongbao.server") / "docs" / "openapi.yaml").read_bytes()


def _who(path: str, op: dict[str, Any], default: list[Any]) -> str:
    if op.get("security", default) == []:
        return "anyone"
    return "admin token" if path.startswith("/v1/admin/") else "bearer token"


def reference_page(spec: dict[str, Any]) -> bytes:
    """The HTML reference page of ``spec`` (an OpenAPI document as parsed YAML): its title and
    summary, then one table row per operation in the spec's order; every text is escaped."""
    info, default = spec.get("info", {}), spec.get("security", [])
    rows = []
    for path, item in spec.get("paths", {}).items():
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            statuses = ", ".join(str(status) for status in op.get("responses", {}))
            description = op.get("description", "").strip()
            summary = escape(op.get("summary", ""))
            text = f"<details><summary>{summary}</summary><pre>{escape(description)}</pre></details>"
            rows.append(
                f"<tr><td><code>{method.upper()}</code></td><td><code>{escape(path)}</code></td>"
                f"<td>{text if description else summary}</td><td>{_who(path, op, default)}</td>"
                f"<td>{escape(statuses)}</td></tr>"
            )
    title = escape(f"{info.get('title', 'API')} {info.get('version', '')}".strip())
    page = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title} API</title>'
        f"<style>{_STYLE}</style></head><body><h1>{title} API</h1><p>{escape(info.get('summary', ''))}</p>"
        f'<p>The whole contract: <a href="{SPEC_PATH}">openapi.yaml</a> (OpenAPI {escape(spec.get("openapi", ""))}).'
        ' Errors are <code>{"error": {"code", "message"}}</code>; money is integer fen.</p>'
        "<table><thead><tr><th>method</th><th>path</th><th>what</th><th>who</th><th>answers</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></body></html>"
    )
    return page.encode()


def docs_routes() -> list[Route]:
    """``GET /v1/openapi.yaml`` (the spec, ``application/yaml``) and ``GET /v1/docs`` (the page,
    ``text/html``), without auth."""
    body = spec_bytes()
    spec_response = Response(200, body, [("content-type", SPEC_TYPE), ("cache-control", "no-cache")])
    page: list[Response] = []

    async def serve_spec(_ctx: Context) -> Response:
        """GET /v1/openapi.yaml: docs/openapi.yaml."""
        return spec_response

    async def serve_page(_ctx: Context) -> Response:
        """GET /v1/docs: the reference page of the spec (made once)."""
        if not page:
            html = reference_page(yaml.load(body, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
            page.append(
                Response(200, html, [("content-type", "text/html; charset=utf-8"), ("cache-control", "no-cache")])
            )
        return page[0]

    return [Route("GET", SPEC_PATH, serve_spec, auth="none"), Route("GET", DOCS_PATH, serve_page, auth="none")]
