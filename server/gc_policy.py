"""The worker's garbage-collection policy: few young collections, and rare full ones.

CPython collects cyclic garbage by generation (the ``gc`` module's documentation; thresholds
700, 10, 10): a collection of the youngest generation after 700 more container allocations than
deallocations, of the middle one after 10 of those, of the oldest (a full collection) after 10
of the middle one's, if the oldest has grown by a quarter since the last full one. A full
collection walks every long-lived tracked object with the event loop stopped. In a worker at the
storm (caches, push sessions: about 100k objects) one took 100-330 ms, and with the defaults one
ran every 3.5 s at 55 sends/s: whatever a request still holds after two younger collections (a
third of a second) reaches the oldest generation, so it grows by a quarter within seconds. Each
pause delays every request in flight, so the storm's p99 carried them. A full collection now
waits for FULL_AFTER collections of the middle generation (tens of minutes at the storm, longer
when quieter: it follows allocation, as the garbage does).

The young generation is collected after YOUNG_AFTER (not 700) more allocations than
deallocations. A young collection walks every object of its generation, at about 1 us each here
(a cache miss per object, ``perf annotate``: most of ``gc_collect_main`` is ``update_refs``), and
what requests in flight hold is most of that generation, to be freed by reference counting soon
after: at 700 a worker ran 35 young collections a second at 100 sends/s with its users offline,
0.7 ms each, and spent 9 % of its CPU collecting (4.9 s of 56 s, ``gc.callbacks`` timed in thread
CPU time) to free under a thousand objects. At 10 000 it ran 40-110 in the whole storm (8 ms each,
at most 18 ms; the middle generation's at most 52 ms) and spent 0.8-1.5 % (0.5 s of 63 s, 1.0 s of
68 s).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

#: Allocations of containers, net of deallocations, before a young collection (CPython's default: 700).
YOUNG_AFTER = 10_000
#: Collections of generation 1 before a full one (CPython's default: 10): 10 M net allocations.
FULL_AFTER = 100


def settle() -> Callable[[], dict[tuple[str, ...], float]]:
    """Freeze what start-up built (it lives as long as the worker: collections skip it from now
    on) and set the thresholds to (YOUNG_AFTER, CPython's 10, FULL_AFTER). Call once, when the worker is
    about to serve. Returns a sampler of the collections each generation ran since: ``{("0",): n,
    ("1",): n, ("2",): n}`` (the ``gc_collections`` gauge's series)."""
    gc.freeze()
    _, middle, _ = gc.get_threshold()
    gc.set_threshold(YOUNG_AFTER, middle, FULL_AFTER)
    before = [stats["collections"] for stats in gc.get_stats()]

    def collections() -> dict[tuple[str, ...], float]:
        return {
            (str(generation),): float(stats["collections"] - before[generation])
            for generation, stats in enumerate(gc.get_stats())
        }

    return collections
