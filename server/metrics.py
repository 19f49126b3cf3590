"""Prometheus metrics, multiprocess-safe, with a hot path of plain integer bumps.

prometheus-client's own multiprocess values cost ~10 us an update (docs/architecture.md section 8), so each
worker counts in plain lists (one latency histogram per route and status, whose count is the
route's requests of that status: a request costs one dict lookup, one bisect and two additions)
and writes a snapshot file (``<dir>/<pid>.json``) once a second;
a scrape of ``/metrics`` on any worker merges every worker's file (the live ones and those of
workers that died: counters never go backwards) and renders them with prometheus-client's
exposition code (text format 0.0.4).
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Iterator
from pathlib import Path

import orjson
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST
_COUNTERS = {
    "opens": "Packets opened (new receipts)",
    "grabs": "Grab checks answered",
    "admission_rejections": "Opens refused with 429 busy by per-packet admission",
    "push_delivered": "Push messages handed to a user's socket (here or through another node)",
    "push_forwarded": "Push messages handed to a user's socket on another node (internal forward)",
    "push_queued": "Push messages left in the offline queue (user offline or unreachable)",
    "push_failures": "Event pushes that failed (logged; the money flow went on)",
    "push_broadcast_sends": "Broadcast frames sent to local subscribers",
    "ws_handshakes": "WebSocket handshakes answered 101",
    "ws_admission_rejections": (
        "WebSocket handshakes refused with 503 (the host-wide admission rate, or the push store down)"
    ),
    "redis_fallback_sequence": "Order ids taken from the DB block allocator because Redis was down (source 1)",
    "redis_fallback_preorder": "Pre-order calls served by the DB because Redis was down",
    "redis_fallback_flags": "Flag reads and writes served by the DB alone because Redis was down",
    "redis_fallback_expiries": "Expiry index calls skipped because Redis was down (the refund job scanned the DB)",
    "redis_fallback_leases": "Job leases taken without Redis because it was down (every worker ran the job)",
    "redis_breaker_opens": "Times the Redis circuit breaker opened (Redis considered down)",
    "redis_fallback_queue": "Queue messages not written because Redis was down (credits left to the reconciler)",
    "redis_fallback_push": "Push messages not appended to the users' logs because Redis was down (refused at once)",
    "redis_fallback_grab": "Grab checks served by the DB because Redis was down (behind a rate limiter)",
    "redis_grab_shed": "Grabs answered 503 degraded: Redis down and the DB checks at their rate limit",
    "redis_grab_lost_writes": "Grab state writes lost to a Redis outage (the key is deleted on the next read)",
    "redis_fallback_details": "Packet details read from the DB because Redis was down (not cached there)",
    "redis_fallback_lists": "Sent/received list pages read from the DB because Redis was down (not cached there)",
    "redis_views_lost_bumps": "Details/list cache invalidations lost to a Redis outage (sent again with the next read)",
    "redis_fallback_profiles": "Greeting and profile calls skipped because Redis was down (defaults shown)",
}


class RouteMetrics:
    """One route's requests: ``by_status`` maps an HTTP status to its latency histogram, the
    counts of BUCKETS_S then +Inf (each request in exactly one) and last the sum of seconds."""

    __slots__ = ("by_status",)

    def __init__(self) -> None:
        self.by_status: dict[int, list[float]] = {}

    def observe(self, status: int, seconds: float) -> None:
        """Count one request answered with ``status`` after ``seconds``."""
        hist = self.by_status.get(status)
        if hist is None:
            hist = self.by_status[status] = [0.0] * (len(BUCKETS_S) + 2)
        hist[bisect_left(BUCKETS_S, seconds)] += 1
        hist[-1] += seconds


class WorkerMetrics:
    """One worker's counters: requests by (route, status) and latency histograms by route
    (seconds), kept per route by ``route(name)``, and named event counters. ``directory`` holds
    every worker's snapshot file."""

    __slots__ = ("directory", "routes", "events", "gauges")

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.routes: dict[str, RouteMetrics] = {}
        self.events: dict[str, int] = dict.fromkeys(_COUNTERS, 0)
        self.gauges: dict[str, float] = {}

    def route(self, name: str) -> RouteMetrics:
        """The counters of route ``name`` (the same object for the same name): the caller keeps
        it and observes each request on it."""
        return self.routes.setdefault(name, RouteMetrics())

    def flush(self) -> None:
        """Write this worker's snapshot atomically (rename over the old one): requests by
        "route|status" and latency histograms by route (bucket counts, +Inf, sum), summed over
        the statuses."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{os.getpid()}.json"
        tmp = path.with_suffix(".tmp")
        requests: dict[str, int] = {}
        latency: dict[str, list[float]] = {}
        for name, route in self.routes.items():
            for status, hist in route.by_status.items():
                requests[f"{name}|{status}"] = int(sum(hist[:-1]))
                merged = latency.get(name)
                latency[name] = list(hist) if merged is None else [a + b for a, b in zip(merged, hist, strict=True)]
        tmp.write_bytes(orjson.dumps({"requests": requests, "latency": latency, "events": self.events}))
        tmp.replace(path)

    def render(self) -> bytes:
        """The merged metrics of every worker, in the Prometheus text format."""
        self.flush()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Merged(self.directory, dict(self.gauges)))
        return generate_latest(registry)


class _Merged:
    def __init__(self, directory: Path, gauges: dict[str, float]) -> None:
        self.directory, self.gauges = directory, gauges

    def collect(self) -> Iterator[Metric]:
        requests: dict[str, int] = {}
        latency: dict[str, list[float]] = {}
        events: dict[str, int] = dict.fromkeys(_COUNTERS, 0)
        for path in self.directory.glob("*.json"):
            try:
                snap = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                continue
            for key, value in snap["requests"].items():
                requests[key] = requests.get(key, 0) + value
            for route, hist in snap["latency"].items():
                merged = latency.setdefault(route, [0.0] * len(hist))
                latency[route] = [a + b for a, b in zip(merged, hist, strict=False)]
            for name, value in snap["events"].items():
                events[name] = events.get(name, 0) + value
        total = CounterMetricFamily(
            "hongbao_http_requests", "HTTP requests by route and status", labels=["route", "status"]
        )
        for key, value in sorted(requests.items()):
            route, status = key.rsplit("|", 1)
            total.add_metric([route, status], value)
        yield total
        hist_family = HistogramMetricFamily(
            "hongbao_http_request_duration_seconds", "Request latency by route", labels=["route"]
        )
        for route, hist in sorted(latency.items()):
            cumulative, buckets = 0.0, []
            for bound, count in zip((*map(str, BUCKETS_S), "+Inf"), hist[:-1], strict=False):
                cumulative += count
                buckets.append((bound, cumulative))
            hist_family.add_metric([route], buckets, hist[-1])
        yield hist_family
        for name, help_text in _COUNTERS.items():
            counter = CounterMetricFamily(f"hongbao_{name}", help_text)
            counter.add_metric([], events.get(name, 0))
            yield counter
        for name, value in sorted(self.gauges.items()):
            gauge = GaugeMetricFamily(f"hongbao_{name}", name.replace("_", " "))
            gauge.add_metric([], value)
            yield gauge
