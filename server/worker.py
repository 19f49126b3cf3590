"""One worker process: uvloop, its own SO_REUSEPORT listening socket, the app, background jobs,
a graceful stop on SIGTERM/SIGINT (stop accepting, finish requests, then exit), and the log file
reopened on SIGHUP."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time

import hongbao_native
import uvloop
from hongbao.core.clock import Clock, OffsetFileClock, SystemClock
from hongbao.core.faults import parse_faults
from hongbao.core.loop_lag import LoopLag
from hongbao.server.app import App
from hongbao.server.auth import TokenVerifier, embedded_secret
from hongbao.server.composition import open_backend
from hongbao.server.config import Settings
from hongbao.server.gc_policy import settle
from hongbao.server.http_protocol import Connections, HttpProtocol
from hongbao.server.logs import reopen
from hongbao.server.metric_catalog import GC_COLLECTIONS, WS_CONNECTIONS
from hongbao.server.metrics import WorkerMetrics
from hongbao.server.node import host_name
from hongbao.server.ws_connection import WsRegistry

log = logging.getLogger("hongbao.worker")
GRACE_S = 10.0
FINISH_CREDITS_S = 5.0  # beyond the grace: crediting the queue at a stop
CLOCK_FILE = "test-clock"
METRICS_DIR = "metrics"
#: The byte a worker writes to the master's pipe once it listens (DESIGN: ``serving`` is logged then).
LISTENING = b"L"


def verifier_for(settings: Settings) -> TokenVerifier:
    """The token verifier of ``settings``: a public key file (RS256/ES256), the configured HS256
    secret, or the embedded key file in the data directory."""
    if settings.jwt_public_key_file:
        with open(settings.jwt_public_key_file) as handle:
            return TokenVerifier(handle.read(), ["RS256", "ES256"], settings.jwt_leeway_s)
    secret = settings.jwt_secret or embedded_secret(settings.data_dir)
    return TokenVerifier(secret, ["HS256"], settings.jwt_leeway_s)


async def _serve(
    settings: Settings, admission_name: str, limiter_names: tuple[str, str], ready_fd: int, after_crash: bool
) -> None:
    loop = asyncio.get_running_loop()
    admission = hongbao_native.AdmissionTable.attach(admission_name)
    ws_limiter, send_limiter = (hongbao_native.RateLimiter.attach(name) for name in limiter_names)
    clock: Clock = OffsetFileClock(settings.data_dir / CLOCK_FILE) if settings.test_clock else SystemClock()
    metrics = WorkerMetrics(settings.data_dir / METRICS_DIR)
    faults = parse_faults(settings.test_faults)
    lag = LoopLag()
    lag.start()
    # no connection yet: a dependency down at start is served degraded until it is back
    backend = await open_backend(settings, admission, clock, metrics.events, faults, send_limiter, lag)
    app = App(settings, backend, verifier_for(settings), metrics, ws_limiter, lag)
    conns = Connections(settings.max_connections, WsRegistry(settings))
    node = host_name(settings.node_name)
    metrics.sample(WS_CONNECTIONS.name, lambda: {(node,): float(len(conns.ws.open))})
    await app.push.start(after_crash=after_crash)  # the internal listener; joins as a live node (now or later)
    server = await loop.create_server(
        lambda: HttpProtocol(app, conns), settings.host, settings.port, reuse_port=True, backlog=4096
    )
    money = [loop.create_task(job()) for job in app.background_jobs()]
    jobs = [loop.create_task(job()) for job in (*app.push.jobs(), conns.sweep_forever, conns.ws.sweep_forever)]
    beat = None if app.fleet is None else loop.create_task(app.fleet.beat_forever())
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reopen)  # the master passes its SIGHUP on: the log file
    metrics.sample(GC_COLLECTIONS.name, settle())
    log.info("worker listening on %s:%d", settings.host, settings.port)
    os.write(ready_fd, LISTENING)
    await stop.wait()
    app.draining = True  # /readyz answers 503 from now on
    if app.fleet is not None and beat is not None:
        beat.cancel()
        await app.fleet.leave()  # the other nodes ask the packets' next owners from now on
    server.close()
    deadline = time.monotonic() + GRACE_S
    while conns.count() and time.monotonic() < deadline:
        conns.close_idle()
        await asyncio.sleep(0.05)
    app.stopping.set()  # the money jobs end after their current step...
    await asyncio.wait(money, timeout=max(0.1, deadline - time.monotonic()))
    for job in (*money, *jobs):
        job.cancel()
    await asyncio.gather(*money, *jobs, return_exceptions=True)
    await app.finish_credits(deadline + FINISH_CREDITS_S)  # ...then what the queue holds is credited
    await app.push.stop()
    await app.relay.close()
    app.metrics.flush()
    await backend.aclose()  # the push stores', then the money backend's connections


def run_worker(
    settings: Settings, admission_name: str, limiter_names: tuple[str, str], ready_fd: int, *, after_crash: bool = False
) -> None:
    """Run one worker until SIGTERM/SIGINT (called in the forked child), attached to the host's
    admission table and rate limiters (``limiter_names``: WebSocket admission, sends; all made by
    the master); it writes
    LISTENING to ``ready_fd`` once it accepts connections. A dependency that is down at start
    does not stop it: it serves degraded (503 where the dependency is needed, the fallbacks of
    docs/operations.md elsewhere) and connects once the dependency is back. ``after_crash``: it
    replaces a worker that died (see PushHub.start)."""
    uvloop.run(_serve(settings, admission_name, limiter_names, ready_fd, after_crash))
