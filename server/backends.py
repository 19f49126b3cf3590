"""The money backend of one worker, chosen from Settings (the one place it is picked).

- ``embedded`` (default): SQLite in the data directory, nothing external (hongbao.core.embedded);
- ``production``: money in the sharded MySQL/MariaDB of ``mysql_dsn`` (``hongbao migrate`` first)
  and the queues (credits, user lists) on Redis Streams at ``redis_url`` (``redis_cluster`` for a
  Redis Cluster), hongbao.core.production. The order-id sequence and pre-orders go to Redis first
  and to their MySQL adapters while it is down (DESIGN.md section 10); groups are in MySQL.
"""

from __future__ import annotations

import logging

import hongbao_native
from asyncmy.errors import MySQLError
from hongbao.core.adapters.mysql_db import MysqlShards, parse_dsn
from hongbao.core.adapters.mysql_schema import NotMigrated, check_migrated
from hongbao.core.adapters.redis_client import Pipelines, redis_client
from hongbao.core.adapters.redis_queue import RedisQueue
from hongbao.core.clock import Clock
from hongbao.core.embedded import Embedded, open_embedded
from hongbao.core.faults import NO_FAULTS, Faults
from hongbao.core.production import Production, open_mysql
from hongbao.core.service import CreditingMode
from hongbao.server.config import Settings
from hongbao.server.node import node_id
from redis.exceptions import RedisError

log = logging.getLogger("hongbao.backend")
Backend = Embedded | Production
#: Server errors of refused credentials (ER_ACCESS_DENIED_ERROR, ER_DBACCESS_DENIED_ERROR): they do not fix themselves.
REFUSED = frozenset({1045, 1044})


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


async def preflight(settings: Settings) -> list[str]:
    """Before the workers start: what stops the node at once (raised as ValueError, one line
    saying what to do: shards not migrated, or migrated for another layout; credentials
    refused), and what it starts degraded with (returned, one warning each: MySQL or Redis
    unreachable now; the workers connect once they are back). Nothing to check when embedded."""
    if settings.backend != "production":
        return []
    warnings = []
    where = ", ".join(f"{s['host']}:{s['port']}" for s in parse_dsn(settings.mysql_dsn))
    try:
        await check_migrated(settings.mysql_dsn, settings.mysql_layout())
    except NotMigrated as exc:
        raise ValueError(str(exc)) from None
    except MySQLError as exc:
        if exc.args and exc.args[0] in REFUSED:
            raise ValueError(f"MySQL at {where} refused hongbao's credentials: {exc.args[-1]}") from None
        warnings.append(f"MySQL at {where} is unreachable ({exc.args[-1] if exc.args else exc}): starting degraded")
    except (OSError, RuntimeError) as exc:  # RuntimeError: asyncmy on a socket gone mid-handshake
        warnings.append(f"MySQL at {where} is unreachable ({exc}): starting degraded")
    client = redis_client(settings.redis_url, cluster=settings.redis_cluster, socket_timeout_s=1.0)
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        warnings.append(f"Redis at {settings.redis_url} is unreachable ({exc}): starting degraded")
    finally:
        await client.aclose()
    return warnings


async def open_backend(
    settings: Settings,
    admission: hongbao_native.AdmissionTable,
    clock: Clock,
    counts: dict[str, int] | None = None,
    faults: Faults = NO_FAULTS,
) -> Backend:
    """The worker's backend, with the configured crediting mode; ``counts``: the worker's metrics
    events, where the production backend counts its Redis fallbacks; ``faults``: the crash points
    armed (tests). No connection is made here: a database that is down serves degraded until it
    is back. Raises ValueError for missing settings."""
    check_production(settings)
    backend: Backend
    if settings.backend == "production":
        shards = MysqlShards(
            settings.mysql_dsn,
            settings.mysql_layout(),
            pool_size=settings.mysql_pool_size,
            timeout_s=settings.mysql_timeout_ms / 1000,
            transaction_timeout_s=settings.mysql_transaction_timeout_ms / 1000,
        )
        client = redis_client(
            settings.redis_url, cluster=settings.redis_cluster, socket_timeout_s=settings.redis_timeout_ms / 1000
        )
        try:
            await client.initialize()  # a cluster's topology, alone, before concurrent use
        except (RedisError, OSError) as exc:  # down: read on the first command once it is back
            log.warning("Redis is unreachable at start (%s): serving degraded until it is back", exc)
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
    backend.service.faults = faults
    backend.service.crediting_mode = CreditingMode(settings.crediting_mode)
    backend.service.realtime_threshold_fen = settings.realtime_threshold_fen
    return backend


async def close_backend(backend: Backend) -> None:
    """Close the backend's connections."""
    if isinstance(backend, Production):
        await backend.aclose()
    else:
        backend.close()
