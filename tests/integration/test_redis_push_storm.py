"""Storms against real push nodes (``hongbao serve --redis-url``) on a real redis-server: the
reconnect storm of a drained node (P-10) and a connection storm: the admission
rate (docs/architecture.md section 7) holds, the excess gets 503 + Retry-After before any Redis work, and the
node keeps answering HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing
import re
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

import httpx
import uvloop
from hongbao.server.push_client import PushClient, PushEvent

from tests.integration.redis_nodes import RedisNodes, admin, push, token
from tests.server.conftest import Server
from tests.ws.test_admission import _attempt, ws_counters
from tests.ws.wire import address, upgrade_request

CLIENTS, PROCS = 1000, 2  # P-10's fleet, in client processes (2 cores: the fleet is what costs)
RATE, BURST = 100, 10  # B's admission: new connections a second, and at once
OPEN = "ws_rate_per_s = 100000\nws_burst = 100000\n"  # A takes the fleet in at once


class _Roamer:
    """One user's PushClient, first on A; once a connection of it has been up, every reconnect goes
    to B (the load balancer no longer sends anyone to the drained A). Keeps why it retried and when
    it was back."""

    def __init__(self, uid: str, a_url: str, b_url: str) -> None:
        self.b_url, self.retries, self.events = b_url, list[tuple[str, float]](), list[PushEvent]()
        self.client = PushClient(
            a_url,
            lambda: token(uid),
            on_event=self.events.append,
            on_retry=self._retry,
            ping_interval_s=60.0,
            pong_timeout_s=30.0,
            backoff_base_s=0.5,
            backoff_cap_s=4.0,
            open_timeout_s=20.0,
        )

    def _retry(self, _attempt: int, delay_s: float, reason: str) -> None:
        self.retries.append((reason, delay_s))
        if self.client.stats.connects:
            self.client.url = self.b_url


async def _until(check: Callable[[], bool], timeout_s: float) -> float:
    """Poll ``check()`` every 50 ms until true (TimeoutError after ``timeout_s``); the monotonic time it held."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout_s} s")
        await asyncio.sleep(0.05)
    return time.monotonic()


async def _fleet(conn: Connection, a_url: str, b_url: str, uids: list[str]) -> None:
    """One client process's share of P-10, in step with the parent over ``conn``: answers "up"
    once all are connected to A; after "drained", the monotonic time all were back (on B); after
    "pushed", once each got its push: (retries by reason, 503 retries sooner than 1 s, the time).
    Then closes every client."""
    loop = asyncio.get_running_loop()
    roamers = [_Roamer(uid, a_url, b_url) for uid in uids]
    tasks = [asyncio.create_task(r.client.run()) for r in roamers]
    await _until(lambda: all(r.client.stats.connects == 1 for r in roamers), 60)
    conn.send("up")
    assert await loop.run_in_executor(None, conn.recv) == "drained"
    conn.send(await _until(lambda: all(r.client.stats.connects == 2 and r.client.url == b_url for r in roamers), 60))
    assert await loop.run_in_executor(None, conn.recv) == "pushed"
    got = await _until(lambda: all(len(r.events) == 1 for r in roamers), 30)
    reasons = Counter(reason for r in roamers for reason, _ in r.retries)
    early = sum(1 for r in roamers for reason, delay in r.retries if reason == "handshake 503" and delay < 1.0)
    conn.send((dict(reasons), early, got))
    await asyncio.gather(*(r.client.close() for r in roamers))
    for task in tasks:
        await task


def _fleet_main(conn: Connection, a_url: str, b_url: str, uids: list[str]) -> None:
    """The client process: ``_fleet`` on uvloop; a failure is reported on ``conn`` as "error: ..."."""
    try:
        uvloop.run(_fleet(conn, a_url, b_url, uids))
    except BaseException as exc:
        with contextlib.suppress(OSError):  # the parent may have gone
            conn.send(f"error: {exc!r}")
        raise


def _ws(server: Server) -> str:
    return server.url.replace("http://", "ws://") + "/v1/ws"


def _recv(conn: Connection, timeout_s: float) -> Any:
    assert conn.poll(timeout_s), f"no answer from a client process within {timeout_s} s"
    answer = conn.recv()
    assert not (isinstance(answer, str) and answer.startswith("error")), answer
    return answer


def test_reconnect_storm_after_drain(standalone_nodes: RedisNodes) -> None:
    """P-10: 1000 clients on A; A drains (close 1001); they reconnect to B (limit 100/s, burst 10)
    with backoff and full jitter: B's 101s stay within burst + rate x time over every span of
    its metrics, the excess got 503 + Retry-After (no 503 retried sooner than 1 s) and wrote
    nothing to Redis (one login per 101, by MONITOR), and every client is back on B, with a push
    reaching each, within 60 s."""
    [a] = standalone_nodes.start("a", extra_config=OPEN)
    [b] = standalone_nodes.start("b", extra_config=f"ws_rate_per_s = {RATE}\nws_burst = {BURST}\n")
    uids = [f"r{i}" for i in range(CLIENTS)]
    context = multiprocessing.get_context("spawn")
    pipes, procs, writes = [], [], Counter[str]()
    for part in range(PROCS):
        parent, child = context.Pipe()
        proc = context.Process(target=_fleet_main, args=(child, _ws(a), _ws(b), uids[part::PROCS]), daemon=True)
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    try:
        assert [_recv(pipe, 90) for pipe in pipes] == ["up"] * PROCS
        assert ws_counters(b) == (0, 0)
        settled = time.monotonic() + 30
        while (
            standalone_nodes.online() < CLIENTS
        ):  # A logs in after the 101: every login on A lands before MONITOR counts
            assert time.monotonic() < settled, f"{standalone_nodes.online()} of {CLIENTS} logins on A landed"
            time.sleep(0.05)
        with _monitor(standalone_nodes, writes):
            drained = time.monotonic()
            a.process.terminate()
            for pipe in pipes:
                pipe.send("drained")
            samples = []  # (request sent, answer read, (101s, 503s)) of B's /metrics
            while not all(pipe.poll() for pipe in pipes):
                assert time.monotonic() - drained < 60, "the fleet was not back on B within 60 s"
                sent = time.monotonic()
                counts = ws_counters(b)
                samples.append((sent, time.monotonic(), counts))
                time.sleep(0.5)
        back = max(_recv(pipe, 1) for pipe in pipes) - drained
        samples.append((time.monotonic(), time.monotonic(), ws_counters(b)))

        async def push_all() -> list[str]:
            async with admin(b) as pusher:
                gate = asyncio.Semaphore(20)

                async def one(uid: str) -> str:
                    async with gate:
                        return str((await push(pusher, user_id=uid, event="back", data=uid))["result"])

                return await asyncio.gather(*(one(uid) for uid in uids))

        assert Counter(uvloop.run(push_all())) == {"delivered_to_socket": CLIENTS}
        for pipe in pipes:
            pipe.send("pushed")
        reports = [_recv(pipe, 40) for pipe in pipes]
        reached = max(got for _, _, got in reports) - drained
    finally:
        for pipe in pipes:
            pipe.close()  # a fleet still waiting for a command ends (EOFError)
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    reasons: Counter[str] = sum((Counter(r) for r, _, _ in reports), Counter())
    accepted, rejected = samples[-1][2]
    worst = max(
        (later[2][0] - first[2][0]) - RATE * (later[1] - first[0])
        for i, first in enumerate(samples)
        for later in samples[i + 1 :]
    )
    per_second = max(
        later[2][0] - first[2][0]
        for i, first in enumerate(samples)
        for later in samples[i + 1 :]
        if later[1] - first[0] <= 1.2
    )
    print(
        f"P-10: {CLIENTS} back on B in {back:.1f} s, pushes reached all at {reached:.1f} s; B: {accepted} 101s, "
        f"{rejected} 503s; most 101s in a ~1 s span {per_second}; worst excess over rate x time {worst:.1f}; "
        f"retries {dict(reasons)}; Redis writes {dict(writes)}"
    )
    assert accepted == CLIENTS and procs and all(proc.exitcode == 0 for proc in procs)
    assert worst <= BURST + 2, samples  # GCRA: burst + rate x span, for every span between two reads
    assert rejected > CLIENTS and reasons["handshake 503"] == rejected
    assert writes["hset session"] == writes["sadd online"] == CLIENTS  # logins on B only: no 503 touched Redis
    assert set(reasons) == {"closed 1001", "handshake 503"} and reasons["closed 1001"] == CLIENTS
    assert sum(early for _, early, _ in reports) == 0  # each 503 carried a Retry-After the client honoured
    assert back < 60 and reached < 60


@contextlib.contextmanager
def _monitor(nodes: RedisNodes, into: Counter[str]) -> Iterator[None]:
    """Count the writes Redis executes meanwhile (``redis-cli MONITOR``) into ``into``, by command
    and key family (``"hset session"``, ``"sadd online"``, ...); an HSET of lastActiveTime alone (a
    heartbeat's refresh, which a slow run reaches) counts as ``"hset session refresh"``."""
    log = nodes.tmp_path / "monitor.log"
    with open(log, "wb") as out:
        watcher = subprocess.Popen(["redis-cli", "-p", str(nodes.target.ports[0]), "monitor"], stdout=out)
    try:
        time.sleep(0.3)  # MONITOR is on before the first write we count
        yield
    finally:
        time.sleep(0.3)
        watcher.terminate()
        watcher.wait()
    for command, key, field in re.findall(
        r'^\S+ \[[^]]*\] "(\w+)" "([a-z]+)[^"]*"(?: "([^"]*)")?', log.read_text(errors="replace"), re.MULTILINE
    ):
        if command.lower() in _WRITES:
            refresh = command.lower() == "hset" and field == "lastActiveTime"  # a heartbeat's refresh, not a login
            into[f"{command.lower()} {key}" + (" refresh" if refresh else "")] += 1


_WRITES = frozenset({"hset", "set", "sadd", "pexpire", "del", "hdel", "srem", "evalsha", "eval"})


async def _storm(server: Server, seconds: float, concurrency: int) -> tuple[Counter[int], float]:
    """Handshakes from ``concurrency`` connections at a time for ``seconds``: (statuses, seconds
    until the last answer)."""
    host, port = address(server)
    request = upgrade_request(server, token=token("storm"))
    statuses: Counter[int] = Counter()
    started = time.monotonic()

    async def worker() -> None:
        while time.monotonic() < started + seconds:
            try:
                statuses[await _attempt(host, port, request)] += 1
            except OSError:
                statuses[0] += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses, time.monotonic() - started


@contextlib.contextmanager
def _probing(server: Server, took: list[float]) -> Iterator[None]:
    """GET /healthz every 50 ms from a thread meanwhile: each answer's seconds into ``took``
    (infinity for an answer other than 200)."""
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            while not stop.wait(0.05):
                started = time.monotonic()
                ok = client.get("/healthz").status_code == 200
                took.append(time.monotonic() - started if ok else math.inf)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        yield
    finally:
        stop.set()
        prober.join()


def test_connection_storm_touches_redis_only_for_the_admitted(standalone_nodes: RedisNodes) -> None:
    """A 2.5 s storm of handshakes on a node at 20/s (burst 20): the excess gets 503, Redis sees
    exactly one login's writes per 101 (counted with MONITOR) -- no refused attempt touched
    it -- and /healthz answers throughout (median under 0.5 s, none over 3 s)."""
    [node] = standalone_nodes.start("a", extra_config="ws_rate_per_s = 20\nws_burst = 20\nmax_connections = 50000\n")
    writes: Counter[str] = Counter()
    probes: list[float] = []
    with _monitor(standalone_nodes, writes):
        with _probing(node, probes):
            statuses, elapsed = uvloop.run(_storm(node, 2.5, 200))
        time.sleep(1.0)  # the last admitted logins land (the hub logs in after the 101)
    accepted, rejected = ws_counters(node)
    probes.sort()
    print(
        f"storm: {dict(statuses)} in {elapsed:.2f} s; login writes {dict(writes)}; /healthz median "
        f"{probes[len(probes) // 2] * 1000:.0f} ms, slowest {probes[-1] * 1000:.0f} ms"
    )
    assert set(statuses) == {101, 503} and (statuses[101], statuses[503]) == (accepted, rejected)
    assert rejected > 10 * accepted and accepted <= 20 + 20 * elapsed * 1.05 + 2
    assert writes["hset session"] == writes["sadd online"] == writes["set route"] == accepted
    assert len(probes) >= 10 and probes[len(probes) // 2] < 0.5 and probes[-1] < 3.0
