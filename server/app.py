"""One worker's application: routes, auth, error mapping, metrics and background jobs.

``App.dispatch`` takes a parsed request and returns its Response (or, when a handler needs I/O,
a coroutine that makes it); it never raises: every error is answered as ``{"error": {"code",
"message"}}`` with its status (docs/architecture.md section 12), and an unexpected exception is logged and
answered 500 without taking the worker down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from time import perf_counter
from typing import Any

from hongbao.core import errors
from hongbao.core.breaker import BreakerOpen
from hongbao.core.clock import OffsetFileClock
from hongbao.core.loop_lag import LoopLag
from hongbao.core.membership import FOLLOW_S
from hongbao.core.services.audience import region_of
from hongbao.core.services.traffic import REGION_NAMES
from hongbao.core.soon import Soon
from hongbao.server.access_log import access, audit
from hongbao.server.api_docs import docs_routes
from hongbao.server.auth import Identity, TokenVerifier
from hongbao.server.composition import Backend
from hongbao.server.config import Settings
from hongbao.server.context import Context
from hongbao.server.fleet import Fleet, RegionEntries, node_url
from hongbao.server.handlers import Handlers
from hongbao.server.metric_catalog import FLEET_NODES, FLEET_RELAY_LATENCY
from hongbao.server.metrics import WorkerMetrics, observe
from hongbao.server.metrics_routes import MetricsRoutes
from hongbao.server.push_admin import AdminPush
from hongbao.server.push_assets import asset_routes
from hongbao.server.push_hub import PushHub
from hongbao.server.push_internal import internal_secret
from hongbao.server.relay import Relay
from hongbao.server.responses import Response, error_response, from_error, json_response, prebuilt
from hongbao.server.router import Route, Router
from hongbao.server.ws_handshake import Gate
from hongbao_native import RateLimiter, Request

log = logging.getLogger("hongbao.server")


class App:
    """Routes of docs/architecture.md section 12 over one backend (embedded or production), for one worker process."""

    def __init__(
        self,
        settings: Settings,
        backend: Backend,
        verifier: TokenVerifier,
        metrics: WorkerMetrics,
        ws_limiter: RateLimiter,
        lag: LoopLag | None = None,
    ) -> None:
        """``ws_limiter``: the host-wide admission rate of new WebSocket connections (made by the
        master); ``lag``: the worker's loop lag (None: never shed, see ``dispatch``)."""
        self.settings, self.backend, self.verifier, self.metrics = settings, backend, verifier, metrics
        self.lag = lag if settings.shed_lag_ms else None
        stores = backend.push
        if stores is None:
            raise ValueError("the app needs a backend with its push stores (composition.open_backend)")
        self.ws_gate = Gate(settings, verifier, ws_limiter, stores.down)
        self.push = PushHub(settings, stores, metrics, stores.queue, backend.services.groups)
        backend.services.outbox.notifier = self.push
        h = Handlers(backend.services)
        routes = [
            Route("GET", "/healthz", self.healthz, auth="none"),
            Route("GET", "/readyz", self.readyz, auth="none"),
            *MetricsRoutes(backend, metrics, stores.sessions, settings).routes(),
            Route("POST", "/v1/admin/accounts/{user_id}/topup", h.topup, auth="admin"),
            Route("POST", "/v1/admin/crediting-mode", h.crediting_mode, auth="admin"),
            Route("POST", "/v1/admin/lists-pressure", h.lists_pressure, auth="admin"),
            Route("GET", "/v1/admin/traffic", h.traffic, auth="admin"),
            Route("POST", "/v1/admin/traffic", h.set_traffic, auth="admin"),
            AdminPush(self.push).route(),
            Route("GET", "/v1/balance", h.balance),
            Route("GET", "/v1/groups", h.my_groups),
            Route("POST", "/v1/groups", h.create_group),
            Route("GET", "/v1/groups/{group_id}", h.get_group),
            Route("POST", "/v1/groups/{group_id}/members", h.add_members),
            Route("DELETE", "/v1/groups/{group_id}/members/{user_id}", h.remove_member),
            Route("POST", "/v1/packets", h.send, new_packet=True),
            Route("POST", "/v1/packets/{order_id}/pay", h.pay, owned=True),
            Route("DELETE", "/v1/packets/{order_id}", h.cancel, owned=True),
            Route("POST", "/v1/packets/{order_id}/grab", h.grab, event="grabs", owned=True),
            Route("POST", "/v1/packets/{order_id}/open", h.open, event="opens", owned=True),
            Route("GET", "/v1/packets/{order_id}", h.details, owned=True),
            Route("GET", "/v1/me/received", h.received),
            Route("GET", "/v1/me/sent", h.sent),
            Route("GET", "/v1/me/ledger", h.ledger),
            Route("GET", "/v1/me/profile", h.my_profile),
            Route("PUT", "/v1/me/profile", h.profile),
            Route("GET", "/v1/ws", self.ws_gate.upgrade_required, auth="none"),  # 426 before any token check
            Route("GET", "/v1/ws/preflight", self.ws_gate.preflight),
            *asset_routes(),
            *docs_routes(),
        ]
        if settings.test_clock:
            routes.append(Route("POST", "/v1/admin/clock", self.move_clock, auth="admin"))
        self.router = Router(routes)
        self.fleet: Fleet | None = None  # the packets' owners (production); embedded, one node: all local
        self.relay = Relay(internal_secret(settings), settings.fleet_forward_timeout_ms / 1000)
        self.entries = RegionEntries(settings)  # each region's entries; empty: one region
        self.region_down = False  # this region's packet databases did not answer the last probe
        if backend.nodes is not None:
            fleet = self.fleet = Fleet(node_url(settings), backend.nodes, settings.fleet_node_ttl_s)
            metrics.sample(FLEET_NODES.name, lambda: {(): float(len(fleet.live))})
        # each route's request counters by (method, template)
        self._route_metrics = {(r.method, r.template): metrics.route(r.method, r.template) for r in routes}
        self._unmatched = metrics.route("", "unmatched")
        self.stopping = asyncio.Event()  # set at a graceful stop: the background jobs end after their step
        self.draining = False  # set when a graceful stop begins: /readyz answers 503
        self.access_log = settings.access_log  # one line per request (access_log.py); off: one test a request

    def dispatch(
        self, request: Request
    ) -> Response | Coroutine[Any, Any, Response] | Soon[Response | Coroutine[Any, Any, Response]]:
        """Answer one parsed request (the native parser's Request); never raises. The Response
        itself when the route needs no I/O (errors included), so the protocol answers it without
        a coroutine; a Soon of it when the handler waits for one reply without a coroutine (whose
        result is the Response, or a coroutine when the handler fell back to one); otherwise a
        coroutine that makes it. While the loop runs ``shed_lag_ms`` or more behind, a user route
        answers 429 busy at once (``overload_rejections``): its answer would come too late, and the
        work would make every later answer later; health, metrics and admin routes are served."""
        started = perf_counter()
        route, params, path_known = self.router.match(request.method, request.path)
        identity: Identity | None = None
        try:
            if route is None:
                if path_known:
                    raise errors.MethodNotAllowed(
                        f"{request.method} is not allowed on {request.path}", self.router.allowed(request.path)
                    )
                raise errors.NotFound(f"no route {request.method} {request.path}")
            auth = route.auth
            if auth == "user" and self.lag is not None and self.lag.behind_ms() >= self.settings.shed_lag_ms:
                raise errors.Overloaded()
            if auth != "none":  # the caller of a route with auth "user" or "admin" (Unauthorized, Forbidden)
                identity = self.verifier.bearer(request.header("authorization"))
                if auth == "admin" and not identity.admin:
                    raise errors.Forbidden("this route needs an admin token")
            ctx = Context(identity, params, request)
            if route.owned and self.fleet is not None:
                region = self._elsewhere(region_of(params["order_id"]), request)
                if region is not None:
                    return self._across(ctx, route, region, started)
                owner = self.fleet.owner(params["order_id"])
                if owner is not None and not self.relay.relayed(request):
                    return self._relay(ctx, route, owner, started)
            elif route.new_packet and self.entries:
                region = self._elsewhere(self._send_region(), request)
                if region is not None:
                    return self._across(ctx, route, region, started)
            result = route.handler(ctx)
        except Exception as exc:
            return self._done(request, route, identity, self._failed(exc, request, route), started)
        if isinstance(result, Response):
            return self._done(request, route, identity, result, started)
        if isinstance(result, Soon):
            return result.outcome(
                partial(self._settled, request, route, identity, started)
            )  # no closure: no cells for every request
        return self._complete(request, route, identity, result, started)

    def _settled(
        self,
        request: Request,
        route: Route,
        identity: Identity | None,
        started: float,
        answer: Response | Awaitable[Response] | None,
        error: BaseException | None,
    ) -> Response | Coroutine[Any, Any, Response]:
        """A handler's Soon settled: its Response (an error's included), or the coroutine it fell back to."""
        if error is not None:
            failed = error if isinstance(error, Exception) else RuntimeError(f"the reply was lost: {error!r}")
            return self._done(request, route, identity, self._failed(failed, request, route), started)
        if isinstance(answer, Response):
            return self._done(request, route, identity, answer, started)
        assert answer is not None
        return self._complete(request, route, identity, answer, started)

    async def _complete(
        self, request: Request, route: Route, identity: Identity | None, pending: Awaitable[Response], started: float
    ) -> Response:
        try:
            response = await pending
        except Exception as exc:
            response = self._failed(exc, request, route)
        return self._done(request, route, identity, response, started)

    def _elsewhere(self, region: int | None, request: Request) -> int | None:
        """``region`` when it is another region's (1, 2) that this request may still be relayed to
        (a fleet of regions, and the request not already relayed across), else None: serve here."""
        if region is None or region == self.settings.region or not self.entries or self.relay.hopped(request):
            return None
        return None if self.relay.relayed(request) else region

    def _send_region(self) -> int:
        """The region a send made here goes to: the traffic switch's word, with this region
        down when any of its packet databases is (its breaker open, or the last probe unanswered)."""
        shards = self.backend.shards
        down = self.region_down or (shards is not None and any(shards.breakers().values()))
        return self.backend.services.traffic.region_for_send(self.settings.region, down)

    async def probe_region(self) -> None:
        """Whether this region's packet databases answer now (``region_down``), for the traffic
        switch's ``auto``: a send needs no database before its pay, so nothing else would notice."""
        shards = self.backend.shards
        if shards is not None:
            self.region_down = not all((await shards.reachable()).values())

    async def _across(self, ctx: Context, route: Route, region: int, started: float) -> Response:
        """``ctx``'s request answered by one of ``region``'s entries, tried in turn; 503 degraded
        (Retry-After) when none answers (the order lives there: nothing here can serve it)."""
        request = ctx.request
        for url in self.entries.order(region):
            answer = await self._timed(self.relay.send(url, request, hop=True))
            if answer is not None:
                self.metrics.events["fleet_region_forwarded"] += 1
                return self._done(request, route, ctx.identity, answer, started, relayed=True)
            self.entries.skip(url)
        down = errors.Degraded(f"no entry of region {REGION_NAMES[region]} answers; retry shortly", retry_after=5)
        return self._done(request, route, ctx.identity, from_error(down), started, relayed=True)

    async def _timed(self, relay: Awaitable[Response | None]) -> Response | None:
        """``relay``'s answer, its round trip counted in the relay latency histogram when it came."""
        started = perf_counter()
        answer = await relay
        if answer is not None:
            observe(self.metrics.histograms[FLEET_RELAY_LATENCY.name], perf_counter() - started)
        return answer

    async def _relay(self, ctx: Context, route: Route, owner: str | None, started: float) -> Response:
        """``ctx``'s request answered by ``owner``, the node that owns its packet; when that node
        does not answer, it is skipped and the next owner is asked, at last this node serves it."""
        assert self.fleet is not None
        request, identity, events = ctx.request, ctx.identity, self.metrics.events
        while owner is not None:
            answer = await self._timed(self.relay.send(owner, request))
            if answer is not None:
                events["fleet_forwarded"] += 1
                return self._done(request, route, identity, answer, started, relayed=True)
            events["fleet_forward_failures"] += 1
            self.fleet.skip(owner)
            owner = self.fleet.owner(ctx.params["order_id"])
        try:
            pending = _answer(route.handler(ctx))
        except Exception as exc:
            return self._done(request, route, identity, self._failed(exc, request, route), started)
        return await self._complete(request, route, identity, pending, started)

    def _failed(self, exc: Exception, request: Request, route: Route | None) -> Response:
        """The answer for an exception a handler raised: its own status for a HongbaoError, else
        a logged 500 (the worker goes on). A HongbaoError is an answer, not a fault: its traceback
        is dropped once answered, as it would otherwise keep the frames it passed through (which
        hold the error, or the Soon holding it) in a reference cycle until the next collection."""
        if isinstance(exc, errors.HongbaoError):
            if isinstance(exc, errors.Busy):
                self.metrics.events[exc.counter] += 1
            response = from_error(exc)
            exc.__traceback__ = None
            return response
        log.error("unhandled error on %s %s", request.method, route.template if route else "unmatched", exc_info=exc)
        return error_response(500, "internal", "internal error")

    def _done(
        self,
        request: Request,
        route: Route | None,
        identity: Identity | None,
        response: Response,
        started: float,
        relayed: bool = False,
    ) -> Response:
        """Count ``response`` (to ``identity``'s ``request``) in the metrics (its route's event
        only when it was served here, not ``relayed`` from the packet's owner), log it in the
        access log when it is on and in the audit log when the route is an admin's; return it."""
        elapsed = perf_counter() - started
        status = response.status
        if route is None:
            self._unmatched.observe(status, elapsed)
        else:
            self._route_metrics[route.method, route.template].observe(status, elapsed)
            event = route.event
            if event is not None and not relayed and (event != "opens" or status == 200):
                self.metrics.events[event] += 1
        if self.access_log:
            access(request, "unmatched" if route is None else route.template, status, elapsed, identity)
        if route is not None and route.auth == "admin":
            audit(request, route, identity, response)
        return response

    def healthz(self, _ctx: Context) -> Response:
        """GET /healthz: the worker answers (with no I/O, so without a coroutine)."""
        return _HEALTHY

    async def readyz(self, _ctx: Context) -> Response:
        """GET /readyz: 200 while this node serves, ``{"status": "ready" | "degraded", "degraded":
        [dependency, ...]}`` naming what is down (a shard database, Redis: their fallbacks serve);
        503 ``degraded`` with Retry-After only when it cannot serve: draining (a graceful stop has
        begun), or no database of its shards answers. A load balancer keeps a degraded node."""
        if self.draining:
            return from_error(errors.Degraded("draining: this node is stopping; try another"))
        databases = await self.backend.databases()
        down = [name for name, up in databases.items() if not up]
        if down and len(down) == len(databases):
            return from_error(errors.Degraded(f"no database of this node's shards answers: {', '.join(down)}"))
        degraded = [f"mysql {name}" for name in down]
        try:
            await self.push.stores.check()
        except Exception:
            degraded.append("redis")
        return json_response(200, {"status": "degraded" if degraded else "ready", "degraded": degraded})

    async def move_clock(self, ctx: Context) -> Response:
        """POST /v1/admin/clock {now_ms, frozen?} (test servers only): move every worker's clock;
        ``frozen: true`` stops it at ``now_ms`` until the next move."""
        clock = self.backend.services.ports.clock
        body = ctx.json()
        now_ms, frozen = body.get("now_ms"), body.get("frozen", False)
        if type(now_ms) is not int or type(frozen) is not bool or not isinstance(clock, OffsetFileClock):
            raise errors.InvalidRequest("now_ms must be an integer of ms since the epoch, frozen a boolean")
        if not CLOCK_RANGE_MS[0] <= now_ms <= CLOCK_RANGE_MS[1]:
            raise errors.InvalidRequest("now_ms must fall in the years 2000..2099 (order ids carry yymmdd)")
        clock.set_ms(now_ms, frozen=frozen)
        return json_response(200, {"now_ms": clock.now_ms(), "frozen": frozen})

    def background_jobs(self) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        """The periodic money jobs of a worker: crediting and lists (every worker: a consumer
        group shares the queue), refunds and reconciliation (one worker at a time: the holder of
        the job's lease, so the databases' idle load does not grow with workers or nodes), flags
        (the crediting mode, the lists' pressure switch, the traffic switch), the probe of this
        region's packet databases (in a fleet of regions: ``probe_region``), metrics. Each is safe
        on any number of workers at once (every step is idempotent), and each ends after its current step once
        ``stopping`` is set (a stop never cuts a credit between its ledger entry and its mark)."""
        svc, s, leases = self.backend.services, self.settings, self.backend.leases

        def leased(name: str, interval_s: float, job: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
            """``job`` run only while this worker holds the lease ``name`` (renewed each run; a
            holder that dies is replaced after LEASE_INTERVALS of its interval)."""
            ttl_ms = max(1_000, round(LEASE_INTERVALS * interval_s * 1000))

            async def step() -> None:
                if await leases.hold(name, ttl_ms):
                    await job()

            return step

        async def credits() -> None:
            await svc.outbox.redrive()
            await svc.settlement.drain_credits()
            await svc.lists.drain()

        async def metrics() -> None:
            self.metrics.flush()

        async def flags() -> None:
            await svc.crediting.sync()
            await svc.pressure.sync()
            await svc.traffic.sync()

        return [
            every("credits", s.credit_interval_s, credits, self.stopping),
            every(
                "refunds",
                s.refund_interval_s,
                leased("refunds", s.refund_interval_s, svc.settlement.refund_due),
                self.stopping,
            ),
            every(
                "reconcile",
                s.reconcile_interval_s,
                leased("reconcile", s.reconcile_interval_s, lambda: svc.settlement.reconcile(s.reconcile_window_ms)),
                self.stopping,
            ),
            every("flags", 1.0, flags, self.stopping),
            *([every("region", 1.0, self.probe_region, self.stopping)] if self.entries else []),
            *(every("follow", FOLLOW_S, follow, self.stopping) for follow in self.backend.follow),
            every("metrics", 1.0, metrics, self.stopping),
        ]

    async def finish_credits(self, deadline: float) -> int:
        """At a graceful stop, after the jobs ended: credit (and list) what the queue holds, then
        every receipt and refund still pending however young (the reconciler with no window: what
        the deferred mode left for it, what a killed worker had claimed or never queued, what a
        queue that is down holds), until nothing is left or ``deadline`` (time.monotonic()) passes,
        so the stopped database owes no credit. Crediting is idempotent, so workers stopping
        together do not pay twice. Returns how many messages and movements were handled; failures
        are logged (the reconciler of the next start credits what is left)."""
        settlement, lists = self.backend.services.settlement, self.backend.services.lists

        async def drain() -> int:
            return await settlement.drain_credits() + await lists.drain()

        return await _until_done("crediting the queue", drain, deadline) + await _until_done(
            "reconciling", lambda: settlement.reconcile(0), deadline
        )


async def _answer(result: Any) -> Response:
    """A handler's result as its Response: the Response itself, or what its Soon or coroutine
    (and the coroutine a Soon fell back to) comes to."""
    while not isinstance(result, Response):
        result = await result
    return result


async def _until_done(what: str, step: Callable[[], Awaitable[int]], deadline: float) -> int:
    """Run ``step`` until it handles nothing or ``deadline`` (time.monotonic()) passes; how many it
    handled. A failure ends it, logged once (a dependency down in one line: its breaker or pool
    said so already)."""
    handled = 0
    try:
        while time.monotonic() < deadline and (done := await step()):
            handled += done
    except (BreakerOpen, errors.Degraded, errors.Busy) as exc:
        log.warning("%s at stop stopped (%s); the reconciler of the next start does the rest", what, exc)
    except Exception:
        log.exception("%s at stop failed; the reconciler of the next start does the rest", what)
    return handled


LEASE_INTERVALS = 3  # a job's lease lasts this many of its intervals: a dead holder is replaced after it
CLOCK_RANGE_MS = (946_684_800_000, 4_102_444_799_999)  # 2000-01-01T00:00:00Z .. 2099-12-31T23:59:59.999Z
_HEALTHY = prebuilt(json_response(200, {"status": "ok"}))


def every(
    name: str, interval_s: float, job: Callable[[], Awaitable[Any]], stopping: asyncio.Event
) -> Callable[[], Coroutine[Any, Any, None]]:
    """The background job ``name``: ``job()`` every ``interval_s`` seconds until ``stopping`` is
    set. A dependency that is down (BreakerOpen, Degraded) is not logged here: its breaker or
    pool logged it once; any other failure is logged with its traceback. Either way the job
    runs again after the interval (an overloaded worker, Busy, is not logged either)."""

    async def loop() -> None:
        while not stopping.is_set():
            try:
                await job()
            except (BreakerOpen, errors.Degraded, errors.Busy):
                pass
            except Exception:
                log.exception("background job %s failed; retrying in %.2f s", name, interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), interval_s)

    return loop
