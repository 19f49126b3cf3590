"""Route matching: (method, path template) -> handler, with ``{name}`` path parameters.

Templates are split on ``/``; a segment ``{name}`` matches any non-empty segment. Matching is
exact otherwise; a path that matches a template with another method answers 405. Every GET route
also takes HEAD (RFC 9110 section 9.3.2: GET without the content; the connection drops the body).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Handler = Callable[
    ..., Any
]  # (Context) -> Response, or when it needs I/O an awaitable of one or a Soon (hongbao.core.soon)


@dataclass(frozen=True, slots=True)
class Route:
    """``method`` ``template`` -> ``handler``; ``auth`` is "none", "user" or "admin"; ``event``
    names the metrics counter the route bumps (opens count 200 answers only); ``owned``: the
    route names a packet (``{order_id}``) and is served by the node that owns it in the order's
    region (server/fleet.py); ``new_packet``: the route makes a packet, in the region the traffic
    switch names (hongbao.core.services.traffic)."""

    method: str
    template: str
    handler: Handler
    auth: str = "user"
    event: str | None = None
    owned: bool = False
    new_packet: bool = False

    @property
    def segments(self) -> tuple[str, ...]:
        """The template's path segments."""
        return tuple(self.template.strip("/").split("/"))


class _Node:
    """A trie node over path segments: literal children, one parameter child, methods at the end."""

    __slots__ = ("literal", "param", "param_name", "methods")

    def __init__(self) -> None:
        self.literal: dict[str, _Node] = {}
        self.param: _Node | None = None
        self.param_name = ""
        self.methods: dict[str, Route] = {}


_NO_PARAMS: dict[str, str] = {}  # shared by every match of a template without parameters
RECENT_MAX = 4096  # parameterised paths remembered (a hot packet's grab and open paths repeat)


class Router:
    """Match a request's method and path against a list of routes: a walk down a trie of path
    segments, one dict lookup a segment (literal segments win over a ``{name}`` parameter).
    A path equal to a template without parameters costs one lookup; recent walks of other paths
    are remembered (at most RECENT_MAX, then forgotten at once), so a hot path costs two; the
    params dicts it returns are shared: read them only."""

    __slots__ = ("_routes", "_root", "_static", "_recent")

    def __init__(self, routes: list[Route]) -> None:
        self._routes = list(routes)
        self._root = _Node()
        self._static: dict[str, dict[str, Route]] = {}  # template without parameters -> its node's methods
        self._recent: dict[str, tuple[dict[str, Route], dict[str, str]]] = {}  # path -> (its node's methods, params)
        for route in routes:
            node = self._root
            for segment in route.segments:
                if segment.startswith("{"):
                    if node.param is None:
                        node.param = _Node()
                        node.param_name = segment[1:-1]
                    elif node.param_name != segment[1:-1]:
                        raise ValueError(f"{route.template}: parameter {segment} clashes with {{{node.param_name}}}")
                    node = node.param
                else:
                    node = node.literal.setdefault(segment, _Node())
            methods = ("GET", "HEAD") if route.method == "GET" else (route.method,)
            for method in methods:
                node.methods[method] = route
            if "{" not in route.template:
                self._static[route.template] = node.methods

    @property
    def routes(self) -> list[Route]:
        """Every route, in the order given (tests compare them with docs/openapi.yaml); the HEAD
        each GET route also takes is not listed."""
        return list(self._routes)

    def _find(self, path: str) -> tuple[_Node | None, dict[str, str]]:
        node: _Node | None = self._root
        params: dict[str, str] = {}
        for part in path.strip("/").split("/"):
            assert node is not None
            child = node.literal.get(part)
            if child is None:
                if node.param is None or not part:
                    return None, {}
                params[node.param_name] = part
                child = node.param
            node = child
        return node, params

    def match(self, method: str, path: str) -> tuple[Route | None, dict[str, str], bool]:
        """(route, path parameters, path_known): route None with path_known True means 405."""
        methods = self._static.get(path)
        if methods is not None:
            params: dict[str, str] = _NO_PARAMS
        else:
            recent = self._recent.get(path)
            if recent is None:
                node, params = self._find(path)
                if node is None or not node.methods:
                    return None, {}, False
                if len(self._recent) >= RECENT_MAX:
                    self._recent.clear()
                recent = self._recent[path] = (node.methods, params)
            methods, params = recent
        route = methods.get(method)
        if route is None:
            return None, {}, True
        return route, params, True

    def allowed(self, path: str) -> list[str]:
        """The methods some route takes on ``path``, HEAD with GET, sorted (the Allow header of a 405,
        RFC 9110 15.5.6)."""
        node, _ = self._find(path)
        return sorted(node.methods) if node is not None else []
