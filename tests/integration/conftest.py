"""Fixtures of the integration tests: real servers started here, once per session on first use,
on loopback with throwaway directories, and stopped at the end -- a standalone redis-server and a
3-master Redis Cluster and MariaDB (hongbao.bench.services: redis_servers, mariadb)
-- and push nodes on Redis (tests/integration/redis_nodes.py).

``redis_target`` parametrizes a test over both Redis modes and empties the data before each test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hongbao.bench.services import redis_servers
from hongbao.bench.services.redis_servers import (
    RedisTarget as RedisTarget,
)  # re-exported: some test modules import it from here

from tests.integration.mariadb import mariadb  # noqa: F401  (the MariaDB server fixture)
from tests.integration.redis_nodes import RedisNodes


@pytest.fixture(scope="session")
def redis_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisTarget]:
    """A standalone redis-server on a free loopback port, for the whole session."""
    with redis_servers.standalone(tmp_path_factory.mktemp("redis-standalone")) as target:
        yield target


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisTarget]:
    """A 3-master Redis Cluster (no replicas) on free loopback ports, for the whole session."""
    with redis_servers.cluster(tmp_path_factory.mktemp("redis-cluster")) as target:
        yield target


@pytest.fixture(params=["standalone", "cluster"])
def redis_target(request: pytest.FixtureRequest) -> RedisTarget:
    """A standalone Redis or the 3-master cluster (the test runs once on each), emptied first."""
    target: RedisTarget = request.getfixturevalue(f"redis_{request.param}")
    target.flush()
    return target


@pytest.fixture
def service_redis(redis_standalone: RedisTarget) -> RedisTarget:
    """The Redis of mariadb.make_backend: the standalone one (a test module may override it)."""
    return redis_standalone


@pytest.fixture
def redis_nodes(tmp_path: Path, redis_target: RedisTarget) -> Iterator[RedisNodes]:
    """Push nodes (server subprocesses) on ``redis_target`` (both modes); stopped after the test."""
    nodes = RedisNodes(tmp_path, redis_target)
    yield nodes
    nodes.finish()


@pytest.fixture
def standalone_nodes(tmp_path: Path, redis_standalone: RedisTarget) -> Iterator[RedisNodes]:
    """Push nodes on the standalone Redis only, emptied first; stopped after the test."""
    redis_standalone.flush()
    nodes = RedisNodes(tmp_path, redis_standalone)
    yield nodes
    nodes.finish()
