"""The ``hongbao`` command's configuration, on real processes: an unknown HONGBAO_* variable warns
(its name, never its value) and the command still runs; a Redis password reaches no log line; a
key the TOML file sets twice warns."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import jwt
from hongbao.bench.services.process import free_port, terminate
from hongbao.core.services.crediting import CreditingMode
from hongbao.server.auth import embedded_secret
from hongbao.server.config import CHOICES, load_settings

from tests.server.conftest import SERVING, run_cli

SECRET = "s3cret@pw-31"  # a raw "@" in it, as people write them


def test_an_unknown_variable_warns_and_the_command_still_runs(tmp_path: Path) -> None:
    """HONGBAO_MYSQL_DNS (a misspelt DSN) and HONGBAO_TOKEN: one warning each naming the variable (and
    the setting meant, when close), never the value; the token is still minted, exit 0."""
    env = {"HONGBAO_MYSQL_DNS": f"mysql://user:{SECRET}@127.0.0.1:1", "HONGBAO_TOKEN": "tok-value-17"}
    result = run_cli(tmp_path, ["token", "--user", "x"], env)
    assert result.returncode == 0, result.stderr
    assert jwt.decode(result.stdout.strip(), embedded_secret(tmp_path / "var"), algorithms=["HS256"])["sub"] == "x"
    warnings = [line for line in result.stderr.splitlines() if line.startswith("hongbao: warning:")]
    assert warnings == [
        "hongbao: warning: ignoring the environment variable HONGBAO_MYSQL_DNS: no setting is called mysql_dns "
        "(did you mean HONGBAO_MYSQL_DSN?)",
        "hongbao: warning: ignoring the environment variable HONGBAO_TOKEN: no setting is called token",
    ]
    assert "pw-31" not in result.stderr and "tok-value-17" not in result.stderr


def _closed_dsn() -> str:
    return f"mysql://hongbao:{SECRET}@127.0.0.1:{free_port()}"


def test_serve_starting_degraded_masks_the_redis_password(tmp_path: Path) -> None:
    """`hongbao serve --backend production` with MySQL and Redis unreachable starts degraded: its two
    warnings name both servers, the Redis URL's password masked, and it stops with exit 0."""
    redis_port = free_port()
    env = {
        "PATH": "/usr/bin:/bin",
        "HONGBAO_MYSQL_DSN": _closed_dsn(),
        "HONGBAO_REDIS_URL": f"redis://:{SECRET}@127.0.0.1:{redis_port}",
    }
    log = tmp_path / "serve.log"
    with open(log, "wb") as err:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hongbao.server.cli",
                "serve",
                "--backend",
                "production",
                "--port",
                "0",
                "--workers",
                "1",
            ],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
    try:
        deadline = time.monotonic() + 30
        while not SERVING.search(log.read_text()) and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.05)
    finally:
        status = terminate(server)
    text = log.read_text()
    assert status == 0 and SERVING.search(text), text
    assert f"Redis at redis://:***@127.0.0.1:{redis_port} is unreachable" in text
    assert "MySQL at 127.0.0.1:" in text and "pw-31" not in text


def test_crediting_mode_choices_are_the_modes() -> None:
    """The values config.py accepts for crediting_mode are exactly CreditingMode's."""
    assert CHOICES["crediting_mode"] == tuple(mode.value for mode in CreditingMode)


def test_a_key_set_twice_in_the_toml_file_warns(tmp_path: Path) -> None:
    """Sections are flattened: a key set at the top level and again under a section warns, and the last one counts."""
    config = tmp_path / "h.toml"
    config.write_text("port = 9001\n[server]\nport = 9002\n[mysql]\nmysql_dbs = 2\n")
    warnings: list[str] = []
    settings = load_settings(config, env={}, warn=warnings.append)
    assert (settings.port, settings.mysql_dbs) == (9002, 2)
    assert warnings == [f"config file {config}: port is set at the top level and in [server]: the last one counts"]
