"""The worker's garbage-collection policy (server/gc_policy.py): a worker whose long-lived objects
grow, as its caches and push sessions do at the storm, runs a collection per YOUNG_AFTER
containers kept and no full collection (each stops the loop for up to a few hundred ms), where
CPython's own thresholds run one per 700 and several full ones. Each case runs in a process of its
own: the collector is global."""

from __future__ import annotations

import json
import subprocess
import sys

from hongbao.server.gc_policy import FULL_AFTER, YOUNG_AFTER

KEPT = 300_000  # long-lived containers a case keeps

GROW = """
import gc, json, sys
from hongbao.server.gc_policy import settle

sample = settle()
if sys.argv[1] == "default":  # what a worker did before the policy: freeze, CPython's thresholds
    gc.set_threshold(700, 10, 10)
kept = [[] for _ in range(int(sys.argv[2]))]  # long-lived containers: more allocated than freed
print(json.dumps({"threshold": gc.get_threshold(), "collections": [sample()[(str(g),)] for g in range(3)]}))
"""


def _grow(mode: str) -> dict[str, list[float]]:
    """The thresholds and each generation's collections (since settling) of a process that kept
    KEPT new containers, ``mode`` "settled" (the policy) or "default"."""
    done = subprocess.run(
        [sys.executable, "-c", GROW, mode, str(KEPT)], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(done.stdout)


def test_growth_runs_few_collections_and_no_full_one() -> None:
    """Settled: the thresholds are (YOUNG_AFTER, CPython's 10, FULL_AFTER); KEPT kept containers
    run one collection per YOUNG_AFTER of them (every tenth of the middle generation), no full one."""
    settled = _grow("settled")
    assert settled["threshold"] == [YOUNG_AFTER, 10, FULL_AFTER]
    young, middle, full = settled["collections"]
    assert KEPT // YOUNG_AFTER - 2 <= young + middle <= KEPT // YOUNG_AFTER + 1 and middle >= 2 and full == 0, settled


def test_cpython_thresholds_run_many_and_full_collections_on_the_same_growth() -> None:
    """The same growth under CPython's own thresholds (the worker before the policy) runs a
    collection per 700 kept and full ones: the case above measures the policy, not a growth too
    small to need them."""
    default = _grow("default")
    assert default["threshold"] == [700, 10, 10]
    assert sum(default["collections"]) >= KEPT // 700 - 10 and default["collections"][2] >= 2, default
