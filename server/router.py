"""Route matching: (method, path template) -> handler, with ``{name}`` path parameters.

Templates are split on ``/``; a segment ``{name}`` matches any non-empty segment. Matching is
exact otherwise; a path that matches a template with another method answers 405.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

Handler = Callable[..., Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Route:
    """``method`` ``template`` -> ``handler``; ``auth`` is "none", "user" or "admin"."""

    method: str
    template: str
    handler: Handler
    auth: str = "user"

    @property
    def segments(self) -> tuple[str, ...]:
        """The template's path segments."""
        return tuple(self.template.strip("/").split("/"))


class Router:
    """Match a request's method and path against a list of routes."""

    __slots__ = ("_by_length",)

    def __init__(self, routes: list[Route]) -> None:
        self._by_length: dict[int, list[tuple[tuple[str, ...], Route]]] = {}
        for route in routes:
            self._by_length.setdefault(len(route.segments), []).append((route.segments, route))

    @property
    def routes(self) -> list[Route]:
        """Every route, grouped by segment count (tests compare them with docs/openapi.yaml)."""
        return [route for entries in self._by_length.values() for _, route in entries]

    def match(self, method: str, path: str) -> tuple[Route | None, dict[str, str], bool]:
        """(route, path parameters, path_known): route None with path_known True means 405."""
        parts = path.strip("/").split("/")
        path_known = False
        for segments, route in self._by_length.get(len(parts), ()):
            params: dict[str, str] = {}
            for template, part in zip(segments, parts):
                if template.startswith("{"):
                    if not part:
                        break
                    params[template[1:-1]] = part
                elif template != part:
                    break
            else:
                if route.method == method:
                    return route, params, True
                path_known = True
        return None, {}, path_known

    def allowed(self, path: str) -> list[str]:
        """The methods some route takes on ``path``, sorted (the Allow header of a 405, RFC 9110 15.5.6)."""
        parts = path.strip("/").split("/")
        return sorted({route.method for segments, route in self._by_length.get(len(parts), ())
                       if all((t.startswith("{") and bool(p)) or t == p for t, p in zip(segments, parts))})
