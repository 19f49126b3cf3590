"""The CPU a storm costs the processes behind its target: the server's, MariaDB's, Redis's.

``CpuMeter`` reads ``/proc/<pid>/stat`` utime + stime (every thread) of each role's processes when
the load starts and once the credits have drained (``StormOptions.meter``); before the second
reading it waits until they are all quiet (below a tenth of a core over half a second, at most
``QUIET_MAX_S``), so work the load left behind (queued credits and list rows, the baseline's
background receipt writes) is counted with it. The idle cost of that wait is counted too: small
next to a storm, and the same for every system. Per-operation attribution is ``per_request``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from hongbao.bench.services.process import cpu_seconds, wait_quiet

QUIET_MAX_S = 10.0
OPS = ("send", "pay", "grab", "open")


class CpuMeter:
    """CPU seconds used between ``start()`` and ``stop()`` by each role (name -> a function
    giving its pids now, e.g. ``Process.pids``); ``used_s`` holds the result, ``quiet`` whether
    the processes went quiet before the last reading."""

    def __init__(self, roles: Mapping[str, Callable[[], Iterable[int]]]) -> None:
        self.roles = dict(roles)
        self._started: dict[str, float] = {}
        self.used_s: dict[str, float] = {}
        self.quiet = False

    def _read(self) -> dict[str, float]:
        return {role: cpu_seconds(pids()) for role, pids in self.roles.items()}

    def _all_pids(self) -> list[int]:
        return [pid for pids in self.roles.values() for pid in pids()]

    def start(self) -> None:
        """The first reading (just before the load)."""
        self._started = self._read()

    def stop(self) -> None:
        """Wait for quiet (bounded), then the last reading: ``used_s`` per role."""
        self.quiet = wait_quiet(self._all_pids, QUIET_MAX_S)
        ended = self._read()
        self.used_s = {role: round(ended[role] - self._started.get(role, ended[role]), 3) for role in ended}


def per_request(used_s: Mapping[str, float], operations: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """CPU per request from a meter's ``used_s`` and the storm report's ``operations``.

    The server's CPU cannot be split by operation from outside (one worker serves every kind in
    one loop), so it is attributed as a whole: ``server_ms_per_request`` is the server's CPU over
    every attempt of the load's operations (send, pay, grab, open; 429s and errors included:
    they cost CPU too), with the ``requests`` of each operation beside it; ``ms_per_open`` gives
    each role's CPU over the opens answered 2xx, the headline: what the whole storm cost per open
    (its sends, pays, grabs, credits and pushes included). Milliseconds; None when nothing was
    counted."""
    requests = {op: int(operations[op]["attempts"]) for op in OPS if op in operations}
    total = sum(requests.values())
    opens = int(operations.get("open", {}).get("ok", 0))
    server = used_s.get("server", 0.0)
    return {
        "seconds": dict(used_s),
        "requests": requests,
        "opens": opens,
        "server_ms_per_request": round(server * 1000.0 / total, 3) if total else None,
        "ms_per_open": {role: round(s * 1000.0 / opens, 3) if opens else None for role, s in used_s.items()},
    }
