"""A real hongbao server in a subprocess on a free port, with a readiness probe (as granian's
test suite does), its own data directory, a test clock, and tokens minted with its key."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from hongbao.bench.services.process import terminate
from hongbao.core.adapters.sqlite.audit import audit_sqlite
from hongbao.server.auth import embedded_secret, mint

SERVING = re.compile(r"serving http://127\.0\.0\.1:(\d+) with")
TEST_CONFIG = """
test_clock = true
credit_interval_s = 0.02
refund_interval_s = 0.2
reconcile_interval_s = 0.5
reconcile_window_ms = 2000
"""


@dataclass
class Server:
    """A running server: ``url``, its ``data_dir``, the process, and token helpers."""

    url: str
    data_dir: Path
    process: subprocess.Popen[bytes]
    log_path: Path
    _tokens: dict[str, str] = field(default_factory=dict)

    def token(self, user_id: str, *, admin: bool = False, ttl_s: float = 3600) -> str:
        """A bearer token signed with the server's key."""
        return mint(embedded_secret(self.data_dir), user_id, admin=admin, ttl_s=ttl_s)

    def client(self, user_id: str, *, admin: bool = False) -> httpx.Client:
        """A keep-alive HTTP client acting as ``user_id``."""
        key = f"{user_id}:{admin}"
        token = self._tokens.setdefault(key, self.token(user_id, admin=admin))
        # verify=False: plain HTTP, and loading the CA bundle would cost ~50 ms a client.
        return httpx.Client(base_url=self.url, headers={"authorization": f"Bearer {token}"}, timeout=30, verify=False)

    def async_client(self, user_id: str, *, admin: bool = False) -> httpx.AsyncClient:
        """An asyncio HTTP client acting as ``user_id``."""
        token = self.token(user_id, admin=admin)
        return httpx.AsyncClient(
            base_url=self.url, headers={"authorization": f"Bearer {token}"}, timeout=30, verify=False
        )

    def log(self) -> str:
        """Everything the server wrote to stderr so far."""
        return self.log_path.read_text(errors="replace")


def start_server(
    data_dir: Path, workers: int = 1, extra_config: str = "", name: str = "", port: int | None = None
) -> Server:
    """Start ``hongbao serve`` and wait until /healthz answers (or fail with its log). The keys of
    ``extra_config`` (TOML) replace those of TEST_CONFIG. A ``name`` keeps the config and log files
    of several servers on one data directory apart. ``port``: the port to serve on (default: 0, a
    free port the master picks and logs: no other process can take it between the pick and the
    bind, as one picked here could be by a worker's ephemeral listener)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    suffix = f"-{name}" if name else ""
    config = data_dir / f"hongbao{suffix}.toml"
    replaced = {line.split("=")[0].strip() for line in extra_config.splitlines() if "=" in line}
    defaults = [line for line in TEST_CONFIG.splitlines() if line.split("=")[0].strip() not in replaced]
    config.write_text("\n".join(defaults) + "\n" + extra_config)
    log_path = data_dir / f"server{suffix}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HONGBAO_")}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hongbao.server.cli",
            "--config",
            str(config),
            "serve",
            "--port",
            str(port or 0),
            "--data-dir",
            str(data_dir),
            "--workers",
            str(workers),
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(log_path, "wb"),
        env=env,
    )
    server = Server(f"http://127.0.0.1:{port}", data_dir, process, log_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{server.log()}")
        if not port:
            found = SERVING.search(server.log())
            if found is None:
                time.sleep(0.05)
                continue
            port = int(found.group(1))
            server = Server(f"http://127.0.0.1:{port}", data_dir, process, log_path)
        try:
            if httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"server did not become ready:\n{server.log()}")


def run_cli(cwd: Path, argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``hongbao ARGV`` in ``cwd`` to its end, with only PATH and ``env`` in its environment (no
    HONGBAO_* of the test run's); its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "hongbao.server.cli", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )


def children(pid: int) -> list[int]:
    """The pids of the processes whose parent is ``pid`` (a server's workers, for its master)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == pid:
            found.append(int(stat.parent.name))
    return found


def kill_server(server: Server) -> None:
    """SIGKILL the server's workers and master at once, the master stopped first so that nothing
    restarts or cleans up: a crash. Removes the shared-memory files the master would have unlinked."""
    master = server.process.pid
    os.kill(master, signal.SIGSTOP)
    for worker in children(master):
        os.kill(worker, signal.SIGKILL)
    os.kill(master, signal.SIGKILL)
    server.process.wait()
    for leftover in Path("/dev/shm").glob(f"hongbao-*-{master}"):
        leftover.unlink(missing_ok=True)


def stop_server(server: Server) -> int:
    """SIGTERM, wait for a graceful exit, return the exit status."""
    return terminate(server.process)


def finish_server(server: Server) -> None:
    """Stop ``server``; it must exit 0 without a traceback and leave a database that passes the
    money audit of docs/architecture.md section 11 (credits may still be pending: not drained)."""
    status = stop_server(server)
    log = server.log()
    assert status == 0, log
    assert "Traceback" not in log, log
    report = audit_sqlite(server.data_dir, drained=False)
    assert report.ok, report.lines()


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start servers on demand; each is stopped at the end and must exit 0 without tracebacks,
    leaving a database that passes the money audit."""
    started: list[Server] = []

    def make(workers: int = 1, extra_config: str = "", name: str = "srv", port: int | None = None) -> Server:
        server = start_server(tmp_path / f"{name}{len(started)}", workers, extra_config, port=port)
        started.append(server)
        return server

    yield make
    for server in started:
        finish_server(server)


@pytest.fixture
def server(make_server: Callable[..., Server]) -> Server:
    """One single-worker server."""
    return make_server()
