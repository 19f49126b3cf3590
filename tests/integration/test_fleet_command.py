"""`hongbao fleet FLEET.toml` as a user runs it (server/fleet_launch.py): two regions of two
nodes from one file, on a MariaDB and a redis-server per region; money moved through both
entries, a graceful stop on SIGTERM, and `hongbao fleet --audit` over both regions."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from hongbao.bench.services import redis_servers
from hongbao.bench.services.mariadb import MariaDb
from hongbao.server.auth import embedded_secret, mint

from tests.integration.conftest import RedisTarget
from tests.server.conftest import run_cli

pytestmark = pytest.mark.timeout(240)
REGION = '[{}]\nmysql_dsn = "mysql://u:p@h:1"\nredis_url = "redis://h:1"\nports = [{}]\n'


def _fleet_file(path: Path, south: tuple[str, str], ports: list[int]) -> Path:
    """A fleet file whose north names no stores (the command starts them) and whose south names ``south``."""
    path.write_text(
        f"workers = 1\n[north]\nports = {ports[:2]}\n"
        f'[south]\nmysql_dsn = "{south[0]}"\nredis_url = "{south[1]}"\nports = {ports[2:]}\n'
        '[settings]\nmysql_dbs = 2\nmysql_tables = 2\nmysql_prefix = "flt_"\nmysql_pool_size = 2\n'
        "credit_interval_s = 0.05\n"
    )
    return path


def test_one_command_starts_two_regions_and_stops_them(
    mariadb: MariaDb, redis_standalone: RedisTarget, tmp_path: Path
) -> None:
    """The fleet comes up (a mariadbd and a redis-server started for north, which names none; both
    regions' shards migrated), a packet sent through the south entry is a south order paid and
    opened through the north entry, the audit over both regions while it runs is clean, and
    SIGTERM stops every node and north's stores with exit 0."""
    ports = redis_servers.free_ports(4)
    fleet = _fleet_file(tmp_path / "fleet.toml", (mariadb.dsn, redis_standalone.url), ports)
    data = tmp_path / "var-fleet"
    command = [sys.executable, "-m", "hongbao.server.cli", "fleet", str(fleet), "--data-dir", str(data)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        lines = []
        deadline = time.monotonic() + 120
        while not lines or not lines[-1].startswith("fleet ready"):
            line = process.stdout.readline()
            assert line and time.monotonic() < deadline, "".join(lines)
            lines.append(line)
        north, south = (f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[2]}")
        assert lines[-1] == f"fleet ready: entries north {north}, south {south}; Ctrl-C stops it\n"
        assert lines[0].startswith("fleet: north stores started: mysql://hongbao:***@127.0.0.1:"), lines
        key = embedded_secret(data)

        def headers(user: str, admin: bool = False) -> dict[str, str]:
            return {"authorization": f"Bearer {mint(key, user, admin=admin)}"}

        with httpx.Client(timeout=30) as http:
            gid = http.post(f"{south}/v1/groups", json={"members": ["B"]}, headers=headers("S")).json()["group_id"]
            topup = http.post(
                f"{north}/v1/admin/accounts/S/topup", json={"amount_fen": 100}, headers=headers("a", True)
            )
            assert topup.status_code == 200, topup.text
            body = {"count": 1, "total_fen": 100, "group_id": gid}
            order_id = http.post(f"{south}/v1/packets", json=body, headers=headers("S")).json()["order_id"]
            assert order_id[0] == "2"
            assert http.post(f"{north}/v1/packets/{order_id}/pay", headers=headers("S")).status_code == 200
            opened = http.post(f"{north}/v1/packets/{order_id}/open", headers=headers("B"))
            assert opened.json()["amount_fen"] == 100, opened.text
        audit = run_cli(tmp_path, ["fleet", str(fleet), "--data-dir", str(data), "--audit", "--not-drained"])
        assert audit.returncode == 0 and audit.stdout.endswith("audit: 0 violations\n"), audit.stdout + audit.stderr
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if str(data) in _read(p)], "a store outlived the fleet"


def _read(cmdline: Path) -> str:
    """A process's command line ("" once it is gone)."""
    try:
        return cmdline.read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_a_bad_fleet_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """An unknown key, a missing region, a setting the fleet sets per node: each one line, exit 2."""
    bad = {
        "color = 1\n": "unknown key color",
        REGION.format("north", 1): "[south] is missing",
        "[settings]\nport = 1\n" + REGION.format("north", 1) + REGION.format("south", 2): "[settings] cannot set port",
    }
    for text, said in bad.items():
        (tmp_path / "fleet.toml").write_text(text)
        result = run_cli(tmp_path, ["fleet", "fleet.toml"])
        assert result.returncode == 2 and said in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
