"""The bare-metal deployment files (deploy/) agree with the code: systemd accepts the units, their
commands are ``hongbao`` commands, the example TOML is real settings, the stop timeout outlasts
the server's drain, the descriptor limit covers the connections, Prometheus scrapes each node."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hongbao.server.cli import parser
from hongbao.server.composition import check_production
from hongbao.server.config import Settings, load_settings
from hongbao.server.master import FD_RESERVE
from hongbao.server.worker import FINISH_CREDITS_S, GRACE_S

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNITS = DEPLOY / "systemd"
OPERATIONS = DEPLOY.parent / "docs" / "operations.md"
BINARY = "/opt/hongbao/bin/hongbao"  # where docs/operations.md installs the venv


def _unit(name: str) -> dict[str, dict[str, list[str]]]:
    """A unit file's sections -> keys -> values (a key may repeat, as After= does)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for line in (UNITS / name).read_text().splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
        elif line and not line.startswith("#"):
            key, _, value = line.partition("=")
            current.setdefault(key, []).append(value)
    return sections


def _command(name: str) -> list[str]:
    """The argv of the unit's only ExecStart."""
    (line,) = _unit(name)["Service"]["ExecStart"]
    return shlex.split(line)


def _settings() -> Settings:
    """The example TOML under the flags of the node's ExecStart."""
    args = parser().parse_args(_command("hongbao.service")[1:])
    return load_settings(DEPLOY / "hongbao.toml", env={}, flags={"backend": args.backend})


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_verifies_the_units_without_a_word(tmp_path: Path) -> None:
    """``systemd-analyze verify`` accepts both units silently (on copies naming this venv's hongbao)."""
    hongbao = Path(sys.executable).parent / "hongbao"
    for unit in UNITS.glob("*.service"):
        (tmp_path / unit.name).write_text(unit.read_text().replace(BINARY, str(hongbao)))
    done = subprocess.run(
        ["systemd-analyze", "verify", *sorted(str(p) for p in tmp_path.iterdir())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_the_units_run_hongbao_serve_after_hongbao_migrate() -> None:
    """The node runs ``hongbao serve --backend production --config FILE`` and the oneshot before it
    ``hongbao migrate`` with the same file; both parse as hongbao commands."""
    serve, migrate = _command("hongbao.service"), _command("hongbao-migrate.service")
    assert serve[0] == migrate[0] == BINARY
    node, schema = parser().parse_args(serve[1:]), parser().parse_args(migrate[1:])
    assert (node.command, node.backend, node.config) == ("serve", "production", Path("/etc/hongbao/hongbao.toml"))
    assert (schema.command, schema.config) == ("migrate", node.config)
    unit = _unit("hongbao.service")
    assert "hongbao-migrate.service" in unit["Unit"]["Requires"]
    assert "hongbao-migrate.service" in " ".join(unit["Unit"]["After"]).split()
    assert _unit("hongbao-migrate.service")["Service"]["Type"] == ["oneshot"]
    assert unit["Service"]["User"] == ["hongbao"] and unit["Service"]["Restart"] == ["on-failure"]


def test_the_example_toml_is_real_settings() -> None:
    """The example TOML loads with the server's own loader (unknown keys and bad values are
    refused there) and names what the production backend needs."""
    settings = _settings()
    check_production(settings)
    assert (settings.backend, settings.data_dir) == ("production", Path("/var/lib/hongbao"))
    assert settings.jwt_secret and settings.internal_secret  # shared by the nodes, not per data directory


def test_a_stop_outlasts_the_drain_and_the_descriptors_cover_the_connections() -> None:
    """SIGTERM goes to the master alone, systemd's SIGKILL comes after the master's own deadline
    (drain + crediting + 1 s, as docs/operations.md says), and LimitNOFILE covers max_connections
    + the master's reserve."""
    service = _unit("hongbao.service")["Service"]
    deadline = GRACE_S + FINISH_CREDITS_S + 1
    assert service["KillMode"] == ["mixed"] and service["KillSignal"] == ["SIGTERM"]
    assert float(service["TimeoutStopSec"][0]) > deadline + 5  # a margin for the master's own exit
    stop = f"{deadline:g} s after the signal ({GRACE_S:g} + {FINISH_CREDITS_S:g} + 1; logged)"
    assert stop in " ".join(OPERATIONS.read_text().split())
    assert int(service["LimitNOFILE"][0]) >= _settings().max_connections + FD_RESERVE


def test_prometheus_scrapes_metrics_on_each_nodes_port() -> None:
    """The scrape job reads /metrics from every target at the port the example TOML serves on."""
    (job,) = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())["scrape_configs"]
    targets = [t for group in job["static_configs"] for t in group["targets"]]
    assert job["metrics_path"] == "/metrics" and len(targets) >= 2
    assert {target.rpartition(":")[2] for target in targets} == {str(_settings().port)}
