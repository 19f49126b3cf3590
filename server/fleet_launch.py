"""``hongbao fleet FLEET.toml``: a described fleet (server/fleet_config.py) started on this
machine, for trying and testing (docs/architecture.md section 9): each region's shards migrated
(idempotent), then one ``hongbao serve`` per node, each in its own directory under ``data_dir``
(its configuration, its log ``server.log``) with the fleet's one token key (``data_dir/jwt.key``,
so ``hongbao token --data-dir DATA_DIR`` signs for every node, and the nodes share the internal
secret derived from it). It prints each node and the regions' entries once every node answers
``/healthz``, and runs until SIGTERM or SIGINT, then stops every node gracefully. A node that
exits on its own is reported and left down: its region's other nodes take its packets over.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from hongbao.server.auth import KEY_FILE, embedded_secret
from hongbao.server.config import Settings
from hongbao.server.fleet_config import Fleet, Node

READY_S = 60.0
STOP_S = 30.0


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
    with open(directory / "server.log", "ab") as log:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)


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
        north, south = fleet.entries()
        print(f"fleet ready: entries north {north}, south {south}; Ctrl-C stops it", flush=True)
        while not stop:
            time.sleep(0.2)
            for name, (_, process) in list(running.items()):
                if process.poll() is not None:
                    print(f"fleet: {name} exited with status {process.returncode}; left down", flush=True)
                    del running[name]
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
