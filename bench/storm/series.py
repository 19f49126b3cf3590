"""The storm's time series and the load period its rates are computed over.

Times are seconds since the load's start (a sample's ``t``, ``load.py``). The load period runs
from the start to the last answer to a send: sends drive the storm (``duration_s`` of them), and
after the last one only the late openers of the scenario's tail trickle in, so a rate over the
whole span would be diluted by that tail. Without any send (a record of opens only) the period is
the whole span. Latency series are percentiles (nearest rank, ms) of the 2xx answers started in
each bucket of ``bucket_s`` seconds; an empty bucket is None (JSON null, a gap in the picture).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from hongbao.bench.storm.load import Sample
from hongbao.bench.storm.stats import percentile

LOAD_OPS = ("send", "pay", "grab", "open")
MAX_BUCKETS = 40


def span(samples: Iterable[Sample]) -> float:
    """Seconds from the start to the last answer of ``samples`` (0.0 when there is none)."""
    return max((t + latency for _, t, latency, _, _, _ in samples), default=0.0)


def load_period(samples: list[Sample]) -> float:
    """The end of the load period (seconds since the start): the last answer to a send, or
    ``span(samples)`` when no send was made."""
    sends = [s for s in samples if s[0] == "send"]
    return span(sends) if sends else span(samples)


def bucket_seconds(seconds: float) -> int:
    """The width (whole seconds, >= 1) of the buckets of a series ``seconds`` long: at most
    ``MAX_BUCKETS`` buckets."""
    return max(1, math.ceil(seconds / MAX_BUCKETS))


def throughput(samples: list[Sample]) -> dict[str, list[int]]:
    """2xx answers per whole second, by the second each request started: ``{"second": [0..n-1],
    op: [n counts]}`` for the load operations."""
    seconds = int(max((t for _, t, _, _, _, _ in samples), default=0.0)) + 1
    lines: dict[str, list[int]] = {"second": list(range(seconds))}
    for op in LOAD_OPS:
        lines[op] = [0] * seconds
    for op, t, _, status, _, _ in samples:
        if op in lines and 200 <= status < 300 and t >= 0:
            lines[op][int(t)] += 1
    return lines


def latency(samples: list[Sample]) -> dict[str, Any]:
    """p50 and p99 (ms) of each load operation's 2xx answers per bucket: ``{"bucket_s": b,
    "start_s": [bucket starts], op: {"p50_ms": [...], "p99_ms": [...]}}``, a None where a bucket
    had no answer; operations without any 2xx answer are left out."""
    width = bucket_seconds(span(samples))
    count = int(max((t for _, t, _, _, _, _ in samples), default=0.0) // width) + 1
    values: dict[str, list[list[float]]] = defaultdict(lambda: [[] for _ in range(count)])
    for op, t, took, status, _, _ in samples:
        if op in LOAD_OPS and 200 <= status < 300 and t >= 0:
            values[op][int(t // width)].append(took * 1000.0)
    out: dict[str, Any] = {"bucket_s": width, "start_s": [i * width for i in range(count)]}
    for op in LOAD_OPS:
        if op in values:
            out[op] = percentiles(values[op])
    return out


def percentiles(buckets: list[list[float]]) -> dict[str, list[float | None]]:
    """``{"p50_ms": [...], "p99_ms": [...]}`` of each bucket of values (ms, rounded to 0.01; None
    for an empty bucket)."""
    out: dict[str, list[float | None]] = {"p50_ms": [], "p99_ms": []}
    for values in buckets:
        values.sort()
        for name, q in (("p50_ms", 50.0), ("p99_ms", 99.0)):
            out[name].append(round(percentile(values, q), 2) if values else None)
    return out
