"""Many concurrent HTTP clients for the server tests: a Crowd of one-connection httpx clients and
helpers that fan requests out over it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import httpx

from tests.server.conftest import Server
from tests.server.flows import ok

ONE_CONNECTION = httpx.Limits(max_connections=1, max_keepalive_connections=1)
#: one request on a given client: ``call(client) -> response``.
Call = Callable[[httpx.AsyncClient], Awaitable[httpx.Response]]


class Crowd:
    """``size`` asyncio clients of one connection each; ``crowd[i]`` is client ``i % size``, and
    every request carries its own user's token.

    Not one httpx.AsyncClient with 300 connections: httpx's pool scans its connections on every
    request, which costs ~10 ms of client CPU a request at 300 connections (the test would measure
    httpx, not the server); 300 one-connection clients cost ~1.5 ms a request."""

    def __init__(self, server: Server, size: int = 300) -> None:
        self.clients = [
            httpx.AsyncClient(base_url=server.url, limits=ONE_CONNECTION, timeout=60, verify=False) for _ in range(size)
        ]

    def __getitem__(self, index: int) -> httpx.AsyncClient:
        return self.clients[index % len(self.clients)]

    async def run(self, calls: Sequence[Call]) -> list[httpx.Response]:
        """Every call, at most one per client at a time (so no request waits in httpx's pool,
        which rescans its waiting requests on every release); answers in the calls' order."""
        answers: list[httpx.Response | None] = [None] * len(calls)
        todo = iter(enumerate(calls))

        async def worker(client: httpx.AsyncClient) -> None:
            for index, call in todo:
                answers[index] = await call(client)

        await asyncio.gather(*(worker(client) for client in self.clients[: len(calls)]))
        done = [answer for answer in answers if answer is not None]
        assert len(done) == len(calls)
        return done

    async def __aenter__(self) -> Crowd:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await asyncio.gather(*(client.aclose() for client in self.clients))


def retried_when_busy(call: Call, attempts: int = 10) -> Call:
    """``call``, made again after the answer's Retry-After (seconds) while it answers 429 busy (a
    worker shedding under a burst, as every client of the API retries), ``attempts`` calls at most."""

    async def again(client: httpx.AsyncClient) -> httpx.Response:
        for _ in range(attempts - 1):
            response = await call(client)
            if response.status_code != 429:
                return response
            await asyncio.sleep(float(response.headers.get("retry-after", "1")))
        return await call(client)

    return again


def auth(server: Server, user_id: str, admin: bool = False) -> dict[str, str]:
    """The authorization header of ``user_id``."""
    return {"authorization": f"Bearer {server.token(user_id, admin=admin)}"}


async def eventually_async(check: Callable[[], Awaitable[None]], timeout_s: float = 10.0) -> None:
    """Await ``check`` until it stops raising AssertionError; re-raise its last failure after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def fan_out(
    server: Server, crowd: Crowd, method: str, path: str, users: list[str], **kwargs: Any
) -> list[httpx.Response]:
    """``method path`` once per entry of ``users`` (as that user), all at once (as many at a time
    as the crowd has clients); answers in the order of ``users``."""

    def call(user: str) -> Call:
        return lambda client: client.request(method, path, headers=auth(server, user), **kwargs)

    return await crowd.run([call(user) for user in users])


async def balances(server: Server, crowd: Crowd, users: Iterable[str]) -> dict[str, int]:
    """Every user's balance, fetched concurrently."""
    users = list(users)
    got = await fan_out(server, crowd, "GET", "/v1/balance", users)
    return {u: ok(r)["balance_fen"] for u, r in zip(users, got, strict=True)}


async def ledger_async(server: Server, crowd: Crowd, user_id: str) -> list[dict[str, Any]]:
    """The user's whole bill (the first five pages are plenty here)."""
    items: list[dict[str, Any]] = []
    for page in range(1, 6):
        got = ok(await crowd[0].get("/v1/me/ledger", params={"page": page}, headers=auth(server, user_id)))["items"]
        if not got:
            break
        items += got
    return items


async def details_of(server: Server, crowd: Crowd, order_id: str, user_id: str) -> dict[str, Any]:
    """The packet's details as ``user_id`` sees them."""
    return ok(await crowd[0].get(f"/v1/packets/{order_id}", headers=auth(server, user_id)))  # type: ignore[no-any-return]
