"""The production backend: money (packets, receipts, accounts, ledger, lists) in sharded
MySQL/MariaDB (DESIGN.md section 5) through one asyncmy pool per database, a queue (Redis Streams
when served), with one Redis client (its :class:`Pipelines`, shared by every Redis user of the
worker, push included, so the commands of one loop tick go out together): the order-id sequence and
pre-orders on Redis in front of their MySQL adapters (hongbao.core.adapters.redis_money) and the
grab filter's shared level (hongbao.core.adapters.redis_grab), all behind one circuit breaker, the
service of hongbao.core.service on top, and the host-wide admission table of the embedded backend.
"""

from __future__ import annotations

from dataclasses import dataclass

import hongbao_native
from hongbao.core.adapters.guarded_queue import GuardedQueue
from hongbao.core.adapters.mysql_db import MysqlShards
from hongbao.core.adapters.mysql_ledger import MysqlLedgerStore
from hongbao.core.adapters.mysql_lists import MysqlProfileStore, MysqlUserListStore
from hongbao.core.adapters.mysql_packets import MysqlPacketStore
from hongbao.core.adapters.mysql_state import MysqlFlags, MysqlGroupStore, MysqlPreOrderStore, MysqlSequenceSource
from hongbao.core.adapters.redis_client import Pipelines
from hongbao.core.adapters.redis_grab import DB_RATE_PER_S, RedisGrabState
from hongbao.core.adapters.redis_money import RedisPreOrderStore, RedisSequenceSource, redis_breaker
from hongbao.core.adapters.redis_views import RedisViews
from hongbao.core.breaker import Breaker
from hongbao.core.clock import Clock, SystemClock
from hongbao.core.ports import Draw, PreOrderStore, Queue, SequenceSource
from hongbao.core.rules import Limits
from hongbao.core.service import PacketService, Ports
from hongbao.core.view_cache import ViewCache


@dataclass(frozen=True, slots=True)
class Production:
    """A running production backend for one worker: the service and the MySQL pools; ``redis``:
    the worker's Redis commands (None without Redis) and ``breaker``: that Redis's circuit breaker,
    both shared with the push stores."""

    service: PacketService
    shards: MysqlShards
    admission: hongbao_native.AdmissionTable
    redis: Pipelines | None = None
    breaker: Breaker | None = None

    async def databases(self) -> dict[str, bool]:
        """Each shard database -> whether it answers a trivial query within the shards' bound."""
        return await self.shards.reachable()

    async def aclose(self) -> None:
        """Close the MySQL pools, the lean Redis connections and the Redis client (the admission
        table is unlinked by its creator)."""
        await self.shards.close()
        if self.redis is not None:
            self.redis.close()
            await self.redis.client.aclose()


def mysql_ports(
    shards: MysqlShards,
    queue: Queue,
    clock: Clock,
    redis: Pipelines | None = None,
    counts: dict[str, int] | None = None,
    grab_db_rate_per_s: float = DB_RATE_PER_S,
    breaker: Breaker | None = None,
) -> tuple[Ports, RedisGrabState | None]:
    """Every port on MySQL/MariaDB except the queue (``queue``: Redis Streams in production); with
    ``redis``, the sequence and pre-orders on Redis first, MySQL while it is down, and the grab
    filter's shared level, and ``queue`` (on that Redis) behind the same breaker (fallbacks and breaker
    openings counted in ``counts``; while Redis is down, at most ``grab_db_rate_per_s`` grab checks a
    second go to the DB; ``breaker``: Redis's, a new one when None)."""
    preorders: PreOrderStore = MysqlPreOrderStore(shards)
    sequence: SequenceSource = MysqlSequenceSource(shards)
    grab_state = None
    if redis is not None:
        counts = {} if counts is None else counts
        pipes, breaker = redis, breaker or redis_breaker(counts)
        queue = GuardedQueue(queue, breaker, counts)  # queue down at open: no retries per call, the reconciler credits
        preorders = RedisPreOrderStore(pipes, breaker, preorders, counts)
        sequence = RedisSequenceSource(pipes, breaker, shards, sequence, counts)
        grab_state = RedisGrabState(pipes, breaker, counts, db_rate_per_s=grab_db_rate_per_s)
    ports = Ports(
        MysqlPacketStore(shards),
        MysqlLedgerStore(shards),
        preorders,
        MysqlGroupStore(shards),
        sequence,
        queue,
        clock,
        MysqlUserListStore(shards),
        MysqlProfileStore(shards),
        MysqlFlags(shards),
    )
    return ports, grab_state


def open_mysql(
    shards: MysqlShards,
    admission: hongbao_native.AdmissionTable,
    queue: Queue,
    *,
    clock: Clock | None = None,
    limits: Limits | None = None,
    draw: Draw = hongbao_native.split_lucky,
    max_in_db: int = 2,
    redis: Pipelines | None = None,
    counts: dict[str, int] | None = None,
    grab_db_rate_per_s: float = DB_RATE_PER_S,
) -> Production:
    """The service over ``shards`` (pools open on first use) and ``queue`` for one worker.

    ``max_in_db``: open transactions per packet in the database at once (K of DESIGN.md
    section 6); ``redis``: the client behind ``queue``, the send path and grab (see :func:`mysql_ports`;
    ``counts``: where its fallbacks are counted, the worker's metrics events; ``grab_db_rate_per_s``),
    closed with the backend, and the read caches of details and lists (memory, then that Redis); the
    reconciler repairs the user lists from MySQL."""
    counts = {} if counts is None else counts
    breaker = None if redis is None else redis_breaker(counts)
    ports, grab_state = mysql_ports(shards, queue, clock or SystemClock(), redis, counts, grab_db_rate_per_s, breaker)
    views = None if redis is None or breaker is None else ViewCache(RedisViews(redis, breaker, counts), counts)
    packets = ports.packets
    assert isinstance(packets, MysqlPacketStore)
    service = PacketService(
        ports,
        limits or Limits(),
        admission,
        max_in_db=max_in_db,
        draw=draw,
        grab_state=grab_state,
        views=views,
        list_scans=packets,
    )
    return Production(service, shards, admission, redis, breaker)
