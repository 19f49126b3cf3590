"""The processes the push benchmark measures or needs: hongbao (``hongbao serve``, embedded, one
worker, configured through a ``hongbao.toml`` in its data directory), the ``websockets`` baseline
(``baseline_server.py``), the ceiling (``ceiling_server.py``), a throwaway ``redis-server``; and the memory
and write system calls of a process tree.

Processes started here inherit the benchmark's raised RLIMIT_NOFILE (``fleet.raise_nofile``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import redis
from hongbao.bench.services import process
from hongbao.bench.services.process import BenchError, Process, clean_env, free_port, start_hongbao
from hongbao.server.auth import embedded_secret

BASELINE = Path(__file__).with_name("baseline_server.py")
CEILING = Path(__file__).with_name("ceiling_server.py")
REDIS_READY_S = 20.0
QUIET_SPAN_S, QUIET_SHARE, QUIET_TIMEOUT_S = 0.5, 0.1, 120.0


def hongbao(data_dir: Path, max_connections: int, redis_url: str = "") -> tuple[Process, str]:
    """Start hongbao with one worker (embedded money; push state in Redis at ``redis_url`` if
    given) admitting up to ``max_connections``; the new-connection rate is lifted so that the
    benchmark's connects are never refused (admission is not measured). (process, token key)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"max_connections = {max_connections}", "ws_rate_per_s = 1000000.0", f"ws_burst = {max_connections}"]
    if redis_url:
        lines.append(f'redis_url = "{redis_url}"')
    (data_dir / "hongbao.toml").write_text("\n".join(lines) + "\n")
    return start_hongbao(data_dir, 1), embedded_secret(data_dir)


def plain(workdir: Path, name: str, script: Path) -> Process:
    """Start ``script`` (``BASELINE``: the websockets server, or ``CEILING``) as server ``name``
    on a free port; wait until it answers."""
    port = free_port()
    log = workdir / f"{name}.log"
    with open(log, "wb") as stderr:
        popen = subprocess.Popen(
            [sys.executable, str(script), "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=workdir,
            env=clean_env(),
        )
    proc = Process(name, f"http://127.0.0.1:{port}", popen, log)
    proc.wait_ready("/healthz")
    return proc


def redis_server(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start a throwaway redis-server (no persistence) on a free loopback port; (process, URL).
    BenchError when redis-server is not installed or does not answer."""
    program = shutil.which("redis-server")
    if program is None:
        raise BenchError("redis-server is not installed (apt-get install redis-server); or run with --skip-redis")
    port = free_port()
    directory = workdir / "redis"
    directory.mkdir(parents=True, exist_ok=True)
    popen = subprocess.Popen(
        [
            program,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(directory),
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            str(directory / "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + REDIS_READY_S
    while time.monotonic() < deadline and popen.poll() is None:
        try:
            with redis.Redis(port=port, socket_timeout=1) as client:
                if client.ping():
                    return popen, f"redis://127.0.0.1:{port}"
        except redis.ConnectionError:
            time.sleep(0.05)
    popen.kill()
    raise BenchError(f"redis-server did not start:\n{(directory / 'redis.log').read_text(errors='replace')}")


def wait_quiet(proc: Process, timeout_s: float = QUIET_TIMEOUT_S) -> bool:
    """Wait until the server uses less than ``QUIET_SHARE`` of a core over ``QUIET_SPAN_S`` (its
    work from the last step is done: closes, logouts); False if it is still busy after ``timeout_s``."""
    return process.wait_quiet(proc.pids, timeout_s, QUIET_SHARE, QUIET_SPAN_S)


def write_calls(proc: Process) -> int:
    """Write system calls (``syscw`` of /proc/PID/io: write, writev and the like, which uvloop's
    sends are) the process and its workers made so far."""
    total = 0
    for pid in {proc.popen.pid, *proc.children()}:
        try:
            lines = Path(f"/proc/{pid}/io").read_text().splitlines()
        except OSError:
            continue
        total += sum(int(line.split()[1]) for line in lines if line.startswith("syscw:"))
    return total


def rss_bytes(proc: Process) -> int:
    """Resident memory (VmRSS) of the process and its workers, in bytes."""
    total = 0
    for pid in {proc.popen.pid, *proc.children()}:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total
