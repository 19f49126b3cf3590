"""Per-worker metrics (server/metrics.py): what /metrics shows stays exact with per-route, per-status
histograms, is the catalog's families exactly, and merges gauges over the live workers only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hongbao.server.metric_catalog import CATALOG
from hongbao.server.metrics import BUCKETS_S, WorkerMetrics
from prometheus_client.parser import text_string_to_metric_families

# (method, route, status, seconds): 0.0005 is a bucket bound (le is inclusive), 7.0 is past the last one (+Inf)
OBSERVED = [
    ("GET", "/a", 200, 0.0001),
    ("GET", "/a", 200, 0.0005),
    ("GET", "/a", 404, 0.2),
    ("DELETE", "/a", 204, 0.003),
    ("POST", "/b/{id}", 201, 7.0),
    ("", "unmatched", 404, 0.0004),
]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _dead_pid() -> int:
    """The pid of a process that has exited (and was reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_requests_and_latency_are_exact_per_method_route_and_status(tmp_path: Path) -> None:
    """Requests by (method, route, status), and each (method, route)'s histogram (buckets, count,
    sum over its statuses) add up exactly: GET and DELETE on one template stay apart."""
    metrics = WorkerMetrics(tmp_path)
    assert metrics.route("GET", "/a") is metrics.route("GET", "/a")
    assert metrics.route("GET", "/a") is not metrics.route("DELETE", "/a")
    for method, route, status, seconds in OBSERVED:
        metrics.route(method, route).observe(status, seconds)
    samples = _samples(metrics.render({}).decode())
    requests = {k[1]: v for k, v in samples.items() if k[0] == "hongbao_http_requests_total"}
    assert requests == {
        (("method", "GET"), ("route", "/a"), ("status", "200")): 2,
        (("method", "GET"), ("route", "/a"), ("status", "404")): 1,
        (("method", "DELETE"), ("route", "/a"), ("status", "204")): 1,
        (("method", "POST"), ("route", "/b/{id}"), ("status", "201")): 1,
        (("method", ""), ("route", "unmatched"), ("status", "404")): 1,
    }
    for method, route in {(m, r) for m, r, _, _ in OBSERVED}:
        seen = [seconds for m, r, _, seconds in OBSERVED if (m, r) == (method, route)]
        key = (("method", method), ("route", route))
        assert samples[("hongbao_http_request_duration_seconds_count", key)] == len(seen)
        assert abs(samples[("hongbao_http_request_duration_seconds_sum", key)] - sum(seen)) < 1e-12
        for bound in (*BUCKETS_S, float("inf")):
            le = "+Inf" if bound == float("inf") else str(bound)
            assert samples[("hongbao_http_request_duration_seconds_bucket", (("le", le), *key))] == sum(
                s <= bound for s in seen
            )


def test_every_family_of_the_catalog_is_exported_and_nothing_else(tmp_path: Path) -> None:
    """The exposition's families are the catalog's, in its order, with its types and help texts,
    even before anything was counted; an event counter the catalog does not list is not exported."""
    metrics = WorkerMetrics(tmp_path)
    metrics.events["not_in_the_catalog"] = 5
    families = list(text_string_to_metric_families(metrics.render({}).decode()))
    assert [(f.name, f.type, f.documentation) for f in families] == [
        (spec.family, spec.kind, spec.help) for spec in CATALOG
    ]


def test_gauges_merge_over_live_workers_and_counters_over_all(tmp_path: Path) -> None:
    """A dead worker's snapshot still adds its counters and histograms (they never go backwards)
    but not its gauges; live workers' gauges are summed, or the largest taken, as the catalog says."""
    metrics = WorkerMetrics(tmp_path)
    metrics.events["opens"] = 2
    metrics.sample("ws_connections", lambda: {("n1",): 3.0})
    metrics.sample("breaker_open", lambda: {("redis",): 0.0, ("mysql/db_00",): 1.0})
    metrics.flush()
    (live,) = tmp_path.glob("*.json")
    other = orjson.loads(live.read_bytes())
    other["counters"]["opens"] = {"": 5.0}
    other["gauges"] = {"ws_connections": {"n1": 4.0}, "breaker_open": {"redis": 1.0, "mysql/db_00": 0.0}}
    (tmp_path / f"{_dead_pid()}.json").write_bytes(orjson.dumps(other))
    samples = _samples(metrics.render({}).decode())
    assert samples[("hongbao_opens_total", ())] == 7
    assert samples[("hongbao_ws_connections", (("node", "n1"),))] == 3
    assert samples[("hongbao_breaker_open", (("dependency", "redis"),))] == 0
    (tmp_path / "1.json").write_bytes(orjson.dumps(other))  # pid 1 (init) lives: a second live worker
    samples = _samples(metrics.render({}).decode())
    assert samples[("hongbao_opens_total", ())] == 12
    assert samples[("hongbao_ws_connections", (("node", "n1"),))] == 7
    assert samples[("hongbao_breaker_open", (("dependency", "redis"),))] == 1
    assert samples[("hongbao_breaker_open", (("dependency", "mysql/db_00"),))] == 1


def test_scraped_gauges_and_the_json_summary_say_the_same(tmp_path: Path) -> None:
    """Gauges read at the scrape are exported as given; the JSON summary has every exported name,
    the same values, and histograms as per-bucket counts (+Inf last) with their count and sum."""
    metrics = WorkerMetrics(tmp_path)
    metrics.route("POST", "/v1/packets").observe(201, 0.002)
    metrics.route("POST", "/v1/packets").observe(201, 9.0)
    scraped = {"credits_pending": {(): 4.0}, "crediting_mode": {("queued",): 1.0, ("deferred",): 0.0}}
    samples = _samples(metrics.render(scraped).decode())
    assert samples[("hongbao_credits_pending", ())] == 4
    assert samples[("hongbao_crediting_mode", (("mode", "queued"),))] == 1
    summary = metrics.summary(scraped)
    assert set(summary["metrics"]) == {spec.exported for spec in CATALOG}
    assert summary["bucket_bounds_s"] == list(BUCKETS_S)
    assert summary["metrics"]["hongbao_credits_pending"] == [{"labels": {}, "value": 4.0}]
    [latency] = summary["metrics"]["hongbao_http_request_duration_seconds"]
    assert latency["labels"] == {"method": "POST", "route": "/v1/packets"}
    assert latency["count"] == 2 and latency["sum"] == pytest.approx(9.002)
    assert latency["buckets"][BUCKETS_S.index(0.0025)] == 1 and latency["buckets"][-1] == 1
    assert sum(latency["buckets"]) == 2 and len(latency["buckets"]) == len(BUCKETS_S) + 1


def test_only_worker_gauges_can_be_sampled(tmp_path: Path) -> None:
    """``sample`` takes the gauges merged over workers (sum, max); a counter, a gauge read at the
    scrape or an unknown name is a ValueError."""
    metrics = WorkerMetrics(tmp_path)
    for name in ("opens", "credits_pending", "nothing"):
        with pytest.raises(ValueError, match="not a gauge merged over the workers"):
            metrics.sample(name, dict)
