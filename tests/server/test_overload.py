"""An overloaded worker sheds instead of queueing: while its event loop runs ``shed_lag_ms`` or
more behind, new user requests get 429 busy + Retry-After at once, health answers, and serving
resumes as soon as the loop catches up. The fault: the worker descheduled (SIGSTOP) while
requests wait in its sockets, as a CPU-starved worker is."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.server.conftest import Server
from tests.server.flows import eventually, scraped, topup

STALL_S = 0.8  # longer than the default shed_lag_ms (300 ms) with room


def _worker(server: Server) -> int:
    master = server.process.pid
    (pid,) = (int(p) for p in Path(f"/proc/{master}/task/{master}/children").read_text().split())
    return pid


def test_a_worker_behind_its_loop_sheds_user_requests_and_still_answers_health(make_server) -> None:  # type: ignore[no-untyped-def]
    """Requests that arrived while the worker was stopped 0.8 s: the user's balance gets 429 busy
    with Retry-After, /healthz 200; right after, the balance is served again and
    ``hongbao_overload_rejections_total`` counts the shed request."""
    server = make_server(workers=1)
    topup(server, "A", 100)
    user, anyone = server.client("A"), httpx.Client(base_url=server.url, timeout=30)
    assert user.get("/v1/balance").status_code == 200 and anyone.get("/healthz").status_code == 200  # kept alive
    worker = _worker(server)
    os.kill(worker, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(2) as pool:
            balance, health = pool.submit(user.get, "/v1/balance"), pool.submit(anyone.get, "/healthz")
            time.sleep(STALL_S)
            os.kill(worker, signal.SIGCONT)
            shed, healthy = balance.result(10), health.result(10)
    finally:
        os.kill(worker, signal.SIGCONT)
    assert shed.status_code == 429, shed.text
    assert shed.json()["error"]["code"] == "busy" and float(shed.headers["retry-after"]) >= 1
    assert healthy.status_code == 200
    served = eventually(lambda: (answer := user.get("/v1/balance")).status_code == 200 and answer, 5)
    assert served.json()["balance_fen"] == 100
    assert eventually(lambda: (scraped(server, "hongbao_overload_rejections_total") or 0) >= 1, 5)
    user.close()
    anyone.close()
