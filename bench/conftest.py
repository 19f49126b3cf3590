"""Benchmark harness: refuse debug builds, pin the process to one CPU.

Every benchmark sets `benchmark.group` (the comparison it belongs to) and
`benchmark.extra_info["impl"]` ("native", "reference", or the library raced against) and
`benchmark.extra_info["correct"]` (whether its result was checked right); `hongbao.bench.gate`
turns a saved run into same-run ratios and checks them against their floors."""

import os

import hongbao_native
import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Measured runs (not --benchmark-disable) need the release build and one pinned CPU."""
    if config.getoption("benchmark_disable", default=False):
        return
    if hongbao_native.build_profile != "release":
        raise pytest.UsageError(
            f"refusing to benchmark a {hongbao_native.build_profile} build of hongbao_native; run `make install`"
        )
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[-1]})
