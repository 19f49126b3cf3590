"""The two same-fleet measurements of the push benchmark, each run against hongbao, the websockets
baseline and the ceiling in the same run: server CPU per delivered broadcast message (fan-out),
and server memory per idle connection.

Fan-out: ``connections`` clients subscribe to one topic; one broadcast warms the path up (every
client must get it); then ``broadcasts`` broadcasts are sent back to back over HTTP (hongbao:
``POST /v1/admin/push`` with the topic; the others: ``GET /broadcast``), and the clients count
until each has them all. Server CPU (user + system, every thread of the server's processes) over
that span, divided by the messages the clients counted, is the cost per delivered message; the
server's write system calls over the same span per message beside it (``writes_per_message``:
1 for a server that writes each message to each connection on its own, less for one that joins
the messages that go to a connection together, as hongbao does with broadcasts that arrive while
it sends).

Memory: a warm-up of a few connections opened and closed, the server's RSS, then
``connections`` idle connections (each answered one ``hello`` and then sends nothing), the RSS
again: the difference per connection.

Before each reading of the server's CPU or memory, the server is left to finish the work of the
step before (``servers.wait_quiet``: closes, hongbao's logins and logouts).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from hongbao.bench.push.client import Target
from hongbao.bench.push.fleet import Fleet
from hongbao.bench.push.servers import rss_bytes, wait_quiet, write_calls
from hongbao.bench.services.process import Process
from hongbao.server.auth import mint
from hongbao.server.push_messages import EventBody

TOPIC = EVENT = "bench"
TEXT_BYTES = 100  # the broadcast text's length
WARM_CONNECTIONS = 200
EXPECT_TIMEOUT_S = 120.0


class Side(Protocol):
    """A server under test: its process, where clients connect, the token key, and how to
    broadcast one text to its subscribers."""

    name: str
    proc: Process
    target: Target
    secret: str

    def broadcast(self, http: httpx.Client, index: int) -> None:
        """Broadcast message ``index`` (0: the warm-up) to every subscriber."""
        ...


class HongbaoSide:
    """hongbao: broadcasts through ``POST /v1/admin/push`` to the topic; the event's data is
    padded so that the text each subscriber gets is ``TEXT_BYTES`` long (give or take the digits
    of the topic's offset)."""

    name = "hongbao"

    def __init__(self, proc: Process, secret: str) -> None:
        self.proc, self.secret = proc, secret
        port = int(proc.url.rsplit(":", 1)[1])
        self.target = Target("127.0.0.1", port, "/v1/ws?token=")
        self.admin = mint(secret, "bench_admin", admin=True)
        self.pad = ""
        self.text = ""  # the first measured message, as the subscribers get it

    def broadcast(self, http: httpx.Client, index: int) -> None:
        """Push ``index`` to the topic; the warm-up (0) also sizes the padding."""
        answer = http.post(
            self.proc.url + "/v1/admin/push",
            json={"topic": TOPIC, "event": EVENT, "data": self.pad},
            headers={"authorization": f"Bearer {self.admin}"},
        )
        answer.raise_for_status()
        if index == 0:
            offset, epoch = answer.json()["offset"] + 1, answer.json()["epoch"]
            self.pad = "x" * (TEXT_BYTES - len(EventBody(EVENT, "", TOPIC)(offset, epoch)))
            self.text = EventBody(EVENT, self.pad, TOPIC)(offset, epoch).decode()


class PlainSide:
    """The websockets server or the ceiling (``proc.name``): broadcasts the text of ``source``
    (hongbao's first measured message, so all send the same bytes: measure hongbao's fan-out
    first) through ``GET /broadcast``."""

    def __init__(self, proc: Process, secret: str, source: HongbaoSide) -> None:
        self.name, self.proc, self.secret, self.source = proc.name, proc, secret, source
        self.target = Target("127.0.0.1", int(proc.url.rsplit(":", 1)[1]), "/?token=")

    def broadcast(self, http: httpx.Client, index: int) -> None:
        """Broadcast the text to every subscriber (the same text every time)."""
        text = self.source.text or "x" * TEXT_BYTES
        http.get(self.proc.url + "/broadcast", params={"text": text}).raise_for_status()


@dataclass
class Measured:
    """One measurement of one side: its JSON ``values`` and what was wrong with it."""

    values: dict[str, Any]
    problems: list[str]


def _connect(fleet: Fleet, side: Side, users: list[str], topic: str | None, problems: list[str]) -> float:
    """Connect ``users``; the seconds it took (a shortfall goes to ``problems``)."""
    started = time.perf_counter()
    made, errors = fleet.connect(side.target, users, side.secret, topic)
    if made != len(users):
        problems.append(f"{side.name}: {len(users) - made} of {len(users)} connections failed, e.g. {errors}")
    return time.perf_counter() - started


def _quiet(side: Side, problems: list[str]) -> None:
    if not wait_quiet(side.proc):
        problems.append(f"{side.name}: the server stayed busy; the measure includes other work")


def _close(fleet: Fleet, side: Side, problems: list[str]) -> None:
    fleet.close()
    _quiet(side, problems)


def fanout(fleet: Fleet, side: Side, connections: int, broadcasts: int) -> Measured:
    """Server CPU per delivered message for ``broadcasts`` broadcasts to ``connections`` subscribers."""
    problems: list[str] = []
    users = [f"fan{i:06d}" for i in range(connections)]
    connect_s = _connect(fleet, side, users, TOPIC, problems)
    with httpx.Client(timeout=30) as http:
        side.broadcast(http, 0)
        warm = fleet.expect(1, EXPECT_TIMEOUT_S)
        if warm.least != 1:
            problems.append(f"{side.name}: the warm-up broadcast reached {warm.frames} of {connections} subscribers")
        fleet.reset()
        _quiet(side, problems)
        cpu_before, writes_before, started = side.proc.cpu_seconds(), write_calls(side.proc), time.perf_counter()
        for index in range(1, broadcasts + 1):
            side.broadcast(http, index)
        sent_s = time.perf_counter() - started
        counts = fleet.expect(broadcasts, EXPECT_TIMEOUT_S)
        wall_s, cpu_s = time.perf_counter() - started, side.proc.cpu_seconds() - cpu_before
        writes = write_calls(side.proc) - writes_before
    _close(fleet, side, problems)
    expected = connections * broadcasts
    if counts.frames != expected or counts.least != broadcasts or counts.most != broadcasts:
        problems.append(
            f"{side.name}: clients counted {counts.frames} messages (per connection {counts.least}.."
            f"{counts.most}), expected {expected}"
        )
    if counts.closes:
        problems.append(f"{side.name}: {counts.closes} connections were closed by the server")
    return Measured(
        {
            "server": side.name,
            "connections": connections,
            "broadcasts": broadcasts,
            "delivered": counts.frames,
            "payload_bytes_mean": round(counts.payload_bytes / max(1, counts.frames), 1),
            "server_cpu_s": round(cpu_s, 4),
            "cpu_us_per_message": round(cpu_s * 1e6 / max(1, counts.frames), 3),
            "writes_per_message": round(writes / max(1, counts.frames), 3),
            "messages_per_s": round(counts.frames / wall_s, 1),
            "send_s": round(sent_s, 3),
            "wall_s": round(wall_s, 3),
            "connect_s": round(connect_s, 3),
        },
        problems,
    )


def idle_memory(fleet: Fleet, side: Side, connections: int) -> Measured:
    """Server RSS growth per idle connection at ``connections`` connections."""
    problems: list[str] = []
    _connect(fleet, side, [f"warm{i:06d}" for i in range(min(WARM_CONNECTIONS, connections))], None, problems)
    _close(fleet, side, problems)
    before = rss_bytes(side.proc)
    connect_s = _connect(fleet, side, [f"idle{i:06d}" for i in range(connections)], None, problems)
    _quiet(side, problems)
    after = rss_bytes(side.proc)
    still = fleet.expect(0, 0).open
    _close(fleet, side, problems)
    if still != connections:
        problems.append(f"{side.name}: {connections - still} idle connections were closed before the measurement")
    return Measured(
        {
            "server": side.name,
            "connections": connections,
            "rss_before_bytes": before,
            "rss_after_bytes": after,
            "bytes_per_connection": round((after - before) / connections, 1),
            "kib_per_connection": round((after - before) / connections / 1024, 2),
            "connect_s": round(connect_s, 3),
        },
        problems,
    )
