"""The master process (DESIGN.md section 8): create the host-wide admission table and the
WebSocket admission rate limiter (``ws_rate_per_s``, ``ws_burst``; DESIGN.md section 7), fork N
workers that share the port with SO_REUSEPORT, restart a worker that dies (reclaiming its
admission slots first), and on SIGTERM/SIGINT stop the workers gracefully, then exit.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import resource
import shutil
import signal
import socket
import time

import hongbao_native
from hongbao.core.adapters.sqlite_db import SqliteDb
from hongbao.core.adapters.sqlite_push_db import open_push_db
from hongbao.core.embedded import DB_FILE, create_admission
from hongbao.server.auth import embedded_secret
from hongbao.server.config import Settings
from hongbao.server.worker import FINISH_CREDITS_S, GRACE_S, METRICS_DIR, CannotStart, run_worker

log = logging.getLogger("hongbao.master")
CRASH_WINDOW_S = 2.0
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
MAX_QUICK_CRASHES = 5
#: Descriptors a worker needs besides its connections: databases, Redis, logs, listeners (a margin).
FD_RESERVE = 256


def _check_port(host: str, port: int) -> None:
    """Fail early (OSError) when the address is taken: by a process that does not share it, or by
    one that does (another server with SO_REUSEPORT would silently split the connections)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as client:
        client.settimeout(0.5)
        if client.connect_ex((host, port)) == 0:
            raise OSError(errno.EADDRINUSE, f"{host}:{port} is already served by another process")
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        probe.bind((host, port))


def _die_with_parent(parent: int) -> None:
    """Ask Linux to send this process SIGTERM when the master dies (prctl PR_SET_PDEATHSIG,
    prctl(2)), so a SIGKILLed master never leaves workers serving its port; exit now if it
    already died."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    if os.getppid() != parent:
        os._exit(0)


def _raise_open_files(settings: Settings) -> None:
    """Raise the soft limit on open files (RLIMIT_NOFILE, getrlimit(2)) to the hard one, for the
    master and the workers it forks: every connection holds a descriptor, and the usual soft
    default (1024) is far below ``max_connections``, so accept() would fail (EMFILE) and drop
    connections instead of answering 503 at the cap. Warns when the limit stays below
    ``max_connections`` + FD_RESERVE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if soft != resource.RLIM_INFINITY and soft < settings.max_connections + FD_RESERVE:
        log.warning(
            "open files limited to %d (RLIMIT_NOFILE), below max_connections %d + %d: raise the hard "
            "limit (ulimit -Hn, LimitNOFILE=) or lower max_connections",
            soft,
            settings.max_connections,
            FD_RESERVE,
        )


def _prepare(settings: Settings) -> None:
    """Before any fork: data directory, key file, schemas (money and push files), a fresh metrics directory."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if not settings.jwt_secret and not settings.jwt_public_key_file:
        embedded_secret(settings.data_dir)
    SqliteDb(settings.data_dir / DB_FILE).close()
    open_push_db(settings.data_dir).close()
    shutil.rmtree(settings.data_dir / METRICS_DIR, ignore_errors=True)


def serve(settings: Settings) -> int:
    """Run the master until SIGTERM/SIGINT; returns the process exit status."""
    _check_port(settings.host, settings.port)
    _raise_open_files(settings)
    _prepare(settings)
    admission = create_admission(f"hongbao-{settings.port}-{os.getpid()}")
    ws_limiter = hongbao_native.RateLimiter.create(
        f"ws-{settings.port}-{os.getpid()}", settings.ws_rate_per_s, settings.ws_burst
    )
    workers: dict[int, float] = {}
    master = os.getpid()
    stopping = False
    quick_crashes = 0

    def spawn() -> None:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                _die_with_parent(master)
                run_worker(settings, admission.name, ws_limiter.name)
            except CannotStart as exc:
                log.error("worker %d: %s", os.getpid(), exc)
                code = 3
            except BaseException:
                log.exception("worker failed")
                code = 1
            finally:
                os._exit(code)
        workers[pid] = time.monotonic()

    def stop(sig: int, _frame: object) -> None:
        nonlocal stopping
        if not stopping:
            log.info("master %d: signal %d, stopping %d worker(s) gracefully", os.getpid(), sig, len(workers))
        stopping = True
        for pid in workers:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for _ in range(settings.worker_count()):
        spawn()
    log.info(
        "master %d serving http://%s:%d with %d worker(s)",
        os.getpid(),
        settings.host,
        settings.port,
        settings.worker_count(),
    )
    deadline = None
    try:
        while workers:
            if stopping and deadline is None:
                deadline = time.monotonic() + GRACE_S + FINISH_CREDITS_S + 1  # a worker past it is killed
            try:  # never a blocking wait: a signal must not leave the master stuck behind a hung worker
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            if pid == 0:
                if deadline is not None and time.monotonic() > deadline:
                    for straggler in workers:
                        log.warning(
                            "worker %d still running %.0f s after the stop: killed",
                            straggler,
                            GRACE_S + FINISH_CREDITS_S + 1,
                        )
                        os.kill(straggler, signal.SIGKILL)
                    deadline = time.monotonic() + 1  # once a second at most
                time.sleep(0.05)
                continue
            started = workers.pop(pid, time.monotonic())
            reclaimed = admission.reclaim(pid)
            if stopping:
                continue
            log.error(
                "worker %d exited (status %d); %d admission slot(s) reclaimed; restarting",
                pid,
                os.waitstatus_to_exitcode(status),
                reclaimed,
            )
            quick_crashes = quick_crashes + 1 if time.monotonic() - started < CRASH_WINDOW_S else 0
            if quick_crashes >= MAX_QUICK_CRASHES:
                log.error("workers keep dying at start; giving up")
                stop(signal.SIGTERM, None)
                continue
            spawn()
    finally:
        admission.unlink()
        ws_limiter.unlink()
        log.info("master %d stopped", os.getpid())
    return 1 if quick_crashes >= MAX_QUICK_CRASHES else 0
