"""The push channel's storage (hongbao.core.push_ports) for one worker, chosen from Settings.

Embedded (no ``redis_url``): the SQLite adapters on the push file (sqlite_push_db: ``push.db``,
apart from the money's, with its own write thread; shared by the workers of one host), group
pushes on that file's queue. With ``redis_url`` (``redis_cluster`` for a Redis Cluster): the
Redis adapters of core/adapters/redis_push*.py and the group queue on Redis Streams, so nodes on
several hosts share sessions, logs, topics and group pushes. This is the one place a deployment's
push storage is picked.

On Redis every push store and the group queue go through the circuit breaker of the worker's
Redis (core/adapters/redis_push_guard.py: the production backend's breaker when there is one --
the same server at the same ``redis_url`` -- else one of their own), so while Redis is down pushes
and logins are refused in microseconds and the outage is logged once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from hongbao.core.adapters.guarded_queue import GuardedQueue
from hongbao.core.adapters.redis_client import Pipelines, RedisClient, redis_client
from hongbao.core.adapters.redis_money import redis_breaker
from hongbao.core.adapters.redis_push import RedisSessionStore
from hongbao.core.adapters.redis_push_guard import (
    GuardedMessageLog,
    GuardedNodeDirectory,
    GuardedSessionStore,
    GuardedTopicLog,
)
from hongbao.core.adapters.redis_push_logs import MAX_BLOCK_S, Generation, RedisMessageLog, RedisTopicLog
from hongbao.core.adapters.redis_push_nodes import RedisNodeDirectory
from hongbao.core.adapters.redis_queue import RedisQueue
from hongbao.core.adapters.sqlite_db import SqliteDb
from hongbao.core.adapters.sqlite_push import SqliteMessageLog, SqliteNodeDirectory, SqliteSessionStore, SqliteTopicLog
from hongbao.core.adapters.sqlite_state import SqliteQueue
from hongbao.core.breaker import Breaker
from hongbao.core.ports import Queue
from hongbao.core.push_ports import MessageLog, NodeDirectory, SessionStore, TopicLog
from hongbao.server.config import Settings
from hongbao.server.node import node_id

#: Broadcasts kept in the Redis topic stream (nodes read them within milliseconds).
TOPIC_MAX_LEN = 10_000
#: How long /readyz waits for Redis to answer a PING (seconds).
READY_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class PushStores:
    """The four push ports one hub runs on, the group-push ``queue``, ``redis``: the client
    they share (the production backend's, or their own), ``breaker``: the one they go through, and
    ``reader``: the client of the topic log's blocking reads (all None when the push state is embedded)."""

    sessions: SessionStore
    nodes: NodeDirectory
    log: MessageLog
    topics: TopicLog
    queue: Queue
    redis: RedisClient | None = None
    breaker: Breaker | None = None
    reader: RedisClient | None = None

    async def aclose(self) -> None:
        """Close the client of the topic log's blocking reads (the shared one is the backend's to close)."""
        if self.reader is not None:
            await self.reader.aclose()

    def down(self) -> bool:
        """True while the push store's Redis is considered down (its breaker is open): new
        logins are refused before the upgrade. Never True when embedded."""
        return self.breaker is not None and self.breaker.is_open

    async def check(self) -> None:
        """Raise when the push store cannot be reached: Redis must answer a PING within
        ``READY_TIMEOUT_S`` (a dropped connection is retried first, so a blip passes), through
        the breaker (BreakerOpen at once while it is open, a trial call once per cooldown); the
        embedded push file is local and open."""
        if self.redis is not None and self.breaker is not None:
            redis = self.redis
            await asyncio.wait_for(self.breaker.call(redis.ping), READY_TIMEOUT_S)


def open_push_stores(
    settings: Settings,
    db: SqliteDb | None,
    counts: dict[str, int],
    breaker: Breaker | None = None,
    redis: Pipelines | None = None,
) -> PushStores:
    """The push stores of ``settings`` (``db``: the embedded backend's push file,
    ``Embedded.push_db``; None on the production backend, which requires ``redis_url``): sessions with
    ``push_session_ttl_s``, per-user logs bounded by ``push_log_max_messages`` and
    ``push_log_max_age_s``; on Redis when ``redis_url`` is set (no I/O here: the hub's start
    issues the first command, the node's heartbeat, alone), behind ``breaker`` (the production
    backend's Redis breaker; None: a new one counting in ``counts``, the worker's metrics events,
    where refused appends are counted too) and through ``redis`` (the production backend's
    commands; None: a client of their own)."""
    if settings.redis_url:
        timeout_s = settings.redis_timeout_ms / 1000
        pipes = redis or Pipelines(
            redis_client(settings.redis_url, cluster=settings.redis_cluster, socket_timeout_s=timeout_s)
        )
        reader = redis_client(
            settings.redis_url,
            cluster=settings.redis_cluster,
            socket_timeout_s=MAX_BLOCK_S + timeout_s,
            max_connections=4,
        )
        breaker = breaker or redis_breaker(counts)
        node = node_id(settings.node_name)
        generation = Generation()  # the message and topic logs' incarnation generation
        return PushStores(
            GuardedSessionStore(RedisSessionStore(pipes, settings.push_session_ttl_s), breaker),
            GuardedNodeDirectory(RedisNodeDirectory(pipes), breaker),
            GuardedMessageLog(
                RedisMessageLog(pipes, settings.push_log_max_messages, settings.push_log_max_age_s, generation),
                breaker,
                counts,
            ),
            GuardedTopicLog(RedisTopicLog(pipes, TOPIC_MAX_LEN, reader=reader, generation=generation), breaker),
            GuardedQueue(RedisQueue(pipes, node), breaker, counts),
            pipes.client,
            breaker,
            reader,
        )
    if db is None:
        raise ValueError("the push stores need redis_url when the backend has no embedded database")
    return PushStores(
        SqliteSessionStore(db, settings.push_session_ttl_s),
        SqliteNodeDirectory(db, settings.push_session_ttl_s),
        SqliteMessageLog(db, settings.push_log_max_messages, settings.push_log_max_age_s),
        SqliteTopicLog(db),
        SqliteQueue(db),
    )
