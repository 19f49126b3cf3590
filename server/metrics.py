"""Prometheus metrics, multiprocess-safe, with a hot path of plain integer bumps.

prometheus-client's own multiprocess values cost ~10 us an update (docs/architecture.md section 8), so each
worker counts in plain lists (one latency histogram per route and status, whose count is the
route's requests of that status: a request costs one dict lookup, one bisect and two additions)
and writes a snapshot file (``<dir>/<pid>.json``) once a second, with the values of its sampled
gauges (``WorkerMetrics.sample``) at that moment. A scrape of ``/metrics`` on any worker merges
every worker's file (counters and histograms of the live ones and of those that died: counters
never go backwards; gauges of the live ones only, summed or the largest as the catalog says),
adds the gauges the scraping worker read (``scraped``) and renders the families of
server/metric_catalog.py, every one of them, with prometheus-client's exposition code (text
format 0.0.4); ``summary`` gives the same values as JSON (the dashboard's).
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from hongbao.server.metric_catalog import (
    BY_NAME,
    CATALOG,
    EVENTS,
    FLEET_RELAY_LATENCY,
    HTTP_LATENCY,
    HTTP_REQUESTS,
    PUSH_LATENCY,
)
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
Labels = tuple[str, ...]
#: A gauge's values now, by label values (``()`` for a gauge without labels).
Sampler = Callable[[], dict[Labels, float]]
_SEP = "\x1f"  # joins label values into one JSON key (no route, method, node or dependency holds it)


def histogram() -> list[float]:
    """An empty histogram: the counts of BUCKETS_S then +Inf (each observation in exactly one),
    and last the sum of seconds."""
    return [0.0] * (len(BUCKETS_S) + 2)


def observe(hist: list[float], seconds: float) -> None:
    """Count one observation of ``seconds`` in ``hist`` (one bisect, two additions)."""
    hist[bisect_left(BUCKETS_S, seconds)] += 1
    hist[-1] += seconds


class RouteMetrics:
    """One route's requests: ``by_status`` maps an HTTP status to its latency histogram."""

    __slots__ = ("by_status",)

    def __init__(self) -> None:
        self.by_status: dict[int, list[float]] = {}

    def observe(self, status: int, seconds: float) -> None:
        """Count one request answered with ``status`` after ``seconds``."""
        hist = self.by_status.get(status)
        if hist is None:
            hist = self.by_status[status] = histogram()
        observe(hist, seconds)


class WorkerMetrics:
    """One worker's metrics: requests and latency by (method, route template), kept per route by
    ``route``; the event counters of the catalog (``events``: name -> count); the unlabelled
    histograms (``histograms``: name -> histogram, seconds); the sampled gauges (``sample``).
    ``directory`` holds every worker's snapshot file."""

    __slots__ = ("directory", "routes", "events", "histograms", "samplers")

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.routes: dict[tuple[str, str], RouteMetrics] = {}
        self.events: dict[str, int] = {spec.name: 0 for spec in EVENTS}
        self.histograms: dict[str, list[float]] = {
            PUSH_LATENCY.name: histogram(),
            FLEET_RELAY_LATENCY.name: histogram(),
        }
        self.samplers: dict[str, Sampler] = {}

    def route(self, method: str, template: str) -> RouteMetrics:
        """The counters of ``method`` on route ``template`` (the same object for the same pair):
        the caller keeps it and observes each request on it."""
        return self.routes.setdefault((method, template), RouteMetrics())

    def sample(self, name: str, sampler: Sampler) -> None:
        """Write ``sampler()``'s values of gauge ``name`` (a catalog gauge merged by ``sum`` or
        ``max``) with every snapshot. Raises ValueError for any other name."""
        spec = BY_NAME.get(name)
        if spec is None or spec.kind != "gauge" or spec.merge not in ("sum", "max"):
            raise ValueError(f"{name} is not a gauge merged over the workers (server/metric_catalog.py)")
        self.samplers[name] = sampler

    def flush(self) -> None:
        """Write this worker's snapshot atomically (rename over the old one): the counters and
        histograms by label values, and the sampled gauges now."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{os.getpid()}.json"
        tmp = path.with_suffix(".tmp")
        requests: dict[str, float] = {}
        latency: dict[str, list[float]] = {}
        for (method, template), route in self.routes.items():
            merged = latency.setdefault(_SEP.join((method, template)), histogram())
            for status, hist in route.by_status.items():
                requests[_SEP.join((method, template, str(status)))] = sum(hist[:-1])
                merged[:] = [a + b for a, b in zip(merged, hist, strict=True)]
        counters = {name: {"": float(value)} for name, value in self.events.items()}
        counters[HTTP_REQUESTS.name] = requests
        histograms = {name: {"": hist} for name, hist in self.histograms.items()}
        histograms[HTTP_LATENCY.name] = latency
        gauges = {name: {_SEP.join(k): v for k, v in sampler().items()} for name, sampler in self.samplers.items()}
        snapshot = {"counters": counters, "histograms": histograms, "gauges": gauges}
        tmp.write_bytes(orjson.dumps(snapshot))
        tmp.replace(path)

    def merged(self, scraped: Mapping[str, dict[Labels, float]]) -> Merged:
        """Every worker's snapshot (this one's written now) merged, with the ``scraped`` gauges."""
        self.flush()
        merged = _merge(self.directory)
        merged.values.update(scraped)
        return merged

    def render(self, scraped: Mapping[str, dict[Labels, float]]) -> bytes:
        """The merged metrics (see ``merged``) in the Prometheus text format."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self.merged(scraped)))
        return generate_latest(registry)

    def summary(self, scraped: Mapping[str, dict[Labels, float]]) -> dict[str, Any]:
        """The merged metrics as JSON: ``time_ms``, ``bucket_bounds_s`` and ``metrics``, mapping
        each exported name of the catalog to its series ``{"labels", "value"}`` (a histogram's:
        ``{"labels", "buckets", "count", "sum"}``, with its counts per bucket, +Inf last, not cumulative)."""
        merged = self.merged(scraped)
        metrics: dict[str, list[dict[str, Any]]] = {}
        for spec in CATALOG:
            if spec.kind == "histogram":
                metrics[spec.exported] = [
                    {
                        "labels": dict(zip(spec.labels, k, strict=True)),
                        "buckets": h[:-1],
                        "count": sum(h[:-1]),
                        "sum": h[-1],
                    }
                    for k, h in sorted(merged.histograms.get(spec.name, {}).items())
                ]
            else:
                metrics[spec.exported] = [
                    {"labels": dict(zip(spec.labels, k, strict=True)), "value": v}
                    for k, v in sorted(merged.values.get(spec.name, {}).items())
                ]
        return {"time_ms": int(time.time() * 1000), "bucket_bounds_s": list(BUCKETS_S), "metrics": metrics}


@dataclass
class Merged:
    """The node's metrics: ``values`` of counters and gauges, and ``histograms``, by catalog name
    and label values."""

    values: dict[str, dict[Labels, float]] = field(default_factory=dict)
    histograms: dict[str, dict[Labels, list[float]]] = field(default_factory=dict)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a snapshot's worker: its gauges count only while it lives)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user holds the pid
        return True
    return True


def _key(name: str, joined: str) -> Labels:
    """The label values of a series of metric ``name`` from its snapshot key (none for a name
    without labels, or one the catalog does not list)."""
    spec = BY_NAME.get(name)
    return tuple(joined.split(_SEP)) if spec is not None and spec.labels else ()


def _merge(directory: Path) -> Merged:
    """Sum every snapshot's counters and histograms; merge the gauges of live workers."""
    merged = Merged()
    for path in directory.glob("*.json"):
        try:
            snap = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        for name, series in snap["counters"].items():
            values = merged.values.setdefault(name, {})
            for joined, value in series.items():
                key = _key(name, joined)
                values[key] = values.get(key, 0.0) + value
        for name, series in snap["histograms"].items():
            hists = merged.histograms.setdefault(name, {})
            for joined, hist in series.items():
                key = _key(name, joined)
                old = hists.get(key)
                hists[key] = hist if old is None else [a + b for a, b in zip(old, hist, strict=True)]
        if not path.stem.isdigit() or not _alive(int(path.stem)):
            continue
        for name, series in snap["gauges"].items():
            pick = max if BY_NAME[name].merge == "max" else sum
            values = merged.values.setdefault(name, {})
            for joined, value in series.items():
                key = _key(name, joined)
                values[key] = value if key not in values else pick((values[key], value))
    return merged


class _Collector:
    """Every family of the catalog, in its order, over one Merged (a family with no series yet
    is still exported, with its HELP and TYPE)."""

    def __init__(self, merged: Merged) -> None:
        self.merged = merged

    def collect(self) -> Iterator[Metric]:
        for spec in CATALOG:
            labels = list(spec.labels)
            if spec.kind == "histogram":
                hist_family = HistogramMetricFamily(spec.family, spec.help, labels=labels)
                for key, hist in sorted(self.merged.histograms.get(spec.name, {}).items()):
                    cumulative, buckets = 0.0, []
                    for bound, count in zip((*map(str, BUCKETS_S), "+Inf"), hist[:-1], strict=True):
                        cumulative += count
                        buckets.append((bound, cumulative))
                    hist_family.add_metric(list(key), buckets, hist[-1])
                yield hist_family
                continue
            family = (CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily)(
                spec.family, spec.help, labels=labels
            )
            for key, value in sorted(self.merged.values.get(spec.name, {}).items()):
                family.add_metric(list(key), value)
            yield family
