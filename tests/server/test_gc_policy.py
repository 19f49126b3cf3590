"""The worker's garbage-collection policy (server/gc_policy.py): a worker whose long-lived objects
grow, as its caches and push sessions do at the storm, runs the younger collections as CPython
would but no full collection (each stops the loop for up to a few hundred ms), where CPython's
own thresholds run several. Each case runs in a process of its own: the collector is global."""

from __future__ import annotations

import json
import subprocess
import sys

from hongbao.server.gc_policy import FULL_AFTER

GROW = """
import gc, json, sys
from hongbao.server.gc_policy import settle

sample = settle()
if sys.argv[1] == "default":  # what a worker did before the policy: freeze, CPython's thresholds
    gc.set_threshold(700, 10, 10)
kept = [[] for _ in range(300_000)]  # long-lived containers: 300k more allocated than freed
print(json.dumps({"threshold": gc.get_threshold(), "collections": [sample()[(str(g),)] for g in range(3)]}))
"""


def _grow(mode: str) -> dict[str, list[float]]:
    """The thresholds and each generation's collections (since settling) of a process that kept
    300k new containers, ``mode`` "settled" (the policy) or "default"."""
    done = subprocess.run([sys.executable, "-c", GROW, mode], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_growth_runs_younger_collections_but_no_full_one() -> None:
    """Settled: the younger thresholds are CPython's (700, 10), the oldest FULL_AFTER; 300k kept
    containers run hundreds of young collections and tens of the middle one, and no full one."""
    settled = _grow("settled")
    assert settled["threshold"] == [700, 10, FULL_AFTER]
    young, middle, full = settled["collections"]
    assert young >= 300 and middle >= 30 and full == 0, settled


def test_cpython_thresholds_run_full_collections_on_the_same_growth() -> None:
    """The same growth under CPython's own thresholds (the worker before the policy) runs full
    collections: the case above measures the policy, not a growth too small to need one."""
    default = _grow("default")
    assert default["threshold"] == [700, 10, 10]
    assert default["collections"][2] >= 2, default
