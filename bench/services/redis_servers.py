"""Real Redis servers on loopback, for the tests (started as asyncpg's test base starts PostgreSQL),
the benchmarks and the chaos run: a standalone ``redis-server`` or a 3-master Redis Cluster
(``redis-cli --cluster create``), on free loopback ports with a throwaway directory. Nothing is
skipped: without redis-server a start raises ServiceError saying so (CI installs Debian's
``redis-server`` package, which brings redis-cli). The test fixtures are in tests/integration/conftest.py."""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import redis.cluster
from hongbao.bench.services.process import ServiceError, tied_to_parent
from hongbao.core.adapters.redis.client import RedisClient, redis_client

READY_TIMEOUT_S = 20.0
# A test or benchmark client's reply bound: generous, because a 2-core machine running the
# whole suite can stall a cluster reply past the product's 250 ms request-path bound; tests of
# that bound make their own client.
CLIENT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class RedisTarget:
    """A running Redis: ``url`` of one node, ``cluster`` mode, every primary's port and pid."""

    url: str
    cluster: bool
    ports: tuple[int, ...]
    pids: tuple[int, ...]

    def sync_client(self, port: int | None = None) -> redis.Redis:
        """A plain synchronous client of one node (the first when ``port`` is None)."""
        return redis.Redis(host="127.0.0.1", port=port or self.ports[0], socket_timeout=5)

    def sync_keys(self) -> redis.Redis | redis.cluster.RedisCluster:
        """A synchronous client that finds any key (a cluster client in cluster mode)."""
        if self.cluster:
            return redis.cluster.RedisCluster(host="127.0.0.1", port=self.ports[0], socket_timeout=5)
        return self.sync_client()

    @contextlib.asynccontextmanager
    async def connect(self) -> AsyncIterator[RedisClient]:
        """An asyncio client of this Redis made by the product's factory (topology read),
        replies bounded by CLIENT_TIMEOUT_S, closed afterwards."""
        client = redis_client(self.url, cluster=self.cluster, socket_timeout_s=CLIENT_TIMEOUT_S)
        try:
            await client.initialize()
            yield client
        finally:
            await client.aclose()

    def connected_clients(self) -> int:
        """The client connections open on all primaries together (INFO clients)."""
        total = 0
        for port in self.ports:
            with self.sync_client(port) as client:
                info: Any = client.info("clients")
                total += int(info["connected_clients"])
        return total

    def flush(self) -> None:
        """Delete every key on every primary."""
        for port in self.ports:
            with self.sync_client(port) as client:
                client.flushall()

    def cli(self, *args: str, port: int | None = None) -> str:
        """Run ``redis-cli`` against a node; returns its output."""
        return subprocess.run(
            ["redis-cli", "-p", str(port or self.ports[0]), *args],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout


def _require(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise ServiceError(
            f"{program} is not installed: the integration tests start a real Redis; "
            f"install Debian's redis-server package (apt-get install redis-server)"
        )
    return path


def _port_pair_free(port: int) -> bool:
    """``port`` and its cluster bus port (port + 10000) can both be bound on loopback."""
    for candidate in (port, port + 10000):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                return False
    return True


def free_ports(count: int) -> list[int]:
    """``count`` loopback ports in 20000..29999 whose bus ports are free too."""
    ports: list[int] = []
    while len(ports) < count:
        port = random.randrange(20000, 30000)
        if port not in ports and _port_pair_free(port):
            ports.append(port)
    return ports


def _start_server(directory: Path, port: int, *extra: str, tied: bool = False) -> subprocess.Popen[bytes]:
    directory = directory.resolve()  # redis-server enters --dir before it opens a relative --logfile
    directory.mkdir(parents=True, exist_ok=True)
    command = [
        _require("redis-server"),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(directory),
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--logfile",
        str(directory / "redis.log"),
        *extra,
    ]
    preexec = tied_to_parent if tied else None
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=preexec)


def wait_ready(port: int, process: subprocess.Popen[bytes], directory: Path) -> None:
    """Wait until the server on ``port`` answers PING (fail with its log if it exits or times out)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServiceError(
                f"redis-server on port {port} exited with {process.returncode}:\n"
                f"{(directory / 'redis.log').read_text(errors='replace')}"
            )
        try:
            with redis.Redis(host="127.0.0.1", port=port, socket_timeout=1) as client:
                if client.ping():
                    return
        except redis.ConnectionError:
            time.sleep(0.05)
    raise ServiceError(f"redis-server on port {port} did not answer within {READY_TIMEOUT_S} s")


def start_on(directory: Path, port: int, *, tied: bool = False) -> subprocess.Popen[bytes]:
    """A standalone redis-server of the test's own on ``port`` (files in ``directory``, no
    persistence: started again on the same port, it comes back empty), answering PING; ``tied``:
    started with ``process.tied_to_parent`` (it dies with its starter)."""
    process = _start_server(directory, port, tied=tied)
    wait_ready(port, process, directory)
    return process


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a server of :func:`start_on` (SIGTERM, SIGKILL after 10 s); a no-op once it has exited."""
    if process.poll() is None:
        _stop([process])


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def standalone(directory: Path) -> Iterator[RedisTarget]:
    """A standalone redis-server on a free loopback port, its files in ``directory``."""
    (port,) = free_ports(1)
    process = _start_server(directory, port)
    try:
        wait_ready(port, process, directory)
        yield RedisTarget(f"redis://127.0.0.1:{port}", False, (port,), (process.pid,))
    finally:
        _stop([process])


def cluster_node(root: Path, port: int) -> subprocess.Popen[bytes]:
    """A cluster-enabled redis-server on ``port``, its files and nodes.conf in ``root/<port>``: a
    node of :func:`cluster`, or one of them started again after a stop (it rejoins with its slots,
    empty). Not waited for (see :func:`wait_ready`)."""
    return _start_server(
        root / str(port),
        port,
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        str(root / str(port) / "nodes.conf"),
        "--cluster-node-timeout",
        "2000",
    )


@contextlib.contextmanager
def cluster(root: Path) -> Iterator[RedisTarget]:
    """A 3-master Redis Cluster (no replicas) on free loopback ports, its files under ``root``."""
    cli = _require("redis-cli")
    ports = free_ports(3)
    processes = [cluster_node(root, port) for port in ports]
    try:
        for port, process in zip(ports, processes, strict=True):
            wait_ready(port, process, root / str(port))
        create = subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{port}" for port in ports),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if create.returncode != 0:
            raise ServiceError(f"redis-cli --cluster create failed:\n{create.stdout}\n{create.stderr}")
        target = RedisTarget(f"redis://127.0.0.1:{ports[0]}", True, tuple(ports), tuple(p.pid for p in processes))
        wait_cluster_ok(target)
        yield target
    finally:
        _stop(processes)


def wait_cluster_ok(target: RedisTarget) -> None:
    """Wait until every primary of ``target`` reports cluster_state:ok (fail after READY_TIMEOUT_S)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        states = [target.cli("cluster", "info", port=port) for port in target.ports]
        if all("cluster_state:ok" in state for state in states):
            return
        time.sleep(0.1)
    raise ServiceError(f"the Redis Cluster on ports {target.ports} did not reach cluster_state:ok")
