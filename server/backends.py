"""The money backend of one worker, chosen from Settings (the one place it is picked).

- ``embedded`` (default): SQLite in the data directory, nothing external (hongbao.core.embedded);
- ``production``: money in the sharded MySQL/MariaDB of ``mysql_dsn`` (``hongbao migrate`` first)
  and the queues (credits, user lists) on Redis Streams at ``redis_url`` (``redis_cluster`` for a
  Redis Cluster), hongbao.core.production. The order-id sequence and pre-orders go to Redis first
  and to their MySQL adapters while it is down (DESIGN.md section 10); groups are in MySQL.
"""

from __future__ import annotations

import hongbao_native
from hongbao.core.adapters.mysql_db import MysqlShards, parse_dsn
from hongbao.core.adapters.redis_client import Pipelines, redis_client
from hongbao.core.adapters.redis_queue import RedisQueue
from hongbao.core.clock import Clock
from hongbao.core.embedded import Embedded, open_embedded
from hongbao.core.production import Production, open_mysql
from hongbao.core.service import CreditingMode
from hongbao.server.config import Settings
from hongbao.server.node import node_id

Backend = Embedded | Production


def check_production(settings: Settings) -> None:
    """Raise ValueError naming what the production backend is missing (a MySQL DSN, a Redis URL)
    or cannot use (a malformed DSN)."""
    if settings.backend != "production":
        return
    missing = [
        need
        for need, value in (
            ("--mysql-dsn mysql://user:pass@host:port (or HONGBAO_MYSQL_DSN)", settings.mysql_dsn),
            ("--redis-url redis://host:port (or HONGBAO_REDIS_URL)", settings.redis_url),
        )
        if not value
    ]
    if missing:
        raise ValueError(f"--backend production needs {' and '.join(missing)}, or the same in the TOML file")
    parse_dsn(settings.mysql_dsn)


async def open_backend(
    settings: Settings, admission: hongbao_native.AdmissionTable, clock: Clock, counts: dict[str, int] | None = None
) -> Backend:
    """The worker's backend, with the configured crediting mode; ``counts``: the worker's metrics
    events, where the production backend counts its Redis fallbacks. Raises ValueError for missing
    settings, Degraded when the production databases cannot be reached (or were not migrated)."""
    check_production(settings)
    backend: Backend
    if settings.backend == "production":
        shards = MysqlShards(settings.mysql_dsn, settings.mysql_layout(), pool_size=settings.mysql_pool_size)
        await shards.connect()
        client = redis_client(settings.redis_url, cluster=settings.redis_cluster)
        await client.initialize()  # a cluster's topology, alone, before concurrent use
        redis = Pipelines(client)  # the worker's one: money, caches, queues and push share its ticks
        queue = RedisQueue(redis, node_id(settings.node_name))
        backend = open_mysql(
            shards,
            admission,
            queue,
            clock=clock,
            limits=settings.limits,
            max_in_db=settings.max_in_db,
            redis=redis,
            counts=counts,
        )
    else:
        backend = open_embedded(
            settings.data_dir, admission, clock=clock, limits=settings.limits, max_in_db=settings.max_in_db
        )
    backend.service.crediting_mode = CreditingMode(settings.crediting_mode)
    backend.service.realtime_threshold_fen = settings.realtime_threshold_fen
    return backend


async def close_backend(backend: Backend) -> None:
    """Close the backend's connections."""
    if isinstance(backend, Production):
        await backend.aclose()
    else:
        backend.close()
