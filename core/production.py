"""The production backend: money (packets, receipts, accounts, ledger, lists) in sharded
MySQL/MariaDB (DESIGN.md section 5) through one asyncmy pool per database, a queue (Redis Streams
when served), the service of hongbao.core.service on top, and the host-wide admission table of
the embedded backend.
"""

from __future__ import annotations

from dataclasses import dataclass

import hongbao_native

from hongbao.core.adapters.mysql_db import MysqlShards
from hongbao.core.adapters.mysql_ledger import MysqlLedgerStore
from hongbao.core.adapters.mysql_lists import MysqlProfileStore, MysqlUserListStore
from hongbao.core.adapters.mysql_packets import MysqlPacketStore
from hongbao.core.adapters.mysql_state import MysqlFlags, MysqlGroupStore, MysqlPreOrderStore, MysqlSequenceSource
from hongbao.core.adapters.redis_client import RedisClient
from hongbao.core.clock import Clock, SystemClock
from hongbao.core.ports import Draw, Queue
from hongbao.core.rules import Limits
from hongbao.core.service import PacketService, Ports


@dataclass(frozen=True, slots=True)
class Production:
    """A running production backend for one worker: the service and the MySQL pools."""

    service: PacketService
    shards: MysqlShards
    admission: hongbao_native.AdmissionTable
    redis: RedisClient | None = None

    async def aclose(self) -> None:
        """Close the MySQL pools and the Redis client (the admission table is unlinked by its creator)."""
        await self.shards.close()
        if self.redis is not None:
            await self.redis.aclose()


def mysql_ports(shards: MysqlShards, queue: Queue, clock: Clock) -> Ports:
    """Every port on MySQL/MariaDB except the queue (``queue``: Redis Streams in production)."""
    return Ports(MysqlPacketStore(shards), MysqlLedgerStore(shards), MysqlPreOrderStore(shards), MysqlGroupStore(shards),
                 MysqlSequenceSource(shards), queue, clock, MysqlUserListStore(shards), MysqlProfileStore(shards),
                 MysqlFlags(shards))


def open_mysql(shards: MysqlShards, admission: hongbao_native.AdmissionTable, queue: Queue, *, clock: Clock | None = None,
               limits: Limits | None = None, draw: Draw = hongbao_native.split_lucky, max_in_db: int = 2,
               redis: RedisClient | None = None) -> Production:
    """The service over ``shards`` (pools open on first use) and ``queue`` for one worker.

    ``max_in_db``: open transactions per packet in the database at once (K of DESIGN.md
    section 6); ``redis``: the client behind ``queue``, closed with the backend."""
    ports = mysql_ports(shards, queue, clock or SystemClock())
    service = PacketService(ports, limits or Limits(), admission, max_in_db=max_in_db, draw=draw)
    return Production(service, shards, admission, redis)
