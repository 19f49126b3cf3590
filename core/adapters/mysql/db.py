"""One asyncmy pool per database of the sharded MySQL/MariaDB layout (hongbao.core.sharding), the
DSN's parsing, and the bounds and breaker of every call.

Connections: two pools per database, one in autocommit mode for single statements, one with
autocommit off for transactions (a transaction starts with its first statement: no BEGIN round
trip), both READ COMMITTED (the open transaction locks the packet row first, so every later read
sees every committed open), utf8mb4,
and server-side prepared statements (asyncmy's statement cache: a ``%s`` query of a fixed shape is
prepared once per connection and then runs in the binary protocol; one shaped by its data, a
multi-row VALUES or an IN list, is sent as text, ``run_statement``). A lost or refused connection becomes
``Degraded`` (503), and a short circuit breaker per database answers the next requests at once
instead of letting each wait for a dead server; a deadlock is retried.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import asyncmy
from asyncmy.connection import Connection
from asyncmy.constants.SERVER_STATUS import SERVER_STATUS_IN_TRANS
from asyncmy.cursors import Cursor
from asyncmy.errors import InterfaceError, MySQLError, OperationalError
from asyncmy.pool import Pool
from hongbao.core.errors import Degraded, Overloaded
from hongbao.core.loop_lag import LoopLag
from hongbao.core.sharding import Layout, parse_dsn

log = logging.getLogger("hongbao.mysql")
T = TypeVar("T")
Row = tuple[Any, ...]
#: client error codes of a connection that is gone or never came (CR_CONNECTION_ERROR,
#: CR_CONN_HOST_ERROR, CR_SERVER_GONE_ERROR, CR_SERVER_LOST, CR_SERVER_LOST_EXTENDED).
CONNECTION_LOST = frozenset({2002, 2003, 2006, 2013, 2055})
DEADLOCK, DEADLOCK_RETRIES = 1213, 3
BREAKER_S = 0.5  # after a connection failure, requests to that database fail at once for this long
TIMEOUT_S = 0.3  # the default bound of one statement, from the moment it has its connection
TRANSACTION_TIMEOUT_S = 5.0  # ... and of one transaction (a batched open of hundreds of receipts, its lock wait)
CONNECT_TIMEOUT_S = 1.0  # the bound of a new connection (a server that does not answer it hangs: the breaker opens)
SCAN_TIMEOUT_S = 10.0  # the bound of a background job's scan over every day table
TIMEOUTS_TO_TRIP = 3  # consecutive calls past their bound that open the breaker (a frozen server)
STATEMENT_CACHE = 256  # prepared statements kept per connection (a worker uses ~100 shapes per database)


async def run_statement(cur: Cursor, sql: str, args: Sequence[object], *, once: bool = False) -> int:
    """Run ``sql`` (``%s`` placeholders) with ``args`` on ``cur``; returns the rows changed. A
    prepared statement (asyncmy's statement cache, the binary protocol), or with ``once`` the text
    protocol (the values escaped by the client, asyncmy's ``mogrify``): for a statement shaped by
    its data (a multi-row VALUES, an IN list, an OR chain of keys), whose prepare would cost a
    round trip and a slot of the connection's statement cache for a shape that rarely comes again."""
    return int(await (cur.execute(cur.mogrify(sql, tuple(args))) if once else cur.execute(sql, tuple(args))))


def marks(values: Sequence[object]) -> str:
    """``%s, %s, ...``: one placeholder per value of ``values`` (an IN list, a VALUES row)."""
    return ", ".join(["%s"] * len(values))


def key_rows(columns: Sequence[str], count: int) -> str:
    """``(SELECT %s AS a, %s AS b UNION ALL SELECT %s, %s ...) AS k``: a derived table ``k`` of
    ``count`` >= 1 rows of ``columns`` (column names of the caller's own, never data; ``%s``
    placeholders for the values, row by row), to join a table on by its unique key. The server
    looks each row up by that key (one eq_ref read a row); the same keys as an OR chain or a
    row-constructor IN list cost its range optimizer time quadratic in their number (MariaDB
    10.11, 2 000 keys of a three-column key: 570 ms against 13 ms joined). An UPDATE joined on it
    locks the rows in the derived table's order: callers give the keys in one order (sorted) for
    every writer."""
    first = ", ".join(f"%s AS {column}" for column in columns)
    rest = marks(columns)
    return f"(SELECT {first}{f' UNION ALL SELECT {rest}' * (count - 1)}) AS k"


@dataclass(frozen=True, slots=True)
class Committed(Generic[T]):
    """What a transaction's body returns once it committed itself (``commit_with``): ``value`` is
    the transaction's result, and ``MysqlShards.transaction`` sends no COMMIT of its own."""

    value: T


async def commit_with(cur: Cursor, sql: str, args: Sequence[object]) -> list[Row]:
    """Send ``sql`` (one or more statements joined by ``;``, ``%s`` placeholders for ``args``)
    and COMMIT in one round trip, reading every result: the last steps of a transaction, none of
    which needs what an earlier one returns in Python. Returns the rows of the statements that
    return rows, in order. The text protocol (a multi-statement cannot be prepared; the values
    are escaped by the client, asyncmy's ``mogrify``). The server stops at the first statement
    that fails, which raises here, and the transaction rolls back as for any error. The body
    then returns ``Committed``."""
    await run_statement(cur, f"{sql}; COMMIT", args, once=True)
    rows = [row for rows in await result_sets(cur) for row in rows]
    # The COMMIT ended the transaction, but asyncmy keeps the previous status when a result's is 0
    # (autocommit off, no transaction): its pool would close the connection as one left mid-transaction.
    cur.connection.server_status &= ~SERVER_STATUS_IN_TRANS
    return rows


async def affected_rows(cur: Cursor, sql: str, args: Sequence[object]) -> list[int]:
    """Send ``sql`` (one or more statements joined by ``;``, ``%s`` placeholders for ``args``) in
    one round trip (the text protocol, as ``commit_with``) and return the rows each statement
    changed, in order. The server stops at the first statement that fails, which raises here."""
    counts = [await run_statement(cur, sql, args, once=True)]
    while await cur.nextset():
        counts.append(cast(int, cur.rowcount))  # the stub types it object; _do_get_result sets an int
    return counts


async def result_sets(cur: Cursor) -> list[list[Row]]:
    """The rows of each statement that returns rows among those ``cur`` just sent (a
    multi-statement: every result is read), in order; a SELECT that matched nothing gives []."""
    sets: list[list[Row]] = []
    while True:
        if cur.description:
            sets.append([tuple(row) for row in await cur.fetchall()])
        if not await cur.nextset():
            return sets


def _expire(conn: Connection, expired: list[bool]) -> None:
    """A statement's bound passed: mark it and close its connection, which fails the pending read."""
    expired.append(True)
    conn.close()


def _lost(exc: OperationalError) -> bool:
    return bool(exc.args) and exc.args[0] in CONNECTION_LOST


def connect_args(
    server: dict[str, Any], *, connect_timeout_s: float = CONNECT_TIMEOUT_S, autocommit: bool = True
) -> dict[str, Any]:
    """asyncmy arguments shared by every hongbao connection to ``server`` (``autocommit`` off: a
    connection of the transactions' pool, whose every statement runs in a transaction that a
    COMMIT or ROLLBACK ends)."""
    return {
        **server,
        "charset": "utf8mb4",
        "autocommit": autocommit,
        "connect_timeout": max(1, round(connect_timeout_s)),
        "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        "stmt_cache_size": STATEMENT_CACHE,
    }


class MysqlShards:
    """The pools of every database of ``layout`` on the servers of ``dsn`` (database i on the
    i-th DSN, cyclically), two per database (single statements, transactions), ``pool_size``
    connections each. Pools open on first use, on the
    running event loop; ``connect()`` opens them all at once. Once it has its connection, every
    statement is bounded by ``timeout_s`` seconds and every transaction by
    ``transaction_timeout_s`` (a scan may ask for more): past it the call raises Degraded, and
    ``TIMEOUTS_TO_TRIP`` such calls in a row open the database's breaker as a lost connection
    does, so a frozen server costs a request at most about a second (its point reads), then
    microseconds. The wait for a connection is bounded by ``transaction_timeout_s`` and never
    opens the breaker (a burst here is not a server that hangs). ``lag``: the worker's loop lag
    (hongbao.core.loop_lag): a call whose bound passed while the loop was unavailable for a third
    of it or more raises Busy (429: the worker is overloaded, not the server frozen) and does not
    count toward the breaker; None: every such call counts. Raises ValueError for a bad DSN."""

    __slots__ = (
        "layout",
        "timeout_s",
        "transaction_timeout_s",
        "_servers",
        "_pool_size",
        "_pools",
        "_lock",
        "_down_until",
        "_timeouts",
        "_clearing",
        "_known",
        "_connected_at",
        "lag",
    )

    def __init__(
        self,
        dsn: str,
        layout: Layout,
        *,
        pool_size: int = 10,
        timeout_s: float = TIMEOUT_S,
        transaction_timeout_s: float = TRANSACTION_TIMEOUT_S,
        lag: LoopLag | None = None,
    ) -> None:
        self.layout, self._servers, self._pool_size, self.lag = layout, parse_dsn(dsn), pool_size, lag
        self.timeout_s, self.transaction_timeout_s = timeout_s, transaction_timeout_s
        self._clearing: set[asyncio.Task[None]] = set()
        self._pools: list[Pool | None] = [None] * (2 * layout.n_dbs)  # [db]: statements, [n + db]: transactions
        self._lock = asyncio.Lock()
        self._down_until = [0.0] * layout.n_dbs
        self._timeouts = [0] * layout.n_dbs
        self._known: weakref.WeakSet[Connection] = weakref.WeakSet()  # connections handed out before
        self._connected_at = [0.0] * layout.n_dbs  # when a new connection of the database was last handed out

    def same_server(self, a: int, b: int) -> bool:
        """Whether databases ``a`` and ``b`` are on one server (a transaction on one can write both)."""
        return a % len(self._servers) == b % len(self._servers)

    async def connect(self) -> None:
        """Open every pool now; raises Degraded when a database cannot be reached (not migrated,
        wrong DSN, server down)."""
        for db in range(self.layout.n_dbs):
            async with self._conn(db):
                pass

    async def reachable(self) -> dict[str, bool]:
        """Each database's name -> whether it answers ``SELECT 1`` within ``timeout_s`` (every
        database at once; one whose breaker is open reads as down without a query)."""

        async def one(db: int) -> bool:
            try:
                await self.fetchone(db, "SELECT 1")
            except Degraded:
                return False
            return True

        answers = await asyncio.gather(*(one(db) for db in range(self.layout.n_dbs)))
        return {self.layout.db_name(db): up for db, up in enumerate(answers)}

    def breakers(self) -> dict[str, bool]:
        """Each database's name -> whether its breaker is open now (its calls fail at once)."""
        now = time.monotonic()
        return {self.layout.db_name(db): now < until for db, until in enumerate(self._down_until)}

    async def close(self) -> None:
        """Close every pool and wait for its connections (a background clear is cancelled)."""
        for task in list(self._clearing):
            task.cancel()
        pools = [pool for pool in self._pools if pool is not None]
        self._pools = [None] * (2 * self.layout.n_dbs)
        for pool in pools:
            pool.close()
        for pool in pools:
            await pool.wait_closed()

    async def _pool(self, db: int, tx: bool) -> Pool:
        """The pool of ``db`` (``tx``: its transactions' pool), made on first use with no connection
        (minsize 0): its first connect happens in an acquire, under the connect bound, never
        unbounded here under the lock."""
        index = self.layout.n_dbs + db if tx else db
        pool = self._pools[index]
        if pool is None:
            async with self._lock:
                pool = self._pools[index]
                if pool is None:
                    args = connect_args(self._servers[db % len(self._servers)], autocommit=not tx)
                    pool = self._pools[index] = await asyncmy.create_pool(
                        minsize=0, maxsize=self._pool_size, db=self.layout.db_name(db), **args
                    )
        return pool

    @asynccontextmanager
    async def _conn(self, db: int, tx: bool = False) -> AsyncIterator[Connection]:
        """A pooled connection of ``db`` (``tx``: of its transactions' pool): Degraded at once while
        its breaker is open, when it cannot be had (the server refuses, or a caller that may have
        dialled waited CONNECT_TIMEOUT_S while no new connection came out of the pool: connects
        hang, the breaker opens), or when none frees up in time (every one busy, ``transaction_timeout_s``,
        or CONNECT_TIMEOUT_S while new connections did come: congestion here, not a server that
        hangs, so the breaker stays shut); the breaker is looked at again once one is had. A link lost while in
        use (OperationalError 2006/2013..., or asyncmy's InterfaceError "Not connected") opens the
        breaker and raises Degraded."""
        name = self.layout.db_name(db)
        if time.monotonic() < self._down_until[db]:
            raise Degraded(f"database {name} is unavailable")
        dialing, started = False, time.monotonic()
        try:
            pool = await self._pool(db, tx)
            dialing = pool.freesize == 0 and pool.size < pool.maxsize  # the acquire may open a connection
            wait_s = CONNECT_TIMEOUT_S if dialing else self.transaction_timeout_s
            if pool.freesize:  # one is free: no wait to bound (and no Task for wait_for)
                conn = await pool.acquire()
            else:
                conn = await asyncio.wait_for(pool.acquire(), wait_s)
            if conn not in self._known:
                self._known.add(conn)
                self._connected_at[db] = time.monotonic()
        except TimeoutError:
            if dialing and self._connected_at[db] < started:  # no connect went through meanwhile: they hang
                self._trip(db, TimeoutError(f"no connection within {CONNECT_TIMEOUT_S:.0f} s"))
                raise Degraded(f"database {name} is unavailable") from None
            raise Degraded(f"database {name} is busy: no connection free within {wait_s:.0f} s") from None
        except (MySQLError, OSError, RuntimeError) as exc:  # RuntimeError: asyncmy on uvloop, socket gone mid-handshake
            self._trip(db, exc)
            raise Degraded(f"database {name} is unavailable") from exc
        try:
            if time.monotonic() < self._down_until[db]:  # it tripped while this caller waited
                raise Degraded(f"database {name} is unavailable")
            yield conn
        except OperationalError as exc:
            if _lost(exc):
                conn.close()
                self._trip(db, exc)
                raise Degraded(f"database {name} is unavailable") from exc
            raise
        except InterfaceError as exc:  # (0, "Not connected"): the link went (a reset, a pool cleared by a trip)
            conn.close()
            self._trip(db, exc)
            raise Degraded(f"database {name} is unavailable") from exc
        except Exception:
            raise
        except BaseException:  # cancelled mid-statement: the connection's state is unknown
            conn.close()
            raise
        finally:
            pool.release(conn)

    def _trip(self, db: int, exc: BaseException) -> None:
        """Open the breaker of ``db`` and drop its idle connections (after a restart they are all
        dead) in the background: the pool's lock may be held by a connect to a frozen server,
        and the caller answers now."""
        if time.monotonic() >= self._down_until[db]:
            log.warning(
                "database %s unavailable (%s); failing fast for %.1f s", self.layout.db_name(db), exc, BREAKER_S
            )
        self._down_until[db] = time.monotonic() + BREAKER_S
        for pool in (self._pools[db], self._pools[self.layout.n_dbs + db]):
            if pool is not None:
                task = asyncio.get_running_loop().create_task(pool.clear())
                self._clearing.add(task)
                task.add_done_callback(self._clearing.discard)

    async def _run(self, db: int, op: Callable[[Connection], Awaitable[T]], limit: float, tx: bool = False) -> T:
        """``op(conn)`` on a connection of ``db`` (see ``_conn``; ``tx``: of its transactions' pool),
        within ``limit`` seconds from the moment it has one; again after a deadlock (the server
        rolled the loser back), 3 times at most. Past ``limit`` a timer closes the connection (its
        state is unknown) and the call's pending read fails: then Busy when the loop lagged
        meanwhile (see the class), else Degraded, and the breaker opens after TIMEOUTS_TO_TRIP in
        a row (a server that hangs). A timer, not asyncio.wait_for: no Task per statement (the
        HTTP protocol runs handlers outside any Task, so asyncio.timeout cannot serve)."""
        loop = asyncio.get_running_loop()
        for tries in range(1, DEADLOCK_RETRIES + 1):
            try:
                async with self._conn(db, tx) as conn:
                    started = loop.time()
                    expired: list[bool] = []
                    timer = loop.call_later(limit, _expire, conn, expired)
                    try:
                        result = await op(conn)
                    except Exception:
                        if not expired:
                            raise
                        if self.lag is not None and self.lag.lagged(started):
                            raise Overloaded() from None
                        self._timed_out(db, limit)
                        raise Degraded(
                            f"database {self.layout.db_name(db)} did not answer within {limit * 1000:.0f} ms"
                        ) from None
                    finally:
                        timer.cancel()
                    self._timeouts[db] = 0
                    return result
            except OperationalError as exc:
                if exc.args[:1] != (DEADLOCK,) or tries == DEADLOCK_RETRIES:
                    raise
                log.info("deadlock on %s; retrying", self.layout.db_name(db))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _timed_out(self, db: int, limit: float) -> None:
        self._timeouts[db] += 1
        if self._timeouts[db] >= TIMEOUTS_TO_TRIP:
            self._timeouts[db] = 0
            self._trip(db, TimeoutError(f"{TIMEOUTS_TO_TRIP} calls in a row past {limit * 1000:.0f} ms"))

    async def transaction(
        self, db: int, body: Callable[[Cursor], Awaitable[T | Committed[T]]], *, timeout_s: float | None = None
    ) -> T:
        """Run ``body(cursor)`` in one transaction on database ``db``: commit on return (unless
        the body returned ``Committed``: it committed with its last statements), roll back
        on any exception; a deadlock reruns the whole body (up to 3 times); each run within
        ``timeout_s`` (None: ``transaction_timeout_s``) of having its connection. Raises Overloaded
        when the bound passed while this worker's loop lagged (see the class), Degraded
        when the database is unreachable, the connection is lost or the bound passes (nothing is
        committed then, or, when the bound passed during the COMMIT, maybe everything: every
        transaction here is idempotent)."""

        async def run(conn: Connection) -> T:  # autocommit is off: the first statement begins it
            try:
                async with conn.cursor() as cur:
                    result = await body(cur)
                if isinstance(result, Committed):
                    return result.value
                await conn.commit()
                return result
            except Exception as exc:
                if not (isinstance(exc, OperationalError) and _lost(exc)):
                    with suppress(MySQLError, OSError):
                        await conn.rollback()
                raise

        return await self._run(db, run, self.transaction_timeout_s if timeout_s is None else timeout_s, tx=True)

    async def execute(
        self, db: int, sql: str, args: Sequence[object] = (), *, timeout_s: float | None = None, once: bool = False
    ) -> int:
        """One autocommitted statement (retried after a deadlock) within ``timeout_s`` (None:
        ``timeout_s`` of the shards) of having its connection; returns the rows it changed.
        ``once``: a statement shaped by its data, run unprepared (``run_statement``)."""

        async def run(conn: Connection) -> int:
            async with conn.cursor() as cur:
                return await run_statement(cur, sql, args, once=once)

        return await self._run(db, run, self.timeout_s if timeout_s is None else timeout_s)

    async def fetchone(
        self, db: int, sql: str, args: Sequence[object] = (), *, timeout_s: float | None = None
    ) -> Row | None:
        """The first row of an autocommitted query (within ``timeout_s``, as ``execute``), or None."""

        async def run(conn: Connection) -> Row | None:
            async with conn.cursor() as cur:
                await cur.execute(sql, tuple(args))
                row = await cur.fetchone()
                return None if row is None else tuple(row)

        return await self._run(db, run, self.timeout_s if timeout_s is None else timeout_s)

    async def fetchall(
        self, db: int, sql: str, args: Sequence[object] = (), *, timeout_s: float | None = None, once: bool = False
    ) -> list[Row]:
        """Every row of an autocommitted query (within ``timeout_s``, as ``execute``; scans pass
        SCAN_TIMEOUT_S; ``once`` as ``execute``)."""

        async def run(conn: Connection) -> list[Row]:
            async with conn.cursor() as cur:
                await run_statement(cur, sql, args, once=once)
                return [tuple(r) for r in await cur.fetchall()]

        return await self._run(db, run, self.timeout_s if timeout_s is None else timeout_s)
