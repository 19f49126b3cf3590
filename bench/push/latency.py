"""Push latency of the push benchmark: from an open over HTTP (``POST /v1/packets/{id}/open``) to
the ``opened`` event at the opener's WebSocket, on a running hongbao server.

``openers`` users, each with a WebSocket (the ``websockets`` library's client), are the members
of one group; the sender pays ``packets`` lucky packets of ``openers`` shares each. Then, one at
a time, each opener opens each packet: the clock starts before the request is sent and stops
when the socket has the event naming that packet. The HTTP answer's time is kept beside it.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import httpx
import orjson
from hongbao.server.auth import mint
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

EVENT_TIMEOUT_S = 10.0
FEN_PER_SHARE = 100


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100) of ``values`` (not empty)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summary_ms(seconds: list[float]) -> dict[str, float]:
    """p50, p99 and max of ``seconds``, in milliseconds."""
    if not seconds:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    return {
        "p50_ms": round(percentile(seconds, 50) * 1000, 3),
        "p99_ms": round(percentile(seconds, 99) * 1000, 3),
        "max_ms": round(max(seconds) * 1000, 3),
    }


async def _listen(ws: ClientConnection, arrivals: dict[str, asyncio.Future[float]]) -> None:
    """Record when each ``opened`` event arrives, by order id."""
    async for raw in ws:
        message = orjson.loads(raw)
        if message.get("type") == "event" and message.get("event") == "opened":
            waiter = arrivals.get(message["data"]["order_id"])
            if waiter is not None and not waiter.done():
                waiter.set_result(time.perf_counter())


async def _money(http: httpx.AsyncClient, secret: str, openers: list[str], packets: int) -> list[str]:
    """Top up the sender, make the openers' group, pay ``packets`` packets; their order ids."""
    sender = {"authorization": f"Bearer {mint(secret, 'lat_sender')}"}
    admin = {"authorization": f"Bearer {mint(secret, 'bench_admin', admin=True)}"}
    total = FEN_PER_SHARE * len(openers)
    (
        await http.post("/v1/admin/accounts/lat_sender/topup", json={"amount_fen": total * packets}, headers=admin)
    ).raise_for_status()
    group = await http.post("/v1/groups", json={"members": openers}, headers=sender)
    group.raise_for_status()
    body = {"kind": "lucky", "count": len(openers), "total_fen": total, "group_id": group.json()["group_id"]}
    order_ids = []
    for _ in range(packets):
        made = await http.post("/v1/packets", json=body, headers=sender)
        made.raise_for_status()
        order_id = made.json()["order_id"]
        (await http.post(f"/v1/packets/{order_id}/pay", headers=sender)).raise_for_status()
        order_ids.append(order_id)
    return order_ids


async def measure(url: str, secret: str, openers: int, packets: int) -> dict[str, Any]:
    """``openers`` x ``packets`` timed opens against the server at ``url`` (http://host:port);
    the push and HTTP latency summaries, and the samples that never saw their event."""
    users = [f"lat{i:04d}" for i in range(openers)]
    ws_url = url.replace("http://", "ws://", 1) + "/v1/ws"
    push: list[float] = []
    answers: list[float] = []
    missing = 0
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        order_ids = await _money(http, secret, users, packets)
        tokens = {u: mint(secret, u) for u in users}
        sockets = [
            await connect(ws_url, subprotocols=[Subprotocol("bearer"), Subprotocol(tokens[u])], compression=None)
            for u in users
        ]
        arrivals: dict[str, dict[str, asyncio.Future[float]]] = {u: {} for u in users}
        listeners = [asyncio.create_task(_listen(ws, arrivals[u])) for u, ws in zip(users, sockets, strict=True)]
        await asyncio.sleep(0.5)  # the sessions are logged in after the 101
        loop = asyncio.get_running_loop()
        try:
            for order_id in order_ids:
                for user in users:
                    waiter = arrivals[user][order_id] = loop.create_future()
                    headers = {"authorization": f"Bearer {tokens[user]}"}
                    started = time.perf_counter()
                    (await http.post(f"/v1/packets/{order_id}/open", headers=headers)).raise_for_status()
                    answers.append(time.perf_counter() - started)
                    try:
                        push.append(await asyncio.wait_for(waiter, EVENT_TIMEOUT_S) - started)
                    except TimeoutError:
                        missing += 1
        finally:
            for task in listeners:
                task.cancel()
            for ws in sockets:
                await ws.close()
    return {
        "samples": len(answers),
        "missing_events": missing,
        "push": summary_ms(push),
        "http_answer": summary_ms(answers),
    }
