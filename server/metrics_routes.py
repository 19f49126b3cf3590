"""The node's numbers over HTTP: ``GET /metrics`` (Prometheus text, no token), ``GET
/v1/admin/metrics`` (the same values as JSON, admin token) and ``GET /dashboard``, a page that
draws that JSON every second (server/static/dashboard.html; it takes the admin token from the URL
fragment, ``/dashboard#token=<jwt>``, which never reaches the server).

Besides the workers' counters (server/metrics.py), a scrape reads at that moment the gauges the
catalog merges by ``scrape`` (server/metric_catalog.py): the credits pending in the credit queue
and the users online in the push store (each left out while its store does not answer: the
counters still show the outage), the crediting mode and the flow-control limits. This module also registers the gauges
each worker samples with its snapshot: its opens in flight and its breakers.
"""

from __future__ import annotations

import asyncio
import logging

from hongbao.core.breaker import BreakerOpen
from hongbao.core.push_ports import SessionStore
from hongbao.core.services.crediting import CreditingMode
from hongbao.core.services.traffic import MODES
from hongbao.server.composition import Backend
from hongbao.server.config import Settings
from hongbao.server.context import Context
from hongbao.server.metric_catalog import (
    BREAKER_OPEN,
    CREDITING_MODE,
    CREDITS_PENDING,
    FLOW_LIMITS,
    LISTS_PRESSURE,
    ONLINE_USERS,
    OPENS_IN_FLIGHT,
    TRAFFIC_MODE,
)
from hongbao.server.metrics import CONTENT_TYPE, Labels, WorkerMetrics
from hongbao.server.push_assets import asset_route
from hongbao.server.responses import Response, json_response
from hongbao.server.router import Route

log = logging.getLogger("hongbao.server")
DASHBOARD = "/dashboard"


class MetricsRoutes:
    """The metrics routes of one worker over its ``backend``, ``metrics`` and push ``sessions``."""

    __slots__ = ("backend", "metrics", "sessions", "limits")

    def __init__(self, backend: Backend, metrics: WorkerMetrics, sessions: SessionStore, settings: Settings) -> None:
        self.backend, self.metrics, self.sessions = backend, metrics, sessions
        self.limits = flow_limits(settings, regional=backend.services.sending.region_rate is not None)
        batcher = backend.services.opening.batcher
        metrics.sample(OPENS_IN_FLIGHT.name, lambda: {(): float(batcher.in_flight())})
        metrics.sample(BREAKER_OPEN.name, lambda: {(name,): float(down) for name, down in backend.breakers().items()})

    def routes(self) -> list[Route]:
        """``GET /metrics``, ``GET /v1/admin/metrics`` and the dashboard page."""
        return [
            Route("GET", "/metrics", self.scrape, auth="none"),
            Route("GET", "/v1/admin/metrics", self.summary, auth="admin"),
            asset_route(DASHBOARD, "dashboard.html", "text/html; charset=utf-8"),
        ]

    async def scrape(self, _ctx: Context) -> Response:
        """GET /metrics: Prometheus text format, merged over every worker."""
        return Response(200, self.metrics.render(await self.scraped()), [("content-type", CONTENT_TYPE)])

    async def summary(self, _ctx: Context) -> Response:
        """GET /v1/admin/metrics: the same values as JSON (WorkerMetrics.summary)."""
        return json_response(200, self.metrics.summary(await self.scraped()))

    async def scraped(self) -> dict[str, dict[Labels, float]]:
        """The gauges read now: the crediting mode (1 for the mode in force, 0 for the others),
        the lists' pressure switch, the flow-control limits, the traffic switch, the credits pending and the users
        online (each left out when its store fails to answer)."""
        mode = self.backend.services.crediting.mode
        values: dict[str, dict[Labels, float]] = {
            CREDITING_MODE.name: {(m.value,): float(m is mode) for m in CreditingMode},
            LISTS_PRESSURE.name: {(): float(self.backend.services.pressure.on)},
            FLOW_LIMITS.name: self.limits,
            TRAFFIC_MODE.name: {(m,): float(m == self.backend.services.traffic.traffic.mode) for m in MODES},
        }
        answers = await asyncio.gather(
            self.backend.services.settlement.credits_pending(), self.sessions.online_count(), return_exceptions=True
        )
        for spec, answer in zip((CREDITS_PENDING, ONLINE_USERS), answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, Exception):
                    raise answer
                if not isinstance(answer, BreakerOpen):  # Redis down: its breaker logged that once
                    log.warning("metrics: %s unavailable: %r", spec.exported, answer)
                continue
            values[spec.name] = {(): float(answer)}
        return values


def flow_limits(settings: Settings, *, regional: bool) -> dict[Labels, float]:
    """The flow-control limits in force, by name (the ``flow_limit`` gauge): the node's send rate
    and burst, the region's when ``regional`` (kept on Redis), the grabs per share, K."""
    names = ["send_rate_per_s", "send_burst", "grab_ok_per_share", "max_in_db"]
    if regional:
        names[2:2] = ["region_send_rate_per_s", "region_send_burst"]
    return {(name,): float(getattr(settings, name)) for name in names}
