"""``hongbao fleet FLEET.toml``: a described fleet (server/fleet_config.py) started on this
machine, for trying and testing (docs/architecture.md section 9): a throwaway mariadbd and
redis-server for each region the file gives no stores (hongbao.bench.services, as the tests and
the storm start theirs: loopback, files under ``data_dir/<region>-*``, test durability
settings), each region's shards migrated (idempotent), then one ``hongbao serve`` per node, each
in its own directory under ``data_dir`` (its configuration, its log ``server.log``) with the
fleet's one token key (``data_dir/jwt.key``, so ``hongbao token --data-dir DATA_DIR`` signs for
every node, and the nodes share the internal secret derived from it). It prints each node and
the regions' entries once every node answers ``/healthz``, and runs until SIGTERM or SIGINT,
then stops every node gracefully, then the stores it started (they run in process groups of
their own, so a terminal's Ctrl-C reaches only the launcher; and they get SIGTERM if the launcher
dies). A node that exits on its own is reported and left down: its region's other nodes take its
packets over, and the other region reaches them through any of them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from hongbao.bench.services import redis_servers
from hongbao.bench.services.mariadb import MariaDb
from hongbao.bench.services.process import tied_to_parent
from hongbao.core.redact import redact
from hongbao.server.auth import KEY_FILE, embedded_secret
from hongbao.server.config import Settings
from hongbao.server.fleet_config import Fleet, Node

READY_S = 60.0
STORES_FILE = "stores.json"  # the stores this launcher started, region -> [mysql_dsn, redis_url]
STOP_S = 30.0


@dataclass
class _Stores:
    """The stores this launcher started for the regions without their own."""

    mariadbs: list[MariaDb] = field(default_factory=list)
    redises: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self) -> None:
        for process in self.redises:
            redis_servers.stop(process)
        for mariadb in self.mariadbs:
            mariadb.stop()


def start_stores(fleet: Fleet, data_dir: Path, stores: _Stores) -> Fleet:
    """``fleet`` with a mariadbd and a redis-server started (into ``stores``) for each region the
    file gave none. Raises ServiceError when one cannot start (its binary missing: the message
    names the Debian package)."""
    regions = []
    for region in fleet.regions:
        if not region.mysql_dsn:
            mariadb = MariaDb(data_dir / f"{region.name}-mariadb", tied=True)
            mariadb.start()
            stores.mariadbs.append(mariadb)
            (port,) = redis_servers.free_ports(1)
            stores.redises.append(redis_servers.start_on(data_dir / f"{region.name}-redis", port, tied=True))
            region = dataclasses.replace(region, mysql_dsn=mariadb.dsn, redis_url=f"redis://127.0.0.1:{port}")
            print(f"fleet: {region.name} stores started: {redact(region.mysql_dsn)}, {region.redis_url}", flush=True)
        regions.append(region)
    north, south = regions
    started = {region.name: [region.mysql_dsn, region.redis_url] for region in regions}
    (data_dir / STORES_FILE).write_text(json.dumps(started))  # for `hongbao fleet --audit` meanwhile
    return dataclasses.replace(fleet, regions=(north, south))


def with_stores(fleet: Fleet, data_dir: Path) -> Fleet:
    """``fleet`` with the stores a running ``hongbao fleet`` in ``data_dir`` started for the
    regions the file gives none. Raises ValueError when there are none to find."""
    try:
        started = json.loads((data_dir / STORES_FILE).read_text())
    except (OSError, ValueError):
        started = {}
    regions = []
    for region in fleet.regions:
        if not region.mysql_dsn:
            if region.name not in started:
                raise ValueError(
                    f"[{region.name}] has no mysql_dsn: its stores are those `hongbao fleet --data-dir {data_dir}` "
                    "started; run this while it runs"
                )
            dsn, url = started[region.name]
            region = dataclasses.replace(region, mysql_dsn=dsn, redis_url=url)
        regions.append(region)
    north, south = regions
    return dataclasses.replace(fleet, regions=(north, south))


def migrate_regions(fleet: Fleet) -> None:
    """Create or upgrade the shards of every region's MySQL/MariaDB (the fleet's layout). Raises
    what ``composition.migrate`` raises (MySQLError, OSError) for one that refuses or is down."""
    from hongbao.server.composition import migrate

    base = Settings(backend="production").with_overrides(fleet.settings)
    for region in fleet.regions:
        asyncio.run(migrate(dataclasses.replace(base, mysql_dsn=region.mysql_dsn, redis_url=region.redis_url)))


def start_node(node: Node, data_dir: Path) -> subprocess.Popen[bytes]:
    """Write ``node``'s configuration and the fleet's key into ``data_dir/<name>`` and start its
    ``hongbao serve`` there (stderr to its server.log)."""
    directory = data_dir / node.name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "hongbao.toml").write_text(node.toml)
    shutil.copyfile(data_dir / KEY_FILE, directory / KEY_FILE)
    (directory / KEY_FILE).chmod(0o600)
    command = [sys.executable, "-m", "hongbao.server.cli", "--config", str(directory / "hongbao.toml")]
    command += ["serve", "--data-dir", str(directory)]
    with open(directory / "server.log", "ab") as log:  # tied: Ctrl-C stops nodes, then stores; a kill -9 of us, all
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, preexec_fn=tied_to_parent)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=1) as answer:
            return int(answer.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def run_fleet(fleet: Fleet, data_dir: Path) -> int:
    """Start ``fleet`` in ``data_dir`` and serve until SIGTERM/SIGINT; returns 0 once stopped, 2
    when a node does not come up within READY_S (every node is stopped then)."""
    embedded_secret(data_dir)  # the fleet's key, made once
    stores = _Stores()
    try:
        return _run(start_stores(fleet, data_dir, stores), data_dir)
    finally:
        stores.stop()


def _run(fleet: Fleet, data_dir: Path) -> int:
    migrate_regions(fleet)
    stop = False

    def on_signal(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    nodes = fleet.nodes()
    running = {node.name: (node, start_node(node, data_dir)) for node in nodes}
    try:
        deadline = time.monotonic() + READY_S
        for node, process in running.values():
            while not _answers(node.url):
                if stop or process.poll() is not None or time.monotonic() > deadline:
                    if not stop:
                        print(f"fleet: {node.name} did not come up: see {data_dir / node.name / 'server.log'}")
                    return 0 if stop else 2
                time.sleep(0.1)
            print(f"fleet: {node.name} (region {node.region}) serving {node.url}", flush=True)
        north, south = (urls[0] for urls in fleet.entries())
        print(f"fleet ready: entries north {north}, south {south}; Ctrl-C stops it", flush=True)
        print(f"fleet: tokens every node takes: hongbao token --data-dir {data_dir} --user ID [--admin]", flush=True)
        while not stop:
            time.sleep(0.2)
            for name, (_, process) in list(running.items()):
                if process.poll() is not None:
                    print(f"fleet: {name} exited with status {process.returncode}; left down", flush=True)
                    del running[name]
        print("fleet: stopping", flush=True)
        return 0
    finally:
        for _, process in running.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process in running.values():
            try:
                process.wait(STOP_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
