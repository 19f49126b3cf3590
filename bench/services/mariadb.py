"""A real MariaDB server on loopback with a throwaway data directory (as asyncpg's test base starts
its own PostgreSQL), for the tests, the storm benchmark and the chaos run; stopped afterwards.

Settings are the test ones: no fsync at commit, no binary log, every table in the system
tablespace (creating the ~1000 day tables of ``hongbao migrate`` takes seconds, not minutes).
Production runs with ``innodb_flush_log_at_trx_commit=1`` and ``sync_binlog=1`` (docs/operations.md).
The machine runs the tests as root, so the server runs with ``--user=root``.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from hongbao.bench.services.process import ServiceError, free_port, terminate, tied_to_parent

USER, PASSWORD = "hongbao", "hongbao-test"
READY_TIMEOUT_S = 30.0
_TEST_SETTINGS = (
    "--innodb-flush-log-at-trx-commit=0",
    "--sync-binlog=0",
    "--skip-log-bin",
    "--innodb-doublewrite=0",
    "--innodb-file-per-table=0",
    "--innodb-buffer-pool-size=128M",
    "--innodb-log-file-size=64M",
    "--innodb-flush-method=nosync",
    "--max-connections=1000",
    "--skip-name-resolve",
    "--innodb-lock-wait-timeout=20",
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_bin",
    "--max-prepared-stmt-count=200000",
)


def _binary(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin")
    if path is None:
        raise ServiceError(f"{name} not found: this needs a real MariaDB server (apt-get install mariadb-server)")
    return path


@dataclass
class MariaDb:
    """One mariadbd on 127.0.0.1:``port`` over ``base`` (data dir, socket, error log).

    ``dsn`` is ``mysql://hongbao:<password>@127.0.0.1:<port>`` (a user with every privilege).
    ``stop()`` and ``start()`` may be called again: a test can take the server away and bring
    it back on the same data and port."""

    base: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    tied: bool = False  # started with ``process.tied_to_parent``: it dies with its starter

    def __post_init__(self) -> None:
        self.base = self.base.resolve()  # mariadb-install-db reads a relative datadir against its basedir (/usr)

    @property
    def dsn(self) -> str:
        """The DSN of the test user on this server."""
        return f"mysql://{USER}:{PASSWORD}@127.0.0.1:{self.port}"

    @property
    def log(self) -> str:
        """The server's error log so far."""
        path = self.base / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def install(self) -> None:
        """Create the system tables and the test user's bootstrap file (once)."""
        data = self.base / "data"
        if data.exists():
            return
        self.base.mkdir(parents=True, exist_ok=True)
        out = subprocess.run(
            [
                _binary("mariadb-install-db"),
                "--no-defaults",
                f"--datadir={data}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--innodb-file-per-table=0",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise ServiceError(f"mariadb-install-db failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
        (self.base / "init.sql").write_text(
            f"CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}';\n"
            f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'127.0.0.1';\n"
        )

    def start(self) -> None:
        """Start mariadbd and wait until it greets a client; fails the test with its log if not."""
        self.install()
        self.process = subprocess.Popen(
            [
                _binary("mariadbd"),
                "--no-defaults",
                "--user=root",
                f"--datadir={self.base / 'data'}",
                f"--socket={self.base / 'sock'}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                f"--pid-file={self.base / 'mariadbd.pid'}",
                f"--log-error={self.base / 'error.log'}",
                f"--init-file={self.base / 'init.sql'}",
                f"--tmpdir={self.base}",
                *_TEST_SETTINGS,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=tied_to_parent if self.tied else None,
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._greets():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ServiceError(f"mariadbd did not become ready on port {self.port}:\n{self.log[-3000:]}")
            time.sleep(0.05)

    def _greets(self) -> bool:
        """True when the server sends its handshake packet (protocol version 10) on connect."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                return sock.recv(5)[4:5] == b"\x0a"
        except OSError:
            return False

    def freeze(self) -> None:
        """SIGSTOP the server: it keeps its connections and answers nothing (a hung database)."""
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT a frozen server."""
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stop the server (SIGTERM, a clean InnoDB shutdown); a no-op when it is not running."""
        if self.process is not None:
            terminate(self.process, timeout_s=60.0)
            self.process = None
