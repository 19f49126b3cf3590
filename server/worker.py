"""One worker process: uvloop, its own SO_REUSEPORT listening socket, the app, background jobs,
and a graceful stop on SIGTERM/SIGINT (stop accepting, finish requests, then exit)."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import time

import hongbao_native
import uvloop
from asyncmy.errors import MySQLError
from hongbao.core.clock import Clock, OffsetFileClock, SystemClock
from hongbao.core.errors import Degraded
from hongbao.server.app import App
from hongbao.server.auth import TokenVerifier, embedded_secret
from hongbao.server.backends import close_backend, open_backend
from hongbao.server.config import Settings
from hongbao.server.http_protocol import Connections, HttpProtocol
from hongbao.server.metrics import WorkerMetrics
from hongbao.server.ws_connection import WsRegistry
from redis.exceptions import RedisError

log = logging.getLogger("hongbao.worker")
GRACE_S = 10.0
FINISH_CREDITS_S = 5.0  # beyond the grace: crediting the queue at a stop
CLOCK_FILE = "test-clock"
METRICS_DIR = "metrics"
#: What a dependency that is down or refuses (MySQL, Redis) raises while a worker starts.
UNREACHABLE = (Degraded, OSError, RedisError, MySQLError)


class CannotStart(Exception):
    """A worker could not reach its databases at start: the master logs this one line (no
    traceback) and restarts the worker, until it gives up."""


def verifier_for(settings: Settings) -> TokenVerifier:
    """The token verifier of ``settings``: a public key file (RS256/ES256), the configured HS256
    secret, or the embedded key file in the data directory."""
    if settings.jwt_public_key_file:
        with open(settings.jwt_public_key_file) as handle:
            return TokenVerifier(handle.read(), ["RS256", "ES256"], settings.jwt_leeway_s)
    secret = settings.jwt_secret or embedded_secret(settings.data_dir)
    return TokenVerifier(secret, ["HS256"], settings.jwt_leeway_s)


async def _serve(settings: Settings, admission_name: str, ws_limiter_name: str) -> None:
    loop = asyncio.get_running_loop()
    admission = hongbao_native.AdmissionTable.attach(admission_name)
    ws_limiter = hongbao_native.RateLimiter.attach(ws_limiter_name)
    clock: Clock = OffsetFileClock(settings.data_dir / CLOCK_FILE) if settings.test_clock else SystemClock()
    metrics = WorkerMetrics(settings.data_dir / METRICS_DIR)
    try:
        backend = await open_backend(settings, admission, clock, metrics.events)
    except UNREACHABLE as exc:
        raise CannotStart(f"cannot reach the databases: {exc}") from None
    app = App(settings, backend, verifier_for(settings), metrics, ws_limiter)
    conns = Connections(settings.max_connections, WsRegistry(settings))
    try:
        await app.push.start()  # a live push node with its internal listener before the first connection
    except UNREACHABLE as exc:
        await close_backend(backend)
        raise CannotStart(f"cannot start the push node: {exc}") from None
    server = await loop.create_server(
        lambda: HttpProtocol(app, conns), settings.host, settings.port, reuse_port=True, backlog=4096
    )
    money = [loop.create_task(job()) for job in app.background_jobs()]
    jobs = [loop.create_task(job()) for job in (*app.push.jobs(), conns.sweep_forever, conns.ws.sweep_forever)]
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    gc.freeze()  # what start-up built lives as long as the worker: full collections skip it from now on
    log.info("worker listening on %s:%d", settings.host, settings.port)
    await stop.wait()
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
    app.metrics.flush()
    await close_backend(backend)


def run_worker(settings: Settings, admission_name: str, ws_limiter_name: str) -> None:
    """Run one worker until SIGTERM/SIGINT (called in the forked child), attached to the host's
    admission table and WebSocket admission rate limiter (both created by the master)."""
    uvloop.run(_serve(settings, admission_name, ws_limiter_name))
