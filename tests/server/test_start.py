"""How a node starts and keeps serving: dependencies that are down at start (it serves degraded
and says so once), `serving http://...` only once a worker listens, `--port 0`, workers that keep
dying (restarted with backoff, never given up on once the node has served)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from hongbao.server.auth import embedded_secret, mint
from hongbao.server.master import CRASH_WINDOW_S, RESTART_BASE_S

from tests.server.conftest import Server, children, start_server, stop_server

SERVING = re.compile(r"serving http://127\.0\.0\.1:(\d+) with (\d+) worker")


def _serve(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp_path / "serve.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "hongbao.server.cli", "serve", "--data-dir", str(tmp_path), *args],
        stdout=subprocess.DEVNULL,
        stderr=open(log, "wb"),
        env={k: v for k, v in os.environ.items() if not k.startswith("HONGBAO_")},
    )
    return process, log


def _serving_port(process: subprocess.Popen[bytes], log: Path, timeout_s: float = 30.0) -> int:
    """The port of the master's `serving http://...` line, once it is logged."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = SERVING.search(log.read_text(errors="replace"))
        if found:
            return int(found.group(1))
        assert process.poll() is None, log.read_text()
        time.sleep(0.05)
    raise AssertionError(f"no serving line within {timeout_s} s:\n{log.read_text()}")


def _stop(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=30)


def test_unreachable_databases_at_start_serve_degraded_and_say_so_once(tmp_path: Path) -> None:
    """`serve --backend production` with MySQL and Redis both unreachable: one warning line each,
    the node serves (healthz 200; readyz and money routes 503 degraded with Retry-After, within a
    second), and stops cleanly on SIGTERM, without a traceback."""
    process, log = _serve(
        tmp_path,
        "--backend",
        "production",
        "--mysql-dsn",
        "mysql://hb:pw@127.0.0.1:1",
        "--redis-url",
        "redis://127.0.0.1:2",
        "--port",
        "0",
        "--workers",
        "1",
    )
    try:
        url = f"http://127.0.0.1:{_serving_port(process, log)}"
        assert httpx.get(f"{url}/healthz").status_code == 200
        ready = httpx.get(f"{url}/readyz")
        assert ready.status_code == 503 and ready.headers["retry-after"] == "1", ready.text
        assert ready.json()["error"]["code"] == "degraded" and "db_00" in ready.json()["error"]["message"]
        token = mint(embedded_secret(tmp_path), "alice")
        started = time.monotonic()
        money = httpx.get(f"{url}/v1/balance", headers={"authorization": f"Bearer {token}"}, timeout=5)
        assert money.status_code == 503 and money.json()["error"]["code"] == "degraded"
        assert time.monotonic() - started < 1.5
    finally:
        status = _stop(process)
    text = log.read_text()
    assert status == 0 and "Traceback" not in text, text
    assert len(re.findall(r"MySQL at 127\.0\.0\.1:1 is unreachable", text)) == 1, text
    assert len(re.findall(r"Redis at redis://127\.0\.0\.1:2 is unreachable", text)) == 1, text


def test_port_0_is_one_free_port_for_every_worker(tmp_path: Path) -> None:
    """`--port 0` with 2 workers: the serving line names one free port, and both workers listen on it."""
    process, log = _serve(tmp_path, "--port", "0", "--workers", "2")
    try:
        port = _serving_port(process, log)
        deadline = time.monotonic() + 20
        while len(listening := re.findall(r"pid=(\d+) worker listening on 127\.0\.0\.1:(\d+)", log.read_text())) < 2:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        assert port != 0 and len({pid for pid, _ in listening}) == 2 and {int(p) for _, p in listening} == {port}
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
    finally:
        assert _stop(process) == 0


def test_serving_is_logged_once_a_worker_listens(tmp_path: Path) -> None:
    """The master's serving line comes after a worker's `listening` line, and the port answers then."""
    process, log = _serve(tmp_path, "--port", "0", "--workers", "1")
    try:
        port = _serving_port(process, log)
        text = log.read_text()
        assert text.index("worker listening") < text.index("serving http://"), text
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
    finally:
        assert _stop(process) == 0


def test_a_worker_that_keeps_dying_is_restarted_with_backoff_and_never_given_up(tmp_path: Path) -> None:
    """One of two workers SIGKILLed ten times right after each start: the master restarts it every
    time with growing delays, never gives up, and the node answers throughout."""
    server = start_server(tmp_path / "srv", workers=2)
    try:
        for _ in range(10):
            _kill_the_oldest_worker(server, within_s=40)
        delays = [float(d) for d in re.findall(r"restarting in ([0-9.]+) s", server.log())]
        assert len(delays) == 10 and "giving up" not in server.log(), server.log()
        # 0.1 s doubling per worker place, equal jitter: the first death waits at most 0.1 s, and
        # one of the two places died at least 5 times (ceiling 1.6 s, so at least 0.8 s)
        assert max(delays) >= 0.8 and min(delays[:2]) <= 0.1, delays
    finally:
        assert stop_server(server) == 0


def test_a_worker_killed_after_it_started_fine_is_back_at_once_however_often(tmp_path: Path) -> None:
    """Workers SIGKILLed six times, each after it ran longer than the crash window: every restart
    waits the base delay at most (a kill is not a crash loop: the node stays at full strength), and
    the node answers throughout."""
    server = start_server(tmp_path / "srv", workers=2)
    try:
        for _ in range(6):
            time.sleep(CRASH_WINDOW_S + 0.3)
            _kill_the_oldest_worker(server, within_s=10)
        delays = [float(d) for d in re.findall(r"restarting in ([0-9.]+) s", server.log())]
        assert len(delays) == 6 and max(delays) <= RESTART_BASE_S, delays
    finally:
        assert stop_server(server) == 0


def _kill_the_oldest_worker(server: Server, within_s: float) -> None:
    """SIGKILL the oldest of the server's two workers and wait, at most ``within_s`` seconds, until
    it is reaped and replaced; the node answers /healthz all the while."""
    victim = min(children(server.process.pid))
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + within_s
    while victim in (alive := children(server.process.pid)) or len(alive) < 2:
        assert time.monotonic() < deadline, server.log()
        assert _answers(f"{server.url}/healthz")
        time.sleep(0.02)


def _answers(url: str) -> bool:
    """GET ``url`` answers 200 within 5 tries 50 ms apart (a connection queued on a worker as it is killed is
    reset by the kernel; a client tries again)."""
    for _ in range(5):
        try:
            return httpx.get(url, timeout=5).status_code == 200
        except httpx.TransportError:
            time.sleep(0.05)  # the dying worker's socket closes within milliseconds
    return False


def test_a_killed_masters_shared_memory_is_removed_by_the_next_start(tmp_path: Path) -> None:
    """A master SIGKILLed leaves its admission table and rate limiters in /dev/shm (its
    workers die with it); the next `serve` removes them and says so, and a live master's stay."""
    for name in ("live", "killed", "again"):
        (tmp_path / name).mkdir()
    live, live_log = _serve(tmp_path / "live", "--port", "0")
    killed, killed_log = _serve(tmp_path / "killed", "--port", "0")
    try:
        _serving_port(live, live_log)
        port = _serving_port(killed, killed_log)
        mine = sorted(p.name for p in Path("/dev/shm").glob(f"hongbao-*-{port}-{killed.pid}"))
        assert len(mine) == 3, mine  # admission, WebSocket and send rates
        theirs = sorted(p.name for p in Path("/dev/shm").glob(f"hongbao-*-{live.pid}"))
        workers = children(killed.pid)
        killed.kill()
        killed.wait(timeout=10)
        deadline = time.monotonic() + 20
        while any(Path(f"/proc/{pid}").exists() for pid in workers):
            assert time.monotonic() < deadline, "the killed master's workers still run"
            time.sleep(0.05)
        assert all((Path("/dev/shm") / name).exists() for name in mine)
        again, again_log = _serve(tmp_path / "again", "--port", "0")
        try:
            _serving_port(again, again_log)
            assert not any((Path("/dev/shm") / name).exists() for name in mine)
            assert all((Path("/dev/shm") / name).exists() for name in theirs) and len(theirs) == 3
            assert "removed the shared memory of masters that died" in again_log.read_text()
        finally:
            assert _stop(again) == 0
    finally:
        if killed.poll() is None:
            killed.kill()
        assert _stop(live) == 0
