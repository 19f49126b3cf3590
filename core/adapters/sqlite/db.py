"""One SQLite connection per worker and file, driven from a dedicated thread so the event loop never blocks.

Settings for money (docs/architecture.md section 5): WAL journal, ``synchronous=FULL`` (a committed
transaction survives power loss), ``BEGIN IMMEDIATE`` for every money transaction (the write lock
is taken up front, so two workers never deadlock upgrading a read lock), and a busy timeout so
concurrent workers queue for the lock instead of failing. SQLite has one writer per file and each
file here one write thread, so the push channel's writes live in a file of their own
(hongbao.core.adapters.sqlite.push_db, ``synchronous=NORMAL``) and never queue in front of money.

Group commit: calls waiting for the write thread together (up to ``GROUP_MAX``) run in one
transaction, each ``immediate()`` block as a savepoint of it, so one fsync commits them all (under
load the fsync per transaction was most of the thread's time). A call that raises is rolled back
alone; a call's result is returned only after the group's COMMIT, so a result the caller sees is
as durable as before. The first call of a group waits for the group, never for a fixed delay.

Point reads do not take the thread hop (~80 us of CPU each): they run on the event loop's own
thread over a second, read-only connection. In WAL mode a reader never waits for a writer, and
each statement sees every transaction committed before it started.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

from hongbao.core.adapters.sqlite.schema import migrate

T = TypeVar("T")
#: The money file of the embedded backend, in its data directory.
DB_FILE = "hongbao.db"
BUSY_TIMEOUT_S = 30.0
GROUP_MAX = 32  # calls committed together at most
Synchronous = Literal["FULL", "NORMAL"]
_Call = tuple[Callable[[], Any], asyncio.Future[Any], asyncio.AbstractEventLoop]


class SqliteDb:
    """A SQLite file: ``path``, created with its schema by ``schema(conn)`` (default: the money
    schema with ``n_tables`` tables per day), committing with ``synchronous`` (FULL: a commit is
    on disk before it returns; NORMAL in WAL mode: it is in the OS when it returns, on disk at
    the next checkpoint). Raises RuntimeError when the file's schema is newer than this code."""

    __slots__ = ("path", "conn", "reader", "n_tables", "_executor", "_lock", "_pending", "_draining", "_grouped")

    def __init__(
        self,
        path: Path,
        n_tables: int = 1,
        *,
        schema: Callable[[sqlite3.Connection], None] | None = None,
        synchronous: Synchronous = "FULL",
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_S)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        self.n_tables = n_tables
        if schema is None:
            migrate(self.conn, n_tables)
        else:
            schema(self.conn)
        self.reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_S)
        self.reader.execute("PRAGMA query_only=1")
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"sqlite-{path.stem}")
        self._lock = threading.Lock()
        self._pending: list[_Call] = []
        self._draining = False
        self._grouped = False  # the write thread is inside a group's transaction

    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the file's write thread, in submit order, in a group commit (see the
        module); returns what it returned once committed, or raises what it (or the commit) raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._pending.append((fn, future, loop))
            start, self._draining = not self._draining, True
        if start:
            self._executor.submit(self._drain)
        return await future

    def read(self, fn: Callable[[], T]) -> T:
        """Run a point read ``fn`` (over ``self.reader``) right here, on the caller's thread."""
        return fn()

    @contextmanager
    def immediate(self) -> Iterator[sqlite3.Connection]:
        """A transaction: a savepoint of the group's transaction in a call made through ``run``,
        else ``BEGIN IMMEDIATE``; committed (released) on success, rolled back on any exception."""
        begin, commit, rollback = (
            ("SAVEPOINT tx", "RELEASE tx", "ROLLBACK TO tx")
            if self._grouped
            else ("BEGIN IMMEDIATE", "COMMIT", "ROLLBACK")
        )
        self.conn.execute(begin)
        try:
            yield self.conn
        except BaseException:
            if self.conn.in_transaction:  # (SQLite may have rolled it all back already: I/O error, disk full)
                self.conn.execute(rollback)
                if self._grouped:
                    self.conn.execute(commit)
            raise
        self.conn.execute(commit)

    def _drain(self) -> None:
        """On the write thread: run the waiting calls, ``GROUP_MAX`` per transaction, until none is left."""
        while True:
            with self._lock:
                group, self._pending = self._pending[:GROUP_MAX], self._pending[GROUP_MAX:]
                if not group:
                    self._draining = False
                    return
            outcomes = self._group(group)
            for (_, future, loop), outcome in zip(group, outcomes, strict=True):
                try:
                    loop.call_soon_threadsafe(_settle, future, outcome)
                except RuntimeError:  # the caller's loop is closed: nobody waits for this
                    pass

    def _group(self, group: list[_Call]) -> list[tuple[bool, Any]]:
        """Run ``group`` in one transaction: per call (True, result) or (False, exception)."""
        outcomes: list[tuple[bool, Any]] = []
        opened = 0  # outcomes[opened:] belong to the transaction still open
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except Exception as exc:  # the lock stayed taken past the busy timeout
            return [(False, exc)] * len(group)
        self._grouped = True
        try:
            for fn, _, _ in group:
                try:
                    outcomes.append((True, fn()))
                except BaseException as exc:
                    outcomes.append((False, exc))
                if not self.conn.in_transaction:  # SQLite rolled the whole transaction back (I/O error, disk full)
                    _undo(outcomes, opened, sqlite3.OperationalError("the group's transaction was rolled back"))
                    self.conn.execute("BEGIN IMMEDIATE")
                    opened = len(outcomes)
            self.conn.execute("COMMIT")
        except Exception as exc:
            _undo(outcomes, opened, exc)
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            outcomes += [(False, exc)] * (len(group) - len(outcomes))
        finally:
            self._grouped = False
        return outcomes

    def close(self) -> None:
        """Finish queued calls and close the connections."""
        self._executor.shutdown(wait=True)
        self.conn.close()
        self.reader.close()


def _undo(outcomes: list[tuple[bool, Any]], since: int, exc: Exception) -> None:
    """The calls of ``outcomes[since:]`` were not committed: each fails with ``exc`` (or its own error)."""
    for i in range(since, len(outcomes)):
        if outcomes[i][0]:
            outcomes[i] = (False, exc)


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.cancelled():
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
