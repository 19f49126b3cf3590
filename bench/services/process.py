"""Processes of the benchmarks, the chaos run and the tests: free ports, a server subprocess with
its readiness probe and CPU time, a graceful stop, and ``hongbao serve`` started on a free port."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import httpx


class ServiceError(RuntimeError):
    """A service (MariaDB, Redis) could not be installed or started; the message holds its log."""


class BenchError(RuntimeError):
    """The benchmark could not run (a server did not start, wrk failed)."""


PR_SET_PDEATHSIG = 1  # prctl(2)


def tied_to_parent() -> None:
    """A child's ``preexec_fn``: a process group of its own (a terminal's Ctrl-C reaches only the
    parent, which stops its children in order) and SIGTERM when the parent dies (prctl
    PR_SET_PDEATHSIG), so a parent SIGKILLed leaves nothing running. Start such children from
    the thread that lives as long as they should: Linux ties the signal to that thread."""
    os.setpgid(0, 0)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def terminate(popen: subprocess.Popen[bytes], timeout_s: float = 30.0) -> int:
    """SIGTERM ``popen``, wait up to ``timeout_s`` seconds for a graceful exit (SIGKILL after
    that), and return its exit status."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
    return int(popen.returncode)


@dataclass
class Process:
    """A server subprocess listening on ``url``; its stderr goes to ``log``."""

    name: str
    url: str
    popen: subprocess.Popen[bytes]
    log: Path

    def wait_ready(self, path: str, timeout_s: float = 30.0) -> None:
        """Poll ``path`` until it answers 200; BenchError (with the log) if the process dies or
        ``timeout_s`` seconds pass."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise BenchError(
                    f"{self.name} exited with {self.popen.returncode}:\n{self.log.read_text(errors='replace')}"
                )
            try:
                if httpx.get(self.url + path, timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.05)
        self.stop()
        raise BenchError(f"{self.name} did not become ready:\n{self.log.read_text(errors='replace')}")

    def children(self) -> list[int]:
        """The pids of the worker processes (the direct children), or the process itself."""
        try:
            text = Path(f"/proc/{self.popen.pid}/task/{self.popen.pid}/children").read_text()
        except OSError:
            text = ""
        return [int(p) for p in text.split()] or [self.popen.pid]

    def pids(self) -> list[int]:
        """The process and its workers (direct children), process first."""
        return [self.popen.pid, *(pid for pid in self.children() if pid != self.popen.pid)]

    def cpu_seconds(self) -> float:
        """CPU time (user + system, every thread) of the process and its workers so far."""
        return cpu_seconds(self.pids())

    def stop(self) -> int:
        """SIGTERM and wait (see ``terminate``); the exit status."""
        return terminate(self.popen)


def cpu_seconds(pids: Iterable[int]) -> float:
    """CPU seconds (user + system, every thread: ``/proc/<pid>/stat`` utime + stime) the processes
    ``pids`` have used so far; a process that is gone counts 0."""
    ticks = 0
    for pid in set(pids):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


def wait_quiet(pids: Callable[[], Iterable[int]], timeout_s: float, share: float = 0.1, span_s: float = 0.5) -> bool:
    """Wait until the processes ``pids()`` use less than ``share`` of a core together over ``span_s``
    seconds (the work a step left behind is done); False if they are still busy after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = cpu_seconds(pids())
        time.sleep(span_s)
        if cpu_seconds(pids()) - before < share * span_s:
            return True
    return False


def clean_env() -> dict[str, str]:
    """This process's environment without HONGBAO_* variables: a server configured by its TOML alone."""
    return {k: v for k, v in os.environ.items() if not k.startswith("HONGBAO_")}


def start_hongbao(data_dir: Path, workers: int, config: str = "") -> Process:
    """Start ``hongbao serve`` (``workers`` workers, data in ``data_dir``; embedded unless the TOML
    ``config`` says otherwise) on a free port; wait until /healthz answers."""
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = data_dir / "server.log"
    options = []
    if config:
        (data_dir / "hongbao.toml").write_text(config)
        options = ["--config", str(data_dir / "hongbao.toml")]
    with open(log, "wb") as stderr:
        popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hongbao.server.cli",
                *options,
                "serve",
                "--port",
                str(port),
                "--data-dir",
                str(data_dir),
                "--workers",
                str(workers),
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=data_dir,
            env=clean_env(),
        )
    proc = Process("hongbao", f"http://127.0.0.1:{port}", popen, log)
    proc.wait_ready("/healthz")
    return proc
