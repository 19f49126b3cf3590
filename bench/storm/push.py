"""WebSocket users in the storm: who is online, their push clients, and what they received.

A user is online with probability ``online_p`` and drops once (closes, stays away a moment,
reconnects resuming from its last offset and epoch) with probability ``drop_p``; both, and which
load process holds the connection, follow from a hash of the user id, so a replay (which knows
only user ids) puts the same users online. The clients are ``hongbao.server.push_client``'s
(the ``websockets`` library underneath): acks, dedupe by offset, resume, backoff. Each process
connects its online users before the load starts and keeps them through the load and the
storm's settlement (drain and audit), then until the pushes go quiet (``QUIET_S`` without a new
message, at most ``GRACE_S``), so a late push is counted with its latency, not missed.

Deliveries are kept as ``(event, order_id, user, wall time)``, once per key (after the client's
own dedupe, a key seen again is counted in ``duplicates``).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from typing import Any

from hongbao.bench.storm.scenario import Scenario
from hongbao.bench.storm.wire import Tokens
from hongbao.server.push_client import PushClient, PushClientError, PushEvent

Delivery = tuple[str, str, str, float]
CONNECT_PARALLEL = 100
CONNECT_TIMEOUT_S = 30.0
QUIET_S = 2.0
GRACE_S = 20.0


def _unit(tag: str, user: str) -> float:
    """A number in [0, 1) fixed by ``tag`` and ``user`` (BLAKE2b: CRC-32 would be affine in the
    input, and tags of one length would correlate)."""
    digest = hashlib.blake2b(f"{tag}:{user}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def is_online(user: str, scenario: Scenario) -> bool:
    """Whether ``user`` keeps a push connection during the storm."""
    return _unit("online", user) < scenario.online_p


def home(user: str, procs: int) -> int:
    """The load process that holds ``user``'s connection."""
    return int(_unit("home", user) * procs)


def drop_at(user: str, scenario: Scenario) -> float | None:
    """When (s after the start) ``user`` drops and reconnects, or None."""
    if _unit("drop", user) >= scenario.drop_p:
        return None
    return _unit("drop-at", user) * scenario.duration_s


def ws_url(url: str) -> str:
    """The push endpoint of the HTTP base ``url``: ``ws://host:port/v1/ws``."""
    return "ws" + url.rstrip("/").removeprefix("http") + "/v1/ws"


class PushUsers:
    """The push clients of one load process's online ``users``."""

    def __init__(self, url: str, users: list[str], tokens: Tokens, scenario: Scenario) -> None:
        self.url, self.users, self.tokens, self.scenario = ws_url(url), users, tokens, scenario
        self.clients: dict[str, PushClient] = {}  # the current client of each user
        self._all: list[PushClient] = []  # every client made, dropped ones too (for their stats)
        self.deliveries: list[Delivery] = []
        self.duplicates = self.reconnects = self.failures = 0
        self.errors: list[str] = []  # the first words of what went wrong in drops and closes
        self.resets: list[tuple[str, float]] = []  # (user, wall time) of every reset a client was told
        self._seen: set[tuple[str, str, str]] = set()
        self._last = time.monotonic()
        self._drops: list[asyncio.Task[None]] = []
        self._gate = asyncio.Semaphore(CONNECT_PARALLEL)

    def _client(self, user: str, offset: int | None = None, epoch: str | None = None) -> PushClient:
        def on_event(event: PushEvent) -> None:
            data = event.data if isinstance(event.data, dict) else {}
            key = (event.event, str(data.get("order_id", "")), user)
            self._last = time.monotonic()
            if key in self._seen:
                self.duplicates += 1
                return
            self._seen.add(key)
            self.deliveries.append((*key, time.time()))

        def on_reset() -> None:
            self.resets.append((user, time.time()))

        return PushClient(
            self.url,
            lambda: self.tokens.jwt(user),
            on_event=on_event,
            on_reset=on_reset,
            backoff_cap_s=self.scenario.push_backoff_cap_s,
            offset=offset,
            epoch=epoch,
            rng=random.Random(user),
        )

    async def _connect(
        self, user: str, gate: asyncio.Semaphore, offset: int | None = None, epoch: str | None = None
    ) -> None:
        async with gate:
            client = self.clients[user] = self._client(user, offset, epoch)
            self._all.append(client)
            await client.__aenter__()
            await client.wait_connected(CONNECT_TIMEOUT_S)

    async def connect(self) -> None:
        """Connect every user, ``CONNECT_PARALLEL`` handshakes at a time; raises TimeoutError or PushClientError."""
        await asyncio.gather(*(self._connect(user, self._gate) for user in self.users))

    def schedule_drops(self, t0: float) -> None:
        """Plan each dropping user's drop and reconnect against the monotonic start ``t0``."""
        for user in self.users:
            at = drop_at(user, self.scenario)
            if at is not None:
                self._drops.append(asyncio.create_task(self._drop(user, t0 + at, self._gate)))

    async def _drop(self, user: str, when: float, gate: asyncio.Semaphore) -> None:
        await asyncio.sleep(max(0.0, when - time.monotonic()))
        old = self.clients[user]
        await self._close(old)
        await asyncio.sleep(random.Random(user).uniform(0.2, 2.0))
        await self._connect(user, gate, old.last_offset, old.epoch)
        self.reconnects += 1

    async def _close(self, client: PushClient) -> None:
        try:
            await client.close()
        except PushClientError as exc:
            self.failures += 1
            self.errors.append(repr(exc))

    async def stop(self) -> None:
        """Wait for the pushes to go quiet (``QUIET_S``, at most ``GRACE_S``), then close every client."""
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and time.monotonic() - self._last < QUIET_S:
            await asyncio.sleep(0.1)
        for task in self._drops:
            task.cancel()
        for outcome in await asyncio.gather(*self._drops, return_exceptions=True):
            if isinstance(outcome, Exception):
                self.failures += 1
                self.errors.append(repr(outcome))
        await asyncio.gather(*(self._close(client) for client in self.clients.values()))

    def summary(self) -> dict[str, Any]:
        """Counts and deliveries, as plain JSON values."""
        stats = [client.stats for client in self._all]
        return {
            "online": len(self.users),
            "reconnects": self.reconnects,
            "failures": self.failures,
            "errors": self.errors[:5],
            "duplicates": self.duplicates + sum(s.duplicates for s in stats),
            "resets": sum(s.resets for s in stats),
            "reset_times": self.resets,
            "deliveries": self.deliveries,
        }
