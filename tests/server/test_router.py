"""The router and the per-worker caches on the request path: answers stay exact with the caches."""

from __future__ import annotations

from hongbao.core.ttl_cache import TtlCache
from hongbao.server.router import RECENT_MAX, Route, Router


async def _nothing() -> None:
    return None


ROUTES = [
    Route("GET", "/healthz", _nothing, auth="none"),
    Route("POST", "/v1/packets/{order_id}/open", _nothing),
    Route("GET", "/v1/packets/{order_id}", _nothing),
    Route("POST", "/v1/packets/{order_id}/pay", _nothing),
]


def test_params_routes_and_405_are_exact_on_first_and_repeated_matches() -> None:
    """The same path answers the same (route, params, path_known) the first time and from the recent cache."""
    router = Router(ROUTES)
    for _ in range(2):
        route, params, known = router.match("POST", "/v1/packets/123/open")
        assert route is ROUTES[1] and params == {"order_id": "123"} and known
        assert router.match("GET", "/healthz") == (ROUTES[0], {}, True)
        assert router.match("DELETE", "/v1/packets/123/open") == (None, {}, True)
        assert router.match("GET", "/v1/nothing/here") == (None, {}, False)


def test_slashes_at_either_end_are_ignored_and_an_empty_segment_matches_nothing() -> None:
    """As docs/openapi.yaml says: ``/healthz/`` and ``//healthz`` are ``/healthz``; ``/v1/packets//pay`` is no route."""
    router = Router(ROUTES)
    assert router.match("GET", "/healthz/") == router.match("GET", "//healthz") == (ROUTES[0], {}, True)
    assert router.match("POST", "/v1/packets/7/pay/") == (ROUTES[3], {"order_id": "7"}, True)
    assert router.match("POST", "/v1/packets//pay") == (None, {}, False)


def test_recent_cache_stays_bounded_and_exact_past_its_size() -> None:
    """More distinct paths than RECENT_MAX keep matching with their own params; the cache never grows past it."""
    router = Router(ROUTES)
    paths = [f"/v1/packets/{i}" for i in range(RECENT_MAX + 10)]
    for _ in range(2):
        for i, path in enumerate(paths):
            route, params, _ = router.match("GET", path)
            assert route is ROUTES[2] and params == {"order_id": str(i)}
    assert len(router._recent) <= RECENT_MAX


def test_ttl_cache_expires_at_its_ttl_and_evicts_the_oldest() -> None:
    """An entry lives until put time + ttl (exclusive); past max_entries the oldest goes first."""
    cache: TtlCache[str, int] = TtlCache(1000, max_entries=2)
    cache.put("a", 1, now_ms=5000)
    assert cache.get("a", 5999) == 1 and cache.get("a", 6000) is None and cache.get("a", 5001) is None
    cache.put("a", 1, 0)
    cache.put("b", 2, 0)
    cache.put("c", 3, 0)
    assert (cache.get("a", 1), cache.get("b", 1), cache.get("c", 1)) == (None, 2, 3)
