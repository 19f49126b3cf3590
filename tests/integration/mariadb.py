"""The MariaDB of the integration tests (hongbao.bench.services.mariadb: loopback, a throwaway data
directory), for the whole session, and the fixtures over it: a migrated and emptied layout, and
production backends on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from itertools import count
from typing import TYPE_CHECKING, Any

import asyncmy
import hongbao_native
import pytest
from hongbao.bench.services.mariadb import PASSWORD, USER, MariaDb
from hongbao.core.adapters.mysql.db import MysqlShards, connect_args
from hongbao.core.adapters.mysql.schema import migrate
from hongbao.core.adapters.redis.client import Pipelines, redis_client
from hongbao.core.clock import ManualClock
from hongbao.core.sharding import Layout, parse_dsn
from hongbao.server.composition import Backend, production

if TYPE_CHECKING:
    from tests.integration.conftest import RedisTarget

__all__ = ["PASSWORD", "USER", "MariaDb", "backend", "make_backend", "mariadb", "migrated"]


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDb]:
    """A MariaDB server for the whole session (throwaway data directory, free loopback port)."""
    server = MariaDb(tmp_path_factory.mktemp("mariadb"))
    server.start()
    yield server
    server.stop()


async def _empty(dsn: str, layout: Layout) -> None:
    conn = await asyncmy.connect(**connect_args(parse_dsn(dsn)[0]))
    try:
        async with conn.cursor() as cur:
            for db in range(layout.n_dbs):
                name = layout.db_name(db)
                await cur.execute(
                    "SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema IN (%s, %s) "
                    "AND table_name <> 't_meta'",
                    (name, layout.cold_name(db)),
                )
                for schema, table in await cur.fetchall():
                    await cur.execute(f"DELETE FROM `{schema}`.`{table}`")
                await cur.execute(f"DELETE FROM `{name}`.t_meta WHERE name LIKE 'flag:%'")
    finally:
        conn.close()


def migrated(server: MariaDb, layout: Layout) -> Layout:
    """``layout`` migrated on ``server`` (idempotent) and emptied of every row, its cold
    databases too: a clean slate."""
    asyncio.run(migrate(server.dsn, layout))
    asyncio.run(_empty(server.dsn, layout))
    return layout


SERVICE_LAYOUT = Layout(2, 2, prefix="svc_")
#: The Redis reply and MySQL statement bounds of the service fixtures: they test behaviour, not
#: bounds (tests/integration/test_hung_dependency.py does), and a loaded 2-core CI machine may stall
#: a reply past the 250 ms and a statement past the 300 ms defaults.
TEST_REDIS_TIMEOUT_S = 1.0
TEST_MYSQL_TIMEOUT_S = 5.0


@pytest.fixture
def make_backend(
    mariadb: MariaDb,
    service_redis: RedisTarget,
    clock: ManualClock,
    admission: hongbao_native.AdmissionTable,
    loop_cleanups: list[Any],
) -> Callable[..., Backend]:
    """One more worker's production backend on the same MariaDB shards (2 x 2, emptied first),
    admission table and ``service_redis`` (emptied first; each backend its own queue consumer)."""
    layout = migrated(mariadb, SERVICE_LAYOUT)
    service_redis.flush()
    made = count()

    def make(**kwargs: Any) -> Backend:
        redis = Pipelines(
            redis_client(service_redis.url, cluster=service_redis.cluster, socket_timeout_s=TEST_REDIS_TIMEOUT_S)
        )
        backend = production(
            MysqlShards(mariadb.dsn, layout, pool_size=4, timeout_s=TEST_MYSQL_TIMEOUT_S),
            admission,
            redis,
            consumer=f"worker-{next(made)}",
            clock=clock,
            **kwargs,
        )
        loop_cleanups.append(backend.aclose)
        return backend

    return make


@pytest.fixture
def backend(make_backend: Callable[..., Backend]) -> Backend:
    """One worker's production backend on a clean slate."""
    return make_backend()
