"""The master process (docs/architecture.md section 8): create the host-wide admission table and the
WebSocket admission rate limiter (``ws_rate_per_s``, ``ws_burst``; docs/architecture.md section 7), fork N
workers that share the port with SO_REUSEPORT, restart a worker that dies (reclaiming its
admission slots first), and on SIGTERM/SIGINT stop the workers gracefully, then exit. SIGHUP
reopens the log file, the master's and each worker's (``log_file``; logging to stderr, it
changes nothing): it never stops the node.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import logging
import os
import random
import re
import resource
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import hongbao_native
from hongbao.server.composition import create_admission, prepare
from hongbao.server.config import Settings
from hongbao.server.logs import banner, reopen
from hongbao.server.worker import FINISH_CREDITS_S, GRACE_S, METRICS_DIR, run_worker

log = logging.getLogger("hongbao.master")
CRASH_WINDOW_S = 2.0  # a worker dying this soon after its start: backed off, and counted towards giving up
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
MAX_QUICK_CRASHES = 5
RESTART_BASE_S, RESTART_CAP_S = 0.1, 30.0  # a dead worker's restart delay doubles from BASE to CAP...
RESET_AFTER_S = 60.0  # ... counting the quick deaths (within CRASH_WINDOW_S of a start) of this last span only
#: Descriptors a worker needs besides its connections: databases, Redis, logs, listeners (a margin).
FD_RESERVE = 256
SHM_DIR = Path("/dev/shm")
#: A master's segments (the native core names them hongbao-<name>, hongbao-rl-<name>): the
#: admission table hongbao-<port>-<pid> and the WebSocket rate limiter ws-<port>-<pid>.
_SEGMENT = re.compile(r"hongbao-(?:hongbao|rl-ws|rl-send)-\d+-(\d+)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_orphan_segments(shm_dir: Path = SHM_DIR) -> list[str]:
    """Unlink the shared-memory segments (admission table, WebSocket and send rate limiters) that masters
    which died without their graceful stop (SIGKILL, the OOM killer) left in ``shm_dir``: each
    name ends in its master's pid, and a master that no longer runs has no worker left (they get
    SIGTERM when it dies, see ``_die_with_parent``). Returns the file names removed."""
    removed = []
    for path in sorted(shm_dir.glob("hongbao-*")):
        found = _SEGMENT.fullmatch(path.name)
        if found is not None and not _alive(int(found.group(1))):
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


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


@dataclass(slots=True)
class _Slot:
    """One worker place: its process (None while waiting to restart), when it started, the times
    its workers died within CRASH_WINDOW_S of their start in the last RESET_AFTER_S, whether one
    ever died, and when its next start is due (monotonic seconds)."""

    pid: int | None = None
    started: float = 0.0
    deaths: list[float] = field(default_factory=list)
    crashed: bool = False
    due: float = 0.0

    def died(self, now: float) -> int:
        """Record a death at ``now``; the count its restart delay backs off by: 1 for a worker
        that ran CRASH_WINDOW_S or longer (it started fine: a kill, an OOM, a crash while
        serving), else this place's quick deaths in the last RESET_AFTER_S (a crash loop)."""
        self.crashed = True
        if not self.quick(now):
            return 1
        self.deaths = [t for t in self.deaths if now - t < RESET_AFTER_S] + [now]
        return len(self.deaths)

    def quick(self, now: float) -> bool:
        """Whether a death at ``now`` came within CRASH_WINDOW_S of the worker's start."""
        return now - self.started < CRASH_WINDOW_S


def restart_delay(deaths: int, rng: random.Random) -> float:
    """Seconds before restarting a worker whose place counts ``deaths`` (1-based, ``_Slot.died``):
    RESTART_BASE_S doubling up to RESTART_CAP_S, with "equal jitter" (half fixed, half uniform; AWS
    Architecture Blog, "Exponential Backoff And Jitter", 2015), so workers that died together do
    not come back together. A crash loop reaches the cap within seconds; a worker that had started
    fine is back in a fraction of a second however often it is killed (as supervisord's
    ``startsecs`` tells a failed start from a running program that exited)."""
    ceiling = min(RESTART_CAP_S, RESTART_BASE_S * 2.0 ** min(deaths - 1, 30))
    return ceiling / 2 + rng.uniform(0.0, ceiling / 2)


def _reserve_port(settings: Settings) -> tuple[Settings, socket.socket | None]:
    """For ``port = 0``: bind a SO_REUSEPORT socket to a free port and keep it (bound, never
    listening: it takes no connection) so that every worker binds that same port; the settings
    with that port. Another port: checked free (``_check_port``), nothing reserved."""
    if settings.port:
        _check_port(settings.host, settings.port)
        return settings, None
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    reserved = socket.socket(family, socket.SOCK_STREAM)
    reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    reserved.bind((settings.host, 0))
    return dataclasses.replace(settings, port=reserved.getsockname()[1]), reserved


def serve(settings: Settings) -> int:
    """Run the master until SIGTERM/SIGINT; returns the process exit status (0 after a graceful
    stop, 2 when the workers died before any of them served, MAX_QUICK_CRASHES times in a row: the
    node cannot run, as for a bad setting; the statuses of server/cli.py's EXIT_STATUSES).

    A worker that dies is restarted after ``restart_delay`` (of its place's quick deaths in the
    last RESET_AFTER_S), however often: once a worker has served, the master never gives up on
    the node, and the other workers keep serving meanwhile. ``serving http://host:port`` is
    logged when the first worker listens (``port = 0``: a free port, the same for every worker)."""
    hangups = 0  # SIGHUPs not handled yet (the loop reopens the logs: a signal handler must not log)

    def hangup(_sig: int, _frame: object) -> None:
        nonlocal hangups
        hangups += 1

    signal.signal(signal.SIGHUP, hangup)
    settings, reserved = _reserve_port(settings)
    banner(settings)
    _raise_open_files(settings)
    prepare(settings, METRICS_DIR)
    if orphans := remove_orphan_segments():
        log.warning("removed the shared memory of masters that died without stopping: %s", ", ".join(orphans))
    admission = create_admission(f"hongbao-{settings.port}-{os.getpid()}")
    ws_limiter = hongbao_native.RateLimiter.create(
        f"ws-{settings.port}-{os.getpid()}", settings.ws_rate_per_s, settings.ws_burst
    )
    send_limiter = hongbao_native.RateLimiter.create(
        f"send-{settings.port}-{os.getpid()}", settings.send_rate_per_s, settings.send_burst
    )
    ready_r, ready_w = os.pipe()
    os.set_blocking(ready_r, False)
    slots = [_Slot() for _ in range(settings.worker_count())]
    master = os.getpid()
    rng = random.Random()
    stopping = served = False
    quick_crashes = 0

    def spawn(slot: _Slot) -> None:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the worker's loop handles it
                os.close(ready_r)
                _die_with_parent(master)
                run_worker(
                    settings, admission.name, (ws_limiter.name, send_limiter.name), ready_w, after_crash=slot.crashed
                )
            except BaseException:
                log.exception("worker failed")
                code = 1
            finally:
                os._exit(code)
        slot.pid, slot.started = pid, time.monotonic()

    def stop(sig: int, _frame: object) -> None:
        nonlocal stopping
        if not stopping:
            live = sum(slot.pid is not None for slot in slots)
            log.info("master %d: signal %d, stopping %d worker(s) gracefully", os.getpid(), sig, live)
        stopping = True
        for slot in slots:
            if slot.pid is not None:
                try:
                    os.kill(slot.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for slot in slots:
        spawn(slot)
    deadline = None
    try:
        while any(slot.pid is not None for slot in slots) or not stopping:
            if hangups:
                hangups = 0
                _reopen_logs(slots)
            if not served and _heard(ready_r):
                served = True
                log.info(
                    "master %d serving http://%s:%d with %d worker(s)", master, settings.host, settings.port, len(slots)
                )
            if stopping and deadline is None:
                deadline = time.monotonic() + GRACE_S + FINISH_CREDITS_S + 1  # a worker past it is killed
            try:  # never a blocking wait: a signal must not leave the master stuck behind a hung worker
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid, status = 0, 0
            except InterruptedError:
                continue
            if pid == 0:
                now = time.monotonic()
                if deadline is not None and now > deadline:
                    for slot in slots:
                        if slot.pid is not None:
                            log.warning(
                                "worker %d still running %.0f s after the stop: killed",
                                slot.pid,
                                GRACE_S + FINISH_CREDITS_S + 1,
                            )
                            os.kill(slot.pid, signal.SIGKILL)
                    deadline = now + 1  # once a second at most
                for slot in slots:
                    if slot.pid is None and not stopping and now >= slot.due:
                        spawn(slot)
                time.sleep(0.05)
                continue
            dead = next((slot for slot in slots if slot.pid == pid), None)
            reclaimed = admission.reclaim(pid)
            if dead is None:
                continue
            dead.pid = None
            if stopping:
                continue
            now = time.monotonic()
            delay = restart_delay(dead.died(now), rng)
            dead.due = now + delay
            log.error(
                "worker %d exited (status %d); %d admission slot(s) reclaimed; restarting in %.2f s",
                pid,
                os.waitstatus_to_exitcode(status),
                reclaimed,
                delay,
            )
            quick_crashes = quick_crashes + 1 if not served and dead.quick(now) else 0
            if not served and quick_crashes >= MAX_QUICK_CRASHES:
                log.error(
                    "workers die before serving (%d times in a row); giving up: see the lines above", quick_crashes
                )
                stop(signal.SIGTERM, None)
    finally:
        admission.unlink()
        ws_limiter.unlink()
        send_limiter.unlink()
        os.close(ready_r)
        os.close(ready_w)
        if reserved is not None:
            reserved.close()
        log.info("master %d stopped", os.getpid())
    return 2 if not served and quick_crashes >= MAX_QUICK_CRASHES else 0


def _reopen_logs(slots: list[_Slot]) -> None:
    """After a SIGHUP: reopen the master's log file and pass the signal to every live worker, which
    reopens its own; one line says which file, or that there is none (stderr: nothing to do)."""
    path = reopen()
    if path is None:
        log.info("SIGHUP: logging to stderr, no log file to reopen")
        return
    workers = [slot.pid for slot in slots if slot.pid is not None]
    for pid in workers:
        try:
            os.kill(pid, signal.SIGHUP)
        except ProcessLookupError:
            pass
    log.info("SIGHUP: log file %s reopened by the master, and passed on to %d worker(s)", path, len(workers))


def _heard(fd: int) -> bool:
    """Whether a worker wrote to the master's pipe since the last look (non-blocking read)."""
    try:
        return bool(os.read(fd, 64))
    except BlockingIOError:
        return False
