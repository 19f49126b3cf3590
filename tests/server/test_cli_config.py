"""The ``hongbao`` command's configuration and exit statuses, on real processes: an unknown HONGBAO_*
variable warns (its name, never its value) and the command still runs; a password in a DSN or
URL reaches no output; every command exits by the one table of ``hongbao --help`` and the README;
``--version``; docs/settings.md is what server/config.py generates."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import hongbao_native
import jwt
import pytest
from hongbao.bench.services.process import free_port, terminate
from hongbao.core.adapters.sqlite.db import SqliteDb
from hongbao.core.services.crediting import CreditingMode
from hongbao.server.auth import embedded_secret
from hongbao.server.cli import EXIT_STATUSES
from hongbao.server.composition import DB_FILE
from hongbao.server.config import CHOICES, load_settings, setting_names

from tests.server.conftest import SERVING, run_cli

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.mark.parametrize(
    ("argv", "env", "toml", "status", "says"),
    [
        (["migrate", "--mysql-dsn", "DSN"], {}, "", 2, "hongbao migrate: MySQL at mysql://hongbao:***@127.0.0.1:"),
        (["migrate"], {}, 'mysql_dsn = "DSN"', 2, "hongbao migrate: MySQL at mysql://hongbao:***@127.0.0.1:"),
        (["audit"], {"HONGBAO_MYSQL_DSN": "DSN"}, "", 2, "hongbao audit: MySQL at mysql://hongbao:***@127.0.0.1:"),
        (["migrate", "--mysql-dsn", "ftp://u:pw-31@h:1"], {}, "", 2, "got 'ftp://u:***@h:1'"),
        (
            ["token", "--user", "a"],
            {"HONGBAO_REDIS_CLUSTER": "redis://:pw-31@h:1"},
            "",
            2,
            "environment variable HONGBAO_REDIS_CLUSTER='redis://:***@h:1': redis_cluster must be a boolean",
        ),
        (
            ["token", "--user", "a"],
            {},
            'jwt_secrt = "pw-31"',
            2,
            "unknown setting 'jwt_secrt' (did you mean jwt_secret?)",
        ),
        (["storm", "--target", "http://127.0.0.1:9", "--mysql-dsn", "DSN"], {}, "", 2, "does not answer /healthz"),
        (["serve", "--help"], {"HONGBAO_MYSQL_DSN": "DSN", "HONGBAO_JWT_SECRET": "pw-31"}, "", 0, "--mysql-dsn"),
    ],
)
def test_a_password_never_appears_in_any_output(
    tmp_path: Path, argv: list[str], env: dict[str, str], toml: str, status: int, says: str
) -> None:
    """A DSN or URL with a password, from a flag, the environment or the TOML file, in a command that
    fails on it, on the server it names or on something else: the output names it masked (***),
    never the password, in one line, with the table's exit status."""
    dsn = _closed_dsn()
    (tmp_path / "hongbao.toml").write_text(toml.replace("DSN", dsn))
    embedded_secret(tmp_path / "var")  # the storm gets as far as the target
    result = run_cli(
        tmp_path, [dsn if arg == "DSN" else arg for arg in argv], {k: v.replace("DSN", dsn) for k, v in env.items()}
    )
    output = result.stdout + result.stderr
    assert (result.returncode, "pw-31" in output, "Traceback" in output) == (status, False, False), output
    assert says in output
    assert status == 0 or len(result.stderr.splitlines()) == 1, result.stderr


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


@pytest.mark.parametrize(
    ("argv", "status", "says"),
    [
        ([], 2, "the following arguments are required: command"),
        (["serve", "--no-such-flag"], 2, "unrecognized arguments: --no-such-flag"),
        (["serve", "--port", "70000"], 2, "port must be in 0..65535, got 70000"),
        (["token"], 2, "give --user ID (repeatable) or --admin"),
        (["token", "--user", "a"], 0, ""),
        (["migrate"], 2, "hongbao migrate needs the MySQL DSN"),
        (["migrate", "--mysql-dsn", "CLOSED"], 2, "Can't connect to MySQL server"),
        (["migrate", "--cold", "--mysql-dsn", "CLOSED"], 2, "Can't connect to MySQL server"),
        (["audit", "--mysql-dsn", "CLOSED"], 2, "Can't connect to MySQL server"),
        (["audit"], 2, "hongbao audit: no database at var/hongbao.db"),
    ],
)
def test_commands_exit_by_the_table(tmp_path: Path, argv: list[str], status: int, says: str) -> None:
    """Each command's exit status is the table's: 0 done, 2 could not run (bad flags or settings, a
    MySQL unreachable), with a line saying why and no traceback."""
    result = run_cli(tmp_path, [_closed_dsn() if arg == "CLOSED" else arg for arg in argv])
    assert result.returncode == status, result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr


def test_audit_exits_1_on_a_violation(tmp_path: Path) -> None:
    """Books whose balance holds a fen no top-up brought: `hongbao audit` names it and exits 1 (a check failed)."""
    data = tmp_path / "var"
    SqliteDb(data / DB_FILE).close()
    with sqlite3.connect(data / DB_FILE) as conn:
        conn.execute(
            "INSERT INTO t_ledger (user_id, kind, ref, amount_fen, created_at) VALUES ('A', 'topup', 't', 100, 1)"
        )
        conn.execute("INSERT INTO t_account (user_id, balance_fen) VALUES ('A', 101)")
    result = run_cli(tmp_path, ["audit"])
    assert result.returncode == 1, result.stdout + result.stderr
    assert "money made or lost" in result.stdout and result.stdout.splitlines()[-1] != "audit: 0 violations"
    assert "--not-drained" not in result.stderr  # not a credit waiting for the reconciler


def test_serve_whose_workers_cannot_start_exits_2(tmp_path: Path) -> None:
    """Workers that die before serving (their internal listener cannot bind), five times in a row:
    the master gives up with exit 2, as for a setting that cannot work."""
    (tmp_path / "hongbao.toml").write_text('internal_host = "192.0.2.1"\n')  # TEST-NET-1: not this host's
    result = run_cli(tmp_path, ["serve", "--port", "0"])
    assert result.returncode == 2
    assert "workers die before serving (5 times in a row); giving up" in result.stderr


def test_version_names_both_packages(tmp_path: Path) -> None:
    """`hongbao --version` prints hongbao's version and hongbao_native's with its build profile, exit 0."""
    result = run_cli(tmp_path, ["--version"])
    native = f"hongbao_native {hongbao_native.__version__} ({hongbao_native.build_profile} build)"
    assert (result.returncode, result.stdout) == (0, f"hongbao 0.1.0, {native}\n"), result.stderr


def test_help_and_readme_list_the_exit_statuses(tmp_path: Path) -> None:
    """`hongbao --help` ends with the exit status table, and the README's "Exit status" section has the same rows."""
    result = run_cli(tmp_path, ["--help"])
    assert result.returncode == 0
    epilog = " ".join(result.stdout.split("exit status (every command):", 1)[1].split())
    for status, meaning in EXIT_STATUSES:
        assert f"{status} {meaning}" in epilog
    section = (ROOT / "README.md").read_text().split("## Exit status", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d) \| (.+) \|$", section, re.MULTILINE)
    assert rows == [(str(status), meaning) for status, meaning in EXIT_STATUSES]


def test_settings_doc_is_generated_from_the_config(tmp_path: Path) -> None:
    """docs/settings.md is exactly what `python -m hongbao.server.settings_doc` prints, and lists every setting."""
    generated = subprocess.run(
        [sys.executable, "-m", "hongbao.server.settings_doc"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert generated.returncode == 0, generated.stderr
    assert generated.stdout == (ROOT / "docs" / "settings.md").read_text(), (
        "docs/settings.md is stale: python -m hongbao.server.settings_doc > docs/settings.md"
    )
    for name in setting_names():
        assert f"`HONGBAO_{name.upper()}`" in generated.stdout


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


def test_serve_with_a_dsn_is_production_and_a_bad_redis_url_stops_it(tmp_path: Path) -> None:
    """A DSN means the shards for serve as for audit (no embedded server beside it: without redis_url
    serve refuses, exit 2), and a malformed redis_url is one redacted line and exit 2 at start, not
    a traceback in every worker."""
    result = run_cli(tmp_path, ["serve", "--port", "0", "--mysql-dsn", f"mysql://u:{SECRET}@127.0.0.1:1"])
    assert result.returncode == 2 and "production needs --redis-url" in result.stderr, result.stderr
    assert not (tmp_path / "var" / "hongbao.db").exists() and SECRET not in result.stderr + result.stdout
    result = run_cli(tmp_path, ["serve", "--port", "0"], {"HONGBAO_REDIS_URL": f"redis://:{SECRET}@h:port"})
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "hongbao: redis_url must look like redis://[user:password@]host:port, got 'redis://:***@h:port'"
    ]


@pytest.mark.parametrize("url", ["127.0.0.1:8080", "https://h:1", "http://h", "http://h:1/v1", "http://:80"])
def test_a_node_url_that_is_not_http_host_port_stops_serve(tmp_path: Path, url: str) -> None:
    """fleet_node_url is where the other nodes relay to: anything but http://host:port is one line, exit 2."""
    result = run_cli(tmp_path, ["serve", "--port", "0"], {"HONGBAO_FLEET_NODE_URL": url})
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"hongbao: fleet_node_url must look like http://host:port, got {url!r}"
    ]
