"""`hongbao serve --backend production` for the integration tests: a real server subprocess
(tests/server/conftest.py ``start_server``) on the session's MariaDB, SERVE_LAYOUT's 2 x 2 shards
emptied first, and a given Redis; and ``hongbao audit`` of its shards (docs/architecture.md section 11)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hongbao.core.sharding import Layout

from tests.integration.mariadb import MariaDb, migrated
from tests.server.conftest import Server, start_server

SERVE_LAYOUT = Layout(2, 2, prefix="srv_")


def production_config(
    mariadb: MariaDb, redis_url: str, *, cluster: bool = False, pool_size: int = 4, mysql_port: int | None = None
) -> str:
    """The TOML of a production server on ``mariadb`` (SERVE_LAYOUT) and the Redis at ``redis_url``
    (a node of a Redis Cluster when ``cluster``); ``pool_size``: connections per database per worker;
    ``mysql_port``: reach MariaDB there instead (a proxy in front of it)."""
    layout = SERVE_LAYOUT
    dsn = mariadb.dsn if mysql_port is None else mariadb.dsn.replace(f":{mariadb.port}", f":{mysql_port}")
    return (
        f'backend = "production"\nmysql_dsn = "{dsn}"\nmysql_prefix = "{layout.prefix}"\n'
        f"mysql_dbs = {layout.n_dbs}\nmysql_tables = {layout.n_tables}\nmysql_pool_size = {pool_size}\n"
        f'redis_url = "{redis_url}"\nredis_cluster = {str(cluster).lower()}\n'
    )


def start_production(
    directory: Path,
    mariadb: MariaDb,
    redis_url: str,
    *,
    cluster: bool = False,
    workers: int = 2,
    pool_size: int = 4,
    extra_config: str = "",
    mysql_port: int | None = None,
) -> Server:
    """Empty SERVE_LAYOUT's shards (migrated on first use), then start a production server with
    ``workers`` workers in ``directory`` (``extra_config``: more TOML lines; ``mysql_port``: see
    ``production_config``). Raises RuntimeError when it does not become ready."""
    migrated(mariadb, SERVE_LAYOUT)
    config = production_config(mariadb, redis_url, cluster=cluster, pool_size=pool_size, mysql_port=mysql_port)
    config += extra_config
    return start_server(directory, workers=workers, extra_config=config)


def audit_cli(server: Server, *flags: str) -> str:
    """``hongbao audit`` of the shards ``server`` was configured with (a fresh process, as an
    operator runs it; ``flags`` such as ``--not-drained``): asserts exit 0 and returns the report."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hongbao.server.cli",
            "--config",
            str(server.data_dir / "hongbao.toml"),
            "audit",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
