"""Per-worker metrics (server/metrics.py): what /metrics shows stays exact with per-route, per-status histograms."""

from __future__ import annotations

from pathlib import Path

from hongbao.server.metrics import BUCKETS_S, WorkerMetrics
from prometheus_client.parser import text_string_to_metric_families

# (route, status, seconds): 0.0005 is a bucket bound (le is inclusive), 7.0 is past the last one (+Inf)
OBSERVED = [
    ("/a", 200, 0.0001),
    ("/a", 200, 0.0005),
    ("/a", 404, 0.2),
    ("/a", 200, 0.003),
    ("/b/{id}", 201, 7.0),
    ("unmatched", 404, 0.0004),
]


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_requests_and_latency_are_exact_per_route_and_status(tmp_path: Path) -> None:
    """Requests by (route, status), and each route's histogram (buckets, count, sum over its
    statuses) add up exactly."""
    metrics = WorkerMetrics(tmp_path)
    assert metrics.route("/a") is metrics.route("/a")
    for route, status, seconds in OBSERVED:
        metrics.route(route).observe(status, seconds)
    samples = _samples(metrics.render().decode())
    requests = {k[1]: v for k, v in samples.items() if k[0] == "hongbao_http_requests_total"}
    assert requests == {
        (("route", "/a"), ("status", "200")): 3,
        (("route", "/a"), ("status", "404")): 1,
        (("route", "/b/{id}"), ("status", "201")): 1,
        (("route", "unmatched"), ("status", "404")): 1,
    }
    for route in ("/a", "/b/{id}", "unmatched"):
        seen = [seconds for name, _, seconds in OBSERVED if name == route]
        key = (("route", route),)
        assert samples[("hongbao_http_request_duration_seconds_count", key)] == len(seen)
        assert abs(samples[("hongbao_http_request_duration_seconds_sum", key)] - sum(seen)) < 1e-12
        for bound in (*BUCKETS_S, float("inf")):
            le = "+Inf" if bound == float("inf") else str(bound)
            assert samples[("hongbao_http_request_duration_seconds_bucket", (("le", le), *key))] == sum(
                s <= bound for s in seen
            )
