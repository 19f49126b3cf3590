"""The faults of a chaos run and when they happen: a worker SIGKILLed every few seconds, Redis
frozen (SIGSTOP for a few seconds), Redis restarted empty, Redis restarted from an older dump
(saved, then killed some seconds later), MariaDB restarted; each recorded with its start and end
(seconds since the load began) and the time the node took to be ready again after it.

The crash points inside pays and open batches (``test_faults``, hongbao.core.faults) are armed in
the server's configuration, not here: they fire on their own as requests pass them.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from hongbao.bench.services import redis_servers
from hongbao.bench.services.mariadb import MariaDb
from hongbao.bench.services.process import Process

READY_POLL_S = 0.1
#: The faults a run injects once each, besides the worker kills (``Chaos.faults``).
FAULTS = ("redis_freeze", "redis_restart_empty", "redis_restart_from_dump", "mariadb_restart")
RECOVER_TIMEOUT_S = 60.0


@dataclass
class Injected:
    """One fault: ``name``, its ``start`` and ``end`` (s since the load began), and ``recovered``:
    seconds after ``end`` until /readyz said ready (None: not within RECOVER_TIMEOUT_S)."""

    name: str
    start: float
    end: float
    recovered: float | None = None

    def as_json(self) -> dict[str, Any]:
        """The fault as plain JSON values (seconds rounded to ms)."""
        recovered = None if self.recovered is None else round(self.recovered, 3)
        return {
            "name": self.name,
            "start_s": round(self.start, 3),
            "end_s": round(self.end, 3),
            "recovered_s": recovered,
        }


@dataclass
class RedisProcess:
    """The run's redis-server: its directory (dump.rdb), port and process."""

    directory: Path
    port: int
    process: Any = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>``."""
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start it on its dump, if there is one."""
        self.process = redis_servers.start_on(self.directory, self.port)

    def kill(self, *, keep_dump: bool) -> None:
        """SIGKILL it (a crash); without ``keep_dump`` its dump goes too (it comes back empty)."""
        self.process.kill()
        self.process.wait()
        if not keep_dump:
            (self.directory / "dump.rdb").unlink(missing_ok=True)

    def save(self) -> None:
        """SAVE now: the dump a later restart comes back to."""
        redis_servers.RedisTarget(self.url, False, (self.port,), (self.process.pid,)).cli("SAVE")

    def signal(self, sig: int) -> None:
        """Send ``sig`` (SIGSTOP, SIGCONT)."""
        self.process.send_signal(sig)


@dataclass
class Chaos:
    """The fault schedule of one run of ``duration_s`` seconds against ``server`` (its master and
    workers), ``redis`` and ``mariadb``: a worker killed every ``kill_every_s`` (0: none), and each
    of the other faults once at its share of the duration (in ``faults``: ``redis_freeze``,
    ``redis_restart_empty``, ``redis_restart_from_dump``, ``mariadb_restart``)."""

    server: Process
    redis: RedisProcess
    mariadb: MariaDb
    duration_s: float
    kill_every_s: float = 6.0
    freeze_s: float = 3.0
    faults: tuple[str, ...] = FAULTS
    seed: int = 1
    injected: list[Injected] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self, t0: float) -> None:
        """Inject the faults against the load's start ``t0`` (time.monotonic()) until the duration
        has passed or ``stop()``; meant for a thread of its own."""
        rng = random.Random(self.seed)
        at = {
            "redis_freeze": 0.15,
            "redis_restart_empty": 0.32,
            "redis_save": 0.45,
            "redis_restart_from_dump": 0.55,
            "mariadb_restart": 0.75,
        }
        plan = sorted(
            (share * self.duration_s, name)
            for name, share in at.items()
            if name in self.faults or (name == "redis_save" and "redis_restart_from_dump" in self.faults)
        )
        if self.kill_every_s:
            plan += [(t, "worker_kill") for t in _steps(3.0, self.duration_s - 3.0, self.kill_every_s)]
        for when, name in sorted(plan):
            if not self._wait_until(t0 + when):
                return
            self._inject(name, t0, rng)

    def stop(self) -> None:
        """End the schedule (the faults in progress finish)."""
        self._stop.set()

    def _wait_until(self, when: float) -> bool:
        return not self._stop.wait(max(0.0, when - time.monotonic()))

    def _inject(self, name: str, t0: float, rng: random.Random) -> None:
        start = time.monotonic() - t0
        actions: dict[str, Callable[[], None]] = {
            "worker_kill": lambda: self._kill_worker(rng),
            "redis_freeze": self._freeze_redis,
            "redis_restart_empty": lambda: self._restart_redis(keep_dump=False),
            "redis_save": self.redis.save,
            "redis_restart_from_dump": lambda: self._restart_redis(keep_dump=True),
            "mariadb_restart": self._restart_mariadb,
        }
        actions[name]()
        if name == "redis_save":
            return
        fault = Injected(name, start, time.monotonic() - t0)
        fault.recovered = self._ready_after()
        self.injected.append(fault)

    def _kill_worker(self, rng: random.Random) -> None:
        workers = [pid for pid in self.server.children() if pid != self.server.popen.pid]
        if workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(rng.choice(workers), signal.SIGKILL)

    def _freeze_redis(self) -> None:
        self.redis.signal(signal.SIGSTOP)
        try:
            self._stop.wait(self.freeze_s)
        finally:
            self.redis.signal(signal.SIGCONT)

    def _restart_redis(self, *, keep_dump: bool) -> None:
        self.redis.kill(keep_dump=keep_dump)
        time.sleep(0.5)
        self.redis.start()

    def _restart_mariadb(self) -> None:
        self.mariadb.stop()
        self.mariadb.start()

    def _ready_after(self) -> float | None:
        """Seconds until the server's /readyz says ready (200, nothing degraded)."""
        started = time.monotonic()
        while time.monotonic() - started < RECOVER_TIMEOUT_S:
            try:
                answer = httpx.get(f"{self.server.url}/readyz", timeout=2)
                if answer.status_code == 200 and answer.json().get("status") == "ready":
                    return time.monotonic() - started
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(READY_POLL_S)
        return None


def _steps(start: float, stop: float, step: float) -> list[float]:
    """start, start + step, ... below ``stop``."""
    out, t = [], start
    while t < stop:
        out.append(t)
        t += step
    return out
