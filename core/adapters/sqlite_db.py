"""One SQLite connection per worker and file, driven from a dedicated thread so the event loop never blocks.

Settings for money (DESIGN.md section 5): WAL journal, ``synchronous=FULL`` (a committed
transaction survives power loss), ``BEGIN IMMEDIATE`` for every money transaction (the write lock
is taken up front, so two workers never deadlock upgrading a read lock), and a busy timeout so
concurrent workers queue for the lock instead of failing. SQLite has one writer per file and each
file here one write thread, so the push channel's writes live in a file of their own
(hongbao.core.adapters.sqlite_push_db, ``synchronous=NORMAL``) and never queue in front of money.

Point reads do not take the thread hop (~80 us of CPU each): they run on the event loop's own
thread over a second, read-only connection. In WAL mode a reader never waits for a writer, and
each statement sees every transaction committed before it started.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, TypeVar

from hongbao.core.adapters.sqlite_schema import migrate

T = TypeVar("T")
BUSY_TIMEOUT_S = 30.0
Synchronous = Literal["FULL", "NORMAL"]


class SqliteDb:
    """A SQLite file: ``path``, created with its schema by ``schema(conn)`` (default: the money
    schema with ``n_tables`` tables per day), committing with ``synchronous`` (FULL: a commit is
    on disk before it returns; NORMAL in WAL mode: it is in the OS when it returns, on disk at
    the next checkpoint). Raises RuntimeError when the file's schema is newer than this code."""

    __slots__ = ("path", "conn", "reader", "n_tables", "_executor")

    def __init__(self, path: Path, n_tables: int = 1, *, schema: Callable[[sqlite3.Connection], None] | None = None,
                 synchronous: Synchronous = "FULL") -> None:
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

    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the connection's own thread; every call is serialised in submit order."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def read(self, fn: Callable[[], T]) -> T:
        """Run a point read ``fn`` (over ``self.reader``) right here, on the caller's thread."""
        return fn()

    @contextmanager
    def immediate(self) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction: commit on success, roll back on any exception."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def close(self) -> None:
        """Finish queued calls and close the connection."""
        self._executor.shutdown(wait=True)
        self.conn.close()
        self.reader.close()
