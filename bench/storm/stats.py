"""Percentiles for the storm's report (nearest rank, as latency reports usually state them)."""

from __future__ import annotations

import math


def percentile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile of ascending ``sorted_values`` (0.0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]
