"""An error answer leaves nothing for the cycle collector: a refused grab (Finished, raised in a
step of the grab's Soon on the Redis shared level) is freed by reference counting once App has
answered it. At the storm such refusals come by the thousand per second; while each one stayed
in a reference cycle (its traceback's frames hold the error, or the Soon that holds it), nearly
all of what a worker's young collections freed at an 80/s storm was this garbage."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import secrets
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import hongbao_native
from hongbao.core import errors
from hongbao.core.services.grabbing import GRAB_OK
from hongbao.core.soon import Soon
from hongbao.server.app import App
from hongbao.server.auth import TokenVerifier, mint
from hongbao.server.composition import Backend, push_stores
from hongbao.server.config import Settings
from hongbao.server.metrics import WorkerMetrics
from hongbao.server.responses import Response

from tests.core import test_service as suite
from tests.core.conftest import admission, clock  # noqa: F401  (fixtures of the suite)
from tests.integration.mariadb import make_backend  # noqa: F401  (fixture)

SECRET = "k" * 32


def _answered(settled: asyncio.Future[Response], soon: Soon[Any]) -> None:
    settled.set_result(soon.result())


async def test_a_refused_grab_leaves_no_cycle(make_backend: Callable[..., Backend], tmp_path: Path) -> None:
    """Five grabs of a finished packet, answered 410 through the grab's Soon (a worker that holds
    the packet's state asks Redis, as someone opened it): a collection then finds no HongbaoError."""
    one, two = make_backend(), make_backend()
    await suite._group(one.services, "g", ["S", "A", "B", "C"])
    order_id = await suite._paid(one.services, "S", {"count": 2, "total_fen": 100, "group_id": "g"})
    await suite._open_followed(one.services, "A", order_id)
    assert await two.services.grabbing.grab("B", order_id) is GRAB_OK  # worker two holds the packet and group
    await suite._open_followed(one.services, "B", order_id)
    assert two.services.grabbing.cached("C", order_id) is None  # someone opened: worker two asks Redis
    limiter = hongbao_native.RateLimiter.create(f"garbage-{os.getpid()}-{secrets.token_hex(4)}", 1000.0, 1000)
    settings = Settings(data_dir=tmp_path)
    stores = push_stores(settings, {})  # the App's push routes need some: the push file's
    two = dataclasses.replace(two, push=stores)
    app = App(settings, two, TokenVerifier(SECRET, ["HS256"]), WorkerMetrics(tmp_path / "metrics"), limiter)
    raw = (
        f"POST /v1/packets/{order_id}/grab HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n"
        f"Authorization: Bearer {mint(SECRET, 'C')}\r\n\r\n"
    ).encode()
    statuses: list[int] = []
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(5):
            (request,) = hongbao_native.RequestParser().feed(raw)
            pending = app.dispatch(request)
            assert isinstance(pending, Soon)
            settled: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
            pending.add_done_callback(partial(_answered, settled))
            del pending, request
            statuses.append((await settled).status)
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, errors.HongbaoError)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
        limiter.unlink()
        await stores.aclose()
    assert statuses == [errors.Finished.status] * 5
    assert left == []
