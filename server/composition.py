"""The composition root: the one place that turns settings into a running backend and knows which
adapter serves which port (as asyncpg's connect_utils turns arguments into a connection and the
connection never picks an implementation). Nothing else in the product imports a concrete adapter.

Two backends, side by side:

- ``embedded`` (the default): money, pre-orders, groups, sequence blocks, flags and queues in one
  SQLite file (``data_dir/hongbao.db``), the push channel in another (``push.db``, its own writer),
  or on Redis when ``redis_url`` is set; the per-packet admission table in /dev/shm. Nothing external.
- ``production``: money (packets, receipts, accounts, ledger, lists), groups and flags in sharded
  MySQL/MariaDB (``mysql_dsn``, migrated by ``hongbao migrate``); the order-id sequence, pre-orders,
  the grab filter's shared level and the read views on Redis (``redis_url``, ``redis_cluster``) in
  front of their MySQL fallbacks; the queues, the non-critical store (greetings, profiles: no
  fallback but their defaults) and the push stores on Redis. One Redis client (its
  ``Pipelines``: the commands of one loop tick go out together) and one circuit breaker per worker
  serve money and push alike, so one outage opens one breaker (docs/architecture.md section 10).

Also here: the checks before the workers fork (``preflight``, ``prepare``), the money audit of the
backend the settings name (``auditor``) and the schema commands (``migrate``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import hongbao_native
from asyncmy.errors import MySQLError
from hongbao.core.adapters.mysql.audit import audit_mysql
from hongbao.core.adapters.mysql.cold import move_cold
from hongbao.core.adapters.mysql.db import MysqlShards
from hongbao.core.adapters.mysql.ledger import MysqlLedgerStore
from hongbao.core.adapters.mysql.lists import MysqlUserListStore
from hongbao.core.adapters.mysql.packets import MysqlPacketStore
from hongbao.core.adapters.mysql.schema import MigrateReport, NotMigrated, check_migrated
from hongbao.core.adapters.mysql.schema import migrate as migrate_mysql
from hongbao.core.adapters.mysql.state import MysqlFlags, MysqlGroupStore, MysqlPreOrderStore, MysqlSequenceSource
from hongbao.core.adapters.redis.client import Pipelines, RedisClient, redis_client
from hongbao.core.adapters.redis.fleet import RedisNodeRegistry
from hongbao.core.adapters.redis.flow import RedisSendRate
from hongbao.core.adapters.redis.grab import DB_RATE_PER_S, RedisGrabState
from hongbao.core.adapters.redis.guard import (
    GuardedMessageLog,
    GuardedNodeDirectory,
    GuardedQueue,
    GuardedSessionStore,
    GuardedTopicLog,
)
from hongbao.core.adapters.redis.members import RedisMembershipFeed
from hongbao.core.adapters.redis.profiles import RedisProfileStore
from hongbao.core.adapters.redis.push import RedisSessionStore
from hongbao.core.adapters.redis.push_logs import MAX_BLOCK_S, Generation, RedisMessageLog, RedisTopicLog
from hongbao.core.adapters.redis.push_nodes import RedisNodeDirectory
from hongbao.core.adapters.redis.queue import RedisQueue
from hongbao.core.adapters.redis.state import (
    RedisExpiryIndex,
    RedisFlags,
    RedisLeases,
    RedisPreOrderStore,
    RedisSequenceSource,
    redis_breaker,
)
from hongbao.core.adapters.redis.views import RedisViews
from hongbao.core.adapters.sqlite.audit import audit_sqlite
from hongbao.core.adapters.sqlite.db import DB_FILE, SqliteDb
from hongbao.core.adapters.sqlite.ledger import SqliteLedgerStore
from hongbao.core.adapters.sqlite.lists import SqliteUserListStore
from hongbao.core.adapters.sqlite.packets import SqlitePacketStore
from hongbao.core.adapters.sqlite.profiles import SqliteProfileStore
from hongbao.core.adapters.sqlite.push import SqliteMessageLog, SqliteNodeDirectory, SqliteSessionStore, SqliteTopicLog
from hongbao.core.adapters.sqlite.push_db import PUSH_DB_FILE, open_push_db
from hongbao.core.adapters.sqlite.state import (
    SqliteExpiryIndex,
    SqliteFlags,
    SqliteGroupStore,
    SqliteLeases,
    SqlitePreOrderStore,
    SqliteQueue,
    SqliteSequenceSource,
)
from hongbao.core.audit import AuditReport
from hongbao.core.breaker import Breaker
from hongbao.core.clock import Clock, SystemClock
from hongbao.core.faults import NO_FAULTS, Faults
from hongbao.core.loop_lag import LoopLag
from hongbao.core.membership import CachedGroups
from hongbao.core.ports import Draw, Leases, NodeRegistry, Ports, PreOrderStore, Queue, SequenceSource
from hongbao.core.push_ports import PushStores
from hongbao.core.redact import redact
from hongbao.core.rules import Limits
from hongbao.core.services import Services
from hongbao.core.services.crediting import CreditingMode
from hongbao.core.sharding import Layout, parse_dsn
from hongbao.core.view_cache import ViewCache
from hongbao.server.auth import embedded_secret
from hongbao.server.config import Settings
from hongbao.server.node import node_id
from redis.exceptions import RedisError

log = logging.getLogger("hongbao.backend")
ADMISSION_SLOTS = 65536
#: Broadcasts kept in the Redis topic stream (nodes read them within milliseconds).
TOPIC_MAX_LEN = 10_000
#: Server errors of refused credentials (ER_ACCESS_DENIED_ERROR, ER_DBACCESS_DENIED_ERROR): they do not fix themselves.
REFUSED = frozenset({1045, 1044})
#: The settings of a fleet's regions (docs/architecture.md section 9): production only.
REGIONAL_SETTINGS = ("home_mysql_dsn", "home_redis_url", "region_entry_urls")
#: The money audit of one backend: drained (the reconciler has run) -> the report.
Auditor = Callable[[bool], AuditReport]


@dataclass(frozen=True, slots=True)
class Home:
    """The home region's stores of user-dimension data, for a node of another region
    (docs/architecture.md section 9): its MySQL ``shards`` (accounts, ledger, lists, groups,
    flags) and its Redis (``redis``, behind ``breaker``: push, profiles, read caches, the
    membership feed)."""

    shards: MysqlShards
    redis: Pipelines
    breaker: Breaker


@dataclass(frozen=True, slots=True)
class Backend:
    """One worker's running backend: the ``services`` over its ports, the host's ``admission``
    table, what it runs on (``sqlite``: the embedded money file; ``shards``: the production MySQL
    pools; ``redis``/``breaker``: the worker's Redis commands and their circuit breaker, shared
    with the push stores), the ``push`` stores (None when built without a push channel, as the
    service tests are), the ``leases`` of the periodic jobs (on Redis in production; every
    worker holds every one embedded) and the jobs each worker runs every FOLLOW_S (``follow``:
    the membership feed of the production group cache, hongbao.core.membership); ``nodes``: the
    region's node registry on Redis (production: the packets' owners, server/fleet.py), None
    embedded (one node: everything is local)."""

    services: Services
    admission: hongbao_native.AdmissionTable
    sqlite: SqliteDb | None = None
    shards: MysqlShards | None = None
    redis: Pipelines | None = None
    breaker: Breaker | None = None
    push: PushStores | None = None
    leases: Leases = field(default_factory=SqliteLeases)
    follow: tuple[Callable[[], Awaitable[None]], ...] = ()
    nodes: NodeRegistry | None = None
    home: Home | None = None

    async def databases(self) -> dict[str, bool]:
        """Each money database -> whether it answers (a shard: a trivial query within the
        shards' bound, the home region's named ``home/<name>``; the embedded file: always)."""
        if self.shards is None:
            return {DB_FILE: True}
        found = await self.shards.reachable()
        if self.home is not None:
            found.update({f"home/{name}": up for name, up in (await self.home.shards.reachable()).items()})
        return found

    def breakers(self) -> dict[str, bool]:
        """Each dependency behind a circuit breaker -> whether its breaker is open now: ``redis``
        (the worker's one Redis client, of the money backend or the push stores) and
        ``mysql/<database name>`` for each shard database, with ``redis_home`` and
        ``mysql/home/<name>`` for the home region's; none on the embedded backend without Redis."""
        states: dict[str, bool] = {}
        breaker = self.breaker if self.breaker is not None else self.push.breaker if self.push is not None else None
        if breaker is not None:
            states[breaker.name] = breaker.is_open
        if self.shards is not None:
            states.update({f"mysql/{name}": down for name, down in self.shards.breakers().items()})
        if self.home is not None:
            states[self.home.breaker.name] = self.home.breaker.is_open
            states.update({f"mysql/home/{name}": down for name, down in self.home.shards.breakers().items()})
        return states

    async def aclose(self) -> None:
        """Wait for the opens' follow-ups and realtime credits under way (Opening.settle), then
        close the push stores' own connections, the MySQL pools, the Redis client and the money
        file (the admission table is unlinked by its creator, the master)."""
        await self.services.opening.settle()
        if self.push is not None:
            await self.push.aclose()
        if self.shards is not None:
            await self.shards.close()
        for redis in (self.redis, None if self.home is None else self.home.redis):
            if redis is not None:
                redis.close()
                await redis.client.aclose()
        if self.home is not None:
            await self.home.shards.close()
        if self.sqlite is not None:
            self.sqlite.close()


def create_admission(name: str) -> hongbao_native.AdmissionTable:
    """Create the host-wide admission table ``name`` (the master does this once, before forking)."""
    return hongbao_native.AdmissionTable.create(name, ADMISSION_SLOTS)


# --- the embedded backend -----------------------------------------------------------------------


def embedded(
    data_dir: Path,
    admission: hongbao_native.AdmissionTable,
    *,
    clock: Clock | None = None,
    limits: Limits | None = None,
    draw: Draw = hongbao_native.split_lucky,
    max_in_db: int = 2,
    faults: Faults = NO_FAULTS,
    region: int = 1,
) -> Backend:
    """The embedded backend in ``data_dir`` (created if needed) for one worker, without a push
    channel (``open_backend`` adds it): ``admission``, the host's table; ``max_in_db``, open
    transactions per packet in the database at once (K of docs/architecture.md section 6);
    ``region``, the order ids' (1 north, 2 south)."""
    db = SqliteDb(data_dir / DB_FILE)
    ports = Ports(
        SqlitePacketStore(db),
        SqliteLedgerStore(db),
        SqlitePreOrderStore(db),
        SqliteGroupStore(db),
        SqliteSequenceSource(db),
        SqliteQueue(db),
        clock or SystemClock(),
        SqliteUserListStore(db),
        SqliteProfileStore(db),
        SqliteFlags(db),
        SqliteExpiryIndex(),
    )
    services = Services.build(
        ports, limits or Limits(), admission, max_in_db=max_in_db, draw=draw, region=region, faults=faults
    )
    return Backend(services, admission, sqlite=db)


# --- the production backend ---------------------------------------------------------------------


def production(
    shards: MysqlShards,
    admission: hongbao_native.AdmissionTable,
    redis: Pipelines,
    *,
    consumer: str,
    clock: Clock | None = None,
    limits: Limits | None = None,
    draw: Draw = hongbao_native.split_lucky,
    max_in_db: int = 2,
    counts: dict[str, int] | None = None,
    grab_db_rate_per_s: float = DB_RATE_PER_S,
    faults: Faults = NO_FAULTS,
    region: int = 1,
    home: tuple[MysqlShards, Pipelines] | None = None,
    lag: LoopLag | None = None,
) -> Backend:
    """The production backend over ``shards`` (pools open on first use) and the Redis of
    ``redis`` for one worker, without a push channel (``open_backend`` adds it): the queue on
    Redis Streams as ``consumer``; the sequence and pre-orders on Redis first, MySQL while it is
    down; the grab filter's shared level (while Redis is down at most ``grab_db_rate_per_s``
    grab checks a second go to the DB), the read views and the non-critical store (greetings kept
    the packets' expiry and a day) on Redis; everything Redis behind one
    breaker (fallbacks and openings counted in ``counts``, the worker's metrics events). Both the
    pools and ``redis`` are closed with the backend. ``region``: the node's (1 north, 2 south).

    ``home``: for a node outside the home region (docs/architecture.md section 9), the home
    region's MySQL shards and Redis, which then hold the user-dimension data (accounts, ledger,
    lists, groups, flags; profiles, read caches, the membership feed and, through
    ``open_backend``, push), behind a breaker of their own (``redis_home``); ``shards`` and
    ``redis`` keep the order dimension (packets and receipts, pre-orders, the sequence, the
    queue, the expiry index, the grab state, the job leases). ``lag``: the worker's loop lag, which
    tells the Redis breakers an overloaded worker from a silent Redis (hongbao.core.breaker)."""
    counts = {} if counts is None else counts
    limits = limits or Limits()
    breaker = redis_breaker(counts, lag=lag)
    user_shards, user_redis, user_breaker = shards, redis, breaker
    if home is not None:
        user_shards, user_redis = home
        user_breaker = redis_breaker(counts, name="redis_home", lag=lag)
    preorders: PreOrderStore = RedisPreOrderStore(redis, breaker, MysqlPreOrderStore(shards), counts)
    sequence: SequenceSource = RedisSequenceSource(redis, breaker, shards, MysqlSequenceSource(shards), counts)
    queue: Queue = GuardedQueue(RedisQueue(redis, consumer), breaker, counts)  # down at open: the reconciler credits
    packets = MysqlPacketStore(shards, ledger_here=user_shards is shards)
    clock = clock or SystemClock()
    shared_views = RedisViews(user_redis, user_breaker, counts)
    groups = CachedGroups(
        MysqlGroupStore(user_shards), shared_views, RedisMembershipFeed(user_redis, user_breaker), clock, counts
    )
    ports = Ports(
        packets,
        MysqlLedgerStore(user_shards),
        preorders,
        groups,
        sequence,
        queue,
        clock,
        MysqlUserListStore(user_shards),
        RedisProfileStore(user_redis, user_breaker, counts, expiry_ms=limits.expiry_ms),
        RedisFlags(user_redis, user_breaker, MysqlFlags(user_shards), counts),
        RedisExpiryIndex(redis, breaker, counts),
    )
    services = Services.build(
        ports,
        limits,
        admission,
        max_in_db=max_in_db,
        draw=draw,
        region=region,
        grab_state=RedisGrabState(redis, breaker, counts, db_rate_per_s=grab_db_rate_per_s),
        views=ViewCache(shared_views, counts),
        list_scans=packets,
        faults=faults,
    )
    leases = RedisLeases(redis, breaker, consumer, counts)
    return Backend(
        services,
        admission,
        shards=shards,
        redis=redis,
        breaker=breaker,
        leases=leases,
        follow=(groups.follow,),
        home=None if home is None else Home(user_shards, user_redis, user_breaker),
    )


# --- the push stores ------------------------------------------------------------------------------


def push_stores(
    settings: Settings,
    counts: dict[str, int],
    shared: tuple[Pipelines, Breaker] | None = None,
    embedded_queue: Queue | None = None,
) -> PushStores:
    """The push stores of ``settings``: on Redis when ``redis_url`` is set (through ``shared``,
    the production backend's commands and breaker, or a client and breaker of their own beside
    an embedded backend; refused appends counted in ``counts``), else on the push file of the
    data directory (``push.db``, its own write thread). Sessions last ``push_session_ttl_s``;
    per-user logs hold ``push_log_max_messages`` for ``push_log_max_age_s``. No I/O here: the
    hub's start issues the first command, the node's heartbeat.

    The group-push queue stays beside the groups, since its consumer reads them: on the shared
    Redis in production (every node reads the same groups), on the push file embedded, and on
    ``embedded_queue`` (the embedded backend's own) for Redis beside an embedded backend, whose
    groups no other node on that Redis holds. Raises ValueError when that case has no
    ``embedded_queue``."""
    if settings.redis_url:
        timeout_s = settings.redis_timeout_ms / 1000
        own: Pipelines | None = None  # a client of their own, beside an embedded backend
        if shared is not None:
            pipes, breaker = shared
            groups_queue: Queue = GuardedQueue(RedisQueue(pipes, node_id(settings.node_name)), breaker, counts)
        elif embedded_queue is None:
            raise ValueError("push stores on Redis beside an embedded backend need its queue for group pushes")
        else:
            groups_queue = embedded_queue
            own = pipes = Pipelines(
                redis_client(settings.redis_url, cluster=settings.redis_cluster, socket_timeout_s=timeout_s)
            )
            breaker = redis_breaker(counts)
        reader = redis_client(
            settings.redis_url,
            cluster=settings.redis_cluster,
            socket_timeout_s=MAX_BLOCK_S + timeout_s,
            max_connections=4,
        )
        generation = Generation()  # the message and topic logs' incarnation generation

        async def close() -> None:
            await reader.aclose()
            if own is not None:
                own.close()
                await own.client.aclose()

        return PushStores(
            GuardedSessionStore(RedisSessionStore(pipes, settings.push_session_ttl_s), breaker),
            GuardedNodeDirectory(RedisNodeDirectory(pipes), breaker),
            GuardedMessageLog(
                RedisMessageLog(pipes, settings.push_log_max_messages, settings.push_log_max_age_s, generation),
                breaker,
                counts,
            ),
            GuardedTopicLog(RedisTopicLog(pipes, TOPIC_MAX_LEN, reader=reader, generation=generation), breaker),
            groups_queue,
            breaker,
            pipes.client.ping,
            (close,),
        )
    db = open_push_db(settings.data_dir)

    async def close_file() -> None:
        db.close()

    return PushStores(
        SqliteSessionStore(db, settings.push_session_ttl_s),
        SqliteNodeDirectory(db, settings.push_session_ttl_s),
        SqliteMessageLog(db, settings.push_log_max_messages, settings.push_log_max_age_s),
        SqliteTopicLog(db),
        SqliteQueue(db),
        closers=(close_file,),
    )


# --- from settings ----------------------------------------------------------------------------------


def check_production(settings: Settings) -> None:
    """Raise ValueError naming what the production backend is missing (a MySQL DSN, a Redis URL)
    or cannot use (a malformed DSN), and the settings of a fleet's regions on another backend."""
    if settings.backend != "production":
        regional = [name for name in REGIONAL_SETTINGS if getattr(settings, name)]
        if regional:
            raise ValueError(f"{', '.join(regional)}: the regions of a fleet need --backend production")
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
    if settings.home_mysql_dsn:
        parse_dsn(settings.home_mysql_dsn)


async def open_backend(
    settings: Settings,
    admission: hongbao_native.AdmissionTable,
    clock: Clock,
    counts: dict[str, int] | None = None,
    faults: Faults = NO_FAULTS,
    send_limiter: hongbao_native.RateLimiter | None = None,
    lag: LoopLag | None = None,
) -> Backend:
    """The worker's backend of ``settings``, with its push stores, the configured crediting
    mode, its region and its send rates (``send_limiter``: the host's, made by the master; the
    region's on Redis in production); ``counts``: the worker's metrics events (fallbacks, breaker
    openings, refused appends); ``faults``: the crash points armed (tests); ``lag``: the worker's
    loop lag, which tells the MySQL bounds and the Redis breakers an overloaded worker from a
    frozen server (see MysqlShards, Breaker). No connection is made
    here: a database that is down serves degraded until it is back. Raises ValueError for
    missing settings."""
    check_production(settings)
    counts = {} if counts is None else counts
    if settings.backend == "production":
        home = None
        if settings.home_mysql_dsn or settings.home_redis_url:  # a node outside the home region
            home_redis = await _redis_of(settings, settings.home_redis_url or settings.redis_url)
            home = (_shards_of(settings, settings.home_mysql_dsn or settings.mysql_dsn, lag), Pipelines(home_redis))
        backend = production(
            _shards_of(settings, settings.mysql_dsn, lag),
            admission,
            Pipelines(await _redis_of(settings, settings.redis_url)),  # money, caches, queues, push share its ticks
            consumer=node_id(settings.node_name),
            clock=clock,
            limits=settings.limits,
            max_in_db=settings.max_in_db,
            counts=counts,
            faults=faults,
            region=settings.region,
            home=home,
            lag=lag,
        )
    else:
        backend = embedded(
            settings.data_dir,
            admission,
            clock=clock,
            limits=settings.limits,
            max_in_db=settings.max_in_db,
            faults=faults,
            region=settings.region,
        )
    backend.services.crediting.mode = CreditingMode(settings.crediting_mode)
    backend.services.crediting.realtime_threshold_fen = settings.realtime_threshold_fen
    shared = None if backend.redis is None or backend.breaker is None else (backend.redis, backend.breaker)
    user_side = shared if backend.home is None else (backend.home.redis, backend.home.breaker)
    sending = backend.services.sending
    sending.node_rate = send_limiter
    backend.services.grabbing.ok_per_share = settings.grab_ok_per_share
    if shared is not None and settings.backend == "production":
        sending.region_rate = RedisSendRate(
            *shared, counts, settings.region, settings.region_send_rate_per_s, settings.region_send_burst
        )
    nodes = None if shared is None or settings.backend != "production" else RedisNodeRegistry(*shared, settings.region)
    return dataclasses.replace(
        backend, push=push_stores(settings, counts, user_side, backend.services.ports.queue), nodes=nodes
    )


def _shards_of(settings: Settings, dsn: str, lag: LoopLag | None = None) -> MysqlShards:
    """The MySQL shards of ``settings``'s layout on ``dsn`` (pools open on first use), ``lag``
    the worker's loop lag (MysqlShards)."""
    return MysqlShards(
        dsn,
        settings.mysql_layout(),
        pool_size=settings.mysql_pool_size,
        timeout_s=settings.mysql_timeout_ms / 1000,
        transaction_timeout_s=settings.mysql_transaction_timeout_ms / 1000,
        lag=lag,
    )


async def _redis_of(settings: Settings, url: str) -> RedisClient:
    """A Redis client of ``url`` with ``settings``'s bound and cluster mode, its topology read now
    when it answers (a cluster's, alone, before concurrent use); when it does not, on its first
    command once it is back (logged: the worker serves degraded meanwhile)."""
    client = redis_client(url, cluster=settings.redis_cluster, socket_timeout_s=settings.redis_timeout_ms / 1000)
    try:
        await client.initialize()
    except (RedisError, OSError) as exc:
        log.warning("Redis is unreachable at start (%s): serving degraded until it is back", exc)
    return client


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
        warnings.append(f"Redis at {redact(settings.redis_url)} is unreachable ({exc}): starting degraded")
    finally:
        await client.aclose()
    return warnings


def prepare(settings: Settings, metrics_dir: str) -> None:
    """Before any fork: the data directory, the key file (the token key, or the internal
    forwards' key derived from it), the embedded files and their schemas (money and push), and
    a fresh ``metrics_dir`` under the data directory."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if not (settings.jwt_secret or settings.jwt_public_key_file) or not settings.internal_secret:
        embedded_secret(settings.data_dir)
    SqliteDb(settings.data_dir / DB_FILE).close()
    open_push_db(settings.data_dir).close()
    shutil.rmtree(settings.data_dir / metrics_dir, ignore_errors=True)


def embedded_files(data_dir: Path) -> tuple[Path, Path]:
    """(the money file, the push file) of the embedded backend in ``data_dir``."""
    return data_dir / DB_FILE, data_dir / PUSH_DB_FILE


def auditor(settings: Settings) -> Auditor:
    """The money audit of the backend ``settings`` name: its MySQL/MariaDB shards (``hongbao
    audit`` over ``mysql_dsn``, with ``home_mysql_dsn`` when set, and the layout) for the
    production backend, else the embedded database in ``data_dir``. Each call reads the books
    once (read-only) and judges them."""
    if settings.backend == "production":
        dsns = [dsn for dsn in (settings.mysql_dsn, settings.home_mysql_dsn) if dsn]  # a region's and its home's
        return lambda drained: asyncio.run(audit_mysql(dsns, settings.mysql_layout(), drained=drained))
    return lambda drained: audit_sqlite(settings.data_dir, drained=drained)


async def migrate(settings: Settings) -> MigrateReport:
    """``hongbao migrate``: create or upgrade the shards of ``settings`` in place (idempotent).
    Raises RuntimeError for another layout or a newer schema, asyncmy errors when MySQL refuses."""
    return await migrate_mysql(settings.mysql_dsn, settings.mysql_layout())


async def move_cold_packets(settings: Settings, now_ms: int) -> int:
    """``hongbao migrate --cold``: move the closed packets past the hot window to the cold databases."""
    return await move_cold(settings.mysql_dsn, settings.mysql_layout(), now_ms)


def layout_of(settings: Settings) -> Layout:
    """The sharded layout the settings name (mysql_dbs x mysql_tables, prefix, hot window)."""
    return settings.mysql_layout()


__all__ = [
    "ADMISSION_SLOTS",
    "DB_FILE",
    "Auditor",
    "Backend",
    "auditor",
    "check_production",
    "create_admission",
    "embedded",
    "embedded_files",
    "layout_of",
    "migrate",
    "move_cold_packets",
    "open_backend",
    "preflight",
    "prepare",
    "production",
    "push_stores",
]
