"""The process model and the command line: workers restarted when killed, graceful stop,
`hongbao token` minting with the directory's key, configuration precedence."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import jwt
import pytest
from hongbao.core.adapters.sqlite.audit import audit_sqlite
from hongbao.server.auth import embedded_secret
from hongbao.server.config import Settings, load_settings

from tests.server.conftest import Server, stop_server
from tests.server.flows import balance, group, ok, paid_packet, set_mode, topup


def _workers(server: Server) -> set[int]:
    path = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
    return {int(pid) for pid in path.read_text().split()}


def _wait_for(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_killed_worker_is_replaced_and_money_is_intact(make_server: Callable[..., Server]) -> None:
    """SIGKILL one of two workers: the master starts another, and no receipt is lost or doubled."""
    server = make_server(workers=2)
    _wait_for(lambda: len(_workers(server)) == 2)
    gid = group(server, "S", ["B", "C"])
    order_id = paid_packet(server, "S", {"count": 2, "total_fen": 200, "group_id": gid}, fund_fen=200)
    with server.client("B") as b:
        first = ok(b.post(f"/v1/packets/{order_id}/open"))["amount_fen"]
    victim = min(_workers(server))
    os.kill(victim, signal.SIGKILL)
    _wait_for(lambda: victim not in _workers(server) and len(_workers(server)) == 2)
    for _ in range(6):  # whichever worker answers, the repeat returns the first amount
        with server.client("B") as b:
            assert ok(b.post(f"/v1/packets/{order_id}/open"))["amount_fen"] == first
    with server.client("C") as c:
        second = ok(c.post(f"/v1/packets/{order_id}/open"))["amount_fen"]
    assert first + second == 200
    _wait_for(lambda: balance(server, "B") + balance(server, "C") == 200)
    assert "exited" in server.log() and "restarting" in server.log()


def test_sigterm_stops_gracefully(make_server: Callable[..., Server]) -> None:
    """SIGTERM: the master stops its workers and exits 0; the port is free again."""
    server = make_server(workers=2)
    workers = _workers(server)
    assert stop_server(server) == 0
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{server.url}/healthz", timeout=1)


@pytest.mark.parametrize("mode", ["realtime_large", "deferred"])
def test_sigterm_credits_what_is_owed_before_exiting(make_server: Callable[..., Server], mode: str) -> None:
    """SIGTERM with credits still owed, the credit job and the reconciler idle for a minute: queued
    ones (realtime_large, shares under its threshold) and, in the deferred mode, receipts only the
    reconciler credits (a newcomer's audit found them pending). The workers credit them all before
    they exit, so the stopped database passes the drained audit."""
    server = make_server(workers=2, extra_config="credit_interval_s = 60.0\nreconcile_interval_s = 60.0\n")
    if mode != "realtime_large":
        set_mode(server, mode)
        time.sleep(1.1)  # every worker has picked the switch up (flags sync once a second)
    members = [f"m{i}" for i in range(20)]
    gid = group(server, "S", members)
    order_id = paid_packet(server, "S", {"count": 20, "total_fen": 2000, "group_id": gid}, fund_fen=2000)
    for member in members:
        with server.client(member) as client:
            ok(client.post(f"/v1/packets/{order_id}/open"))
    assert stop_server(server) == 0
    report = audit_sqlite(server.data_dir, drained=True)
    assert report.ok, report.lines()


def test_second_server_on_a_served_port_is_refused(server: Server) -> None:
    """A second `hongbao serve` on a port already served exits 2 (it cannot run) instead of silently sharing it."""
    port = server.url.rsplit(":", 1)[1]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hongbao.server.cli",
            "serve",
            "--port",
            port,
            "--data-dir",
            str(server.data_dir / "other"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "already served" in result.stderr


def test_token_command_mints_with_the_directory_key(tmp_path: Path) -> None:
    """`hongbao token --user a --user b --admin` prints three tokens signed with ./var/jwt.key (and says
    when it had to create that key)."""
    result = subprocess.run(
        [sys.executable, "-m", "hongbao.server.cli", "token", "--user", "a", "--user", "b", "--admin"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "no key in var/ yet: created var/jwt.key" in result.stderr  # a typo in --data-dir does not go unnoticed
    secret = embedded_secret(tmp_path / "var")
    claims = [jwt.decode(t, secret, algorithms=["HS256"]) for t in result.stdout.split()]
    assert [(c["sub"], c.get("role")) for c in claims] == [("a", None), ("b", None), ("admin", "admin")]
    assert oct((tmp_path / "var" / "jwt.key").stat().st_mode & 0o777) == "0o600"
    bad = subprocess.run(
        [sys.executable, "-m", "hongbao.server.cli", "token", "--user", "not valid"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "user id" in bad.stderr


def test_settings_precedence(tmp_path: Path) -> None:
    """Defaults < TOML file < HONGBAO_* environment < flags; an unknown key in the file is refused,
    an unknown variable ignored with a warning."""
    config = tmp_path / "hongbao.toml"
    config.write_text("port = 9000\nworkers = 3\n[limits]\nmax_count = 50\n")
    settings = load_settings(config, env={"HONGBAO_WORKERS": "4", "HONGBAO_TEST_CLOCK": "true"}, flags={"port": 9100})
    assert (settings.port, settings.workers, settings.test_clock, settings.limits.max_count) == (9100, 4, True, 50)
    assert load_settings(None, env={}) == Settings()
    warnings: list[str] = []
    assert load_settings(None, env={"HONGBAO_NO_SUCH_THING": "1"}, warn=warnings.append) == Settings()
    assert warnings == ["ignoring the environment variable HONGBAO_NO_SUCH_THING: no setting is called no_such_thing"]
    config.write_text("no_such_thing = 1\n")
    with pytest.raises(ValueError, match="unknown setting 'no_such_thing'"):
        load_settings(config, env={})


def test_a_mysql_dsn_means_production_for_the_audit_and_the_storm(tmp_path: Path) -> None:
    """With ``dsn_means_production`` (hongbao audit, hongbao storm) a DSN from any source selects the
    production backend unless a backend is set; an embedded one set with a DSN is refused, naming
    both sources. Without it (hongbao serve) nothing changes."""
    dsn = "mysql://u:secret@h:1"
    config = tmp_path / "hongbao.toml"
    config.write_text(f'mysql_dsn = "{dsn}"\n')
    assert load_settings(None, env={"HONGBAO_MYSQL_DSN": dsn}, dsn_means_production=True).backend == "production"
    assert load_settings(config, env={}, dsn_means_production=True).backend == "production"
    assert load_settings(None, env={}, flags={"mysql_dsn": dsn}, dsn_means_production=True).backend == "production"
    assert load_settings(None, env={}, dsn_means_production=True).backend == "embedded"
    assert load_settings(config, env={}).backend == "embedded"
    both = {"backend": "production", "mysql_dsn": dsn}
    assert load_settings(None, env={}, flags=both, dsn_means_production=True).backend == "production"
    config.write_text('backend = "embedded"\n')
    with pytest.raises(ValueError) as refused:
        load_settings(config, env={"HONGBAO_MYSQL_DSN": dsn}, dsn_means_production=True)
    assert str(refused.value) == (
        f'HONGBAO_MYSQL_DSN means the production backend, but backend = "embedded" in {config} was given: '
        "drop one of them"
    )


def test_workers_default_to_one_per_core_on_production() -> None:
    """No --workers: one worker per core on the production backend, one on the embedded one; a number given wins."""
    cores = os.cpu_count() or 1
    assert load_settings(None, env={}).worker_count() == 1
    assert load_settings(None, env={"HONGBAO_BACKEND": "production"}).worker_count() == cores
    assert load_settings(None, env={"HONGBAO_BACKEND": "production"}, flags={"workers": 3}).worker_count() == 3
    assert load_settings(None, env={"HONGBAO_WORKERS": "2"}).worker_count() == 2
    with pytest.raises(ValueError, match=r"workers must be in 0\.\.1024 \(0: automatic\), got -1"):
        load_settings(None, env={"HONGBAO_WORKERS": "-1"})


def test_metrics_count_requests_across_workers(make_server: Callable[..., Server]) -> None:
    """/metrics merges every worker's counters: 20 top-ups show as 20 whichever worker is scraped."""
    server = make_server(workers=2)
    for i in range(20):
        topup(server, "M", 1, key=f"k{i}")
    time.sleep(1.2)  # each worker writes its snapshot once a second
    text = httpx.get(f"{server.url}/metrics", timeout=5).text
    line = next(
        x
        for x in text.splitlines()
        if x.startswith(
            'hongbao_http_requests_total{method="POST",route="/v1/admin/accounts/{user_id}/topup",status="200"}'
        )
    )
    assert float(line.rsplit(" ", 1)[1]) == 20.0
    assert "hongbao_http_request_duration_seconds_bucket" in text
    assert "hongbao_credits_pending 0.0" in text.splitlines()


def test_workers_exit_when_the_master_is_killed(make_server: Callable[..., Server]) -> None:
    """SIGKILL the master: its workers stop within seconds and the port can be served again."""
    server = make_server(workers=2)
    workers = _workers(server)
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait(timeout=10)
    _wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers), timeout_s=15)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{server.url}/healthz", timeout=1)
    server.process = subprocess.Popen(  # a new master on the same port and data directory, stopped by the fixture
        [
            sys.executable,
            "-m",
            "hongbao.server.cli",
            "serve",
            "--port",
            server.url.rsplit(":", 1)[1],
            "--data-dir",
            str(server.data_dir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_for(lambda: _healthy(server.url))


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_workers_get_the_hard_open_files_limit(make_server: Callable[..., Server]) -> None:
    """Started with a soft RLIMIT_NOFILE of 256, the master raises it to the hard limit for
    itself and its workers (a connection is a descriptor)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard <= 2048:
        pytest.skip(f"the hard limit ({hard}) leaves nothing to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        server = make_server(extra_config="max_connections = 500")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    def limits(pid: int) -> tuple[int, int]:
        line = next(
            ln for ln in Path(f"/proc/{pid}/limits").read_text().splitlines() if ln.startswith("Max open files")
        )
        return int(line.split()[3]), int(line.split()[4])

    assert [limits(pid) for pid in (server.process.pid, *_workers(server))] == [(hard, hard)] * 2


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["audit", "--backend", "production"], "hongbao audit needs the MySQL DSN"),
        (["audit", "--backend", "production", "--mysql-dsn", "foo://u:secret@h:1"], "got 'foo://u:***@h:1'"),
        (["migrate", "--mysql-dsn", "mysql://u:secret@h:badport"], "got 'mysql://u:***@h:badport'"),
        (["--config", "/nonexistent/hongbao.toml", "audit"], "/nonexistent/hongbao.toml: No such file or directory"),
        (["serve", "--backend", "production", "--mysql-dsn", "mysql://u:p@h:1"], "needs --redis-url redis://host:port"),
        (
            ["audit", "--backend", "embedded", "--mysql-dsn", "mysql://u:secret@h:1"],
            "--mysql-dsn means the production backend, but --backend embedded was given: drop one of them",
        ),
        (
            ["storm", "--target", "http://127.0.0.1:9", "--backend", "embedded", "--mysql-dsn", "mysql://u:secret@h:1"],
            "hongbao storm: --mysql-dsn means the production backend, but --backend embedded was given",
        ),
    ],
)
def test_a_command_that_cannot_run_exits_2_with_one_line(tmp_path: Path, argv: list[str], says: str) -> None:
    """Misconfigured commands (no or a malformed DSN, a missing --config file, a half-given production
    backend, a DSN with an explicit embedded backend) print one line naming the problem, never a
    password, and exit 2 (1 is the audit's violation)."""
    result = subprocess.run(
        [sys.executable, "-m", "hongbao.server.cli", *argv], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert (result.returncode, len(result.stderr.splitlines())) == (2, 1), result.stderr
    assert says in result.stderr and "secret" not in result.stderr
