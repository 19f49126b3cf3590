"""The server's logs (docs/operations.md "Logs"): access lines (off by default), the audit of
admin actions, JSON lines, the start banner with its masked passwords and the test-clock warning,
a log file reopened on SIGHUP, and a node that survives SIGHUP either way."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from hongbao.server.cli import _settings, parser
from hongbao.server.config import ConfigError, load_settings

from tests.server.conftest import Server, finish_server
from tests.ws.wire import handshake, upgrade_request

SERVING = re.compile(r"serving http://127\.0\.0\.1:(\d+) with")
ACCESS = r"INFO hongbao\.access pid=\d+ "


def _requests(server: Server) -> list[str]:
    """Requests of every kind, as a user, an admin, nobody and over a WebSocket upgrade (with
    ``?token=`` and with a bad token); the tokens they carried."""
    user, admin = server.token("alice"), server.token("boss", admin=True)
    with server.client("alice") as alice, server.client("boss", admin=True) as boss:
        assert alice.get("/v1/balance").status_code == 200
        assert boss.post("/v1/admin/accounts/alice/topup", json={"amount_fen": 500}).status_code == 200
        assert alice.get("/v1/packets/12345678901234567890").status_code in (400, 404)
        assert httpx.get(f"{server.url}/nowhere").status_code == 404
    assert handshake(server, upgrade_request(server, target=f"/v1/ws?token={user}")).status == 101
    assert handshake(server, upgrade_request(server, token=user[:-2] + "xx")).status == 401
    return [user, admin]


def _spawn(data_dir: Path, *flags: str, log: Path, env: dict[str, str] | None = None) -> Server:
    """``hongbao serve`` on a free port with ``flags``, its log read from ``log`` (stderr, or the
    ``--log-file`` the flags name), once it serves."""
    data_dir.mkdir(parents=True, exist_ok=True)
    stderr = data_dir / "stderr.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "hongbao.server.cli", "serve", "--port", "0", "--data-dir", str(data_dir), *flags],
        stdout=subprocess.DEVNULL,
        stderr=open(stderr, "wb"),
        env={**{k: v for k, v in os.environ.items() if not k.startswith("HONGBAO_")}, **(env or {})},
    )
    deadline = time.monotonic() + 30
    while not (found := SERVING.search(log.read_text() if log.exists() else "")):
        assert process.poll() is None and time.monotonic() < deadline, stderr.read_text()
        time.sleep(0.05)
    return Server(f"http://127.0.0.1:{found.group(1)}", data_dir, process, log)


def _until(predicate: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_access_lines_hold_route_status_ms_and_user_and_never_a_token(make_server: Callable[..., Server]) -> None:
    """With access_log on: one line per request and per upgrade (template, path, status, ms, user);
    no token anywhere in the log."""
    server = make_server(extra_config="access_log = true\n")
    tokens = _requests(server)
    log = server.log()
    assert re.search(ACCESS + r"GET /v1/balance path=/v1/balance status=200 ms=\d+\.\d{3} user=alice\n", log), log
    assert re.search(
        ACCESS + r"POST /v1/admin/accounts/\{user_id\}/topup path=/v1/admin/accounts/alice/topup status=200 "
        r"ms=\d+\.\d{3} user=boss\n",
        log,
    ), log
    assert re.search(
        ACCESS
        + r"GET /v1/packets/\{order_id\} path=/v1/packets/12345678901234567890 status=4\d\d ms=[\d.]+ user=alice\n",
        log,
    ), log
    assert re.search(ACCESS + r"GET unmatched path=/nowhere status=404 ms=[\d.]+ user=-\n", log), log
    assert re.search(ACCESS + r"GET /v1/ws path=/v1/ws status=101 ms=[\d.]+ user=alice\n", log), log
    assert re.search(ACCESS + r"GET /v1/ws path=/v1/ws status=401 ms=[\d.]+ user=-\n", log), log
    assert len(re.findall(ACCESS + r"GET /v1/ws ", log)) == 2, log
    for token in tokens:
        assert token not in log and token.split(".")[2] not in log


def test_access_log_is_off_by_default_and_the_flag_switches_it(server: Server, tmp_path: Path) -> None:
    """By default no access line is written (the audit line still is); --access-log and
    --no-access-log win over the TOML file."""
    _requests(server)
    log = server.log()
    assert "hongbao.access" not in log and "hongbao.audit" in log, log
    config = tmp_path / "on.toml"
    config.write_text("access_log = true\n")
    off = parser(with_storm=False).parse_args(["--config", str(config), "serve", "--no-access-log"])
    assert _settings(off).access_log is False
    assert _settings(parser(with_storm=False).parse_args(["serve", "--access-log"])).access_log is True


def test_admin_actions_leave_audit_lines(server: Server) -> None:
    """Top-up, crediting mode, clock move and push each leave an audit line naming the admin,
    the arguments and the outcome; refused attempts are audited too, as warnings."""
    now_ms = int(time.time() * 1000) + 60_000
    with server.client("ops", admin=True) as ops, server.client("mallory") as mallory:
        topup = ops.post("/v1/admin/accounts/alice/topup", json={"amount_fen": 5000}, headers={"idempotency-key": "t1"})
        assert topup.status_code == 200
        assert ops.post("/v1/admin/crediting-mode", json={"mode": "queued"}).status_code == 200
        assert ops.post("/v1/admin/clock", json={"now_ms": now_ms}).status_code == 200
        assert ops.post("/v1/admin/push", json={"user_id": "alice", "event": "note", "data": "x" * 600}).is_success
        assert mallory.post("/v1/admin/accounts/mallory/topup", json={"amount_fen": 10**6}).status_code == 403
    assert httpx.post(f"{server.url}/v1/admin/crediting-mode", json={"mode": "deferred"}).status_code == 401
    log = server.log()
    audit = r"hongbao\.audit pid=\d+ "
    expected = [
        "INFO "
        + audit
        + r"user=ops action=POST /v1/admin/accounts/\{user_id\}/topup path=/v1/admin/accounts/alice/topup "
        r'args={"idempotency_key":"t1","amount_fen":5000} status=200 '
        r'outcome={"user_id":"alice","balance_fen":5000,"applied":true}\n',
        "INFO " + audit + r"user=ops action=POST /v1/admin/crediting-mode path=/v1/admin/crediting-mode "
        r'args={"mode":"queued"} status=200 outcome={"mode":"queued"}\n',
        "INFO " + audit + r"user=ops action=POST /v1/admin/clock path=/v1/admin/clock "
        f'args={{"now_ms":{now_ms}}} status=200 ' + r'outcome={"now_ms":\d+,"frozen":false}\n',
        "INFO " + audit + r"user=ops action=POST /v1/admin/push path=/v1/admin/push "
        r'args={"user_id":"alice","event":"note","data":"<602 bytes of JSON>"} status=200 outcome={"user_id"',
        "WARNING " + audit + r"user=mallory action=POST /v1/admin/accounts/\{user_id\}/topup "
        r'path=/v1/admin/accounts/mallory/topup args={"body_bytes":\d+} status=403 outcome={"error"',
        "WARNING " + audit + r"user=- action=POST /v1/admin/crediting-mode path=/v1/admin/crediting-mode "
        r'args={"body_bytes":\d+} status=401 outcome={"error":{"code":"unauthorized"',
    ]
    for line in expected:
        assert re.search(line, log), (line, log)
    assert len(re.findall(audit, log)) == len(expected), log


def test_json_lines_parse_with_structured_fields(make_server: Callable[..., Server]) -> None:
    """log_format = "json": every line of the master and the worker is one JSON object with time,
    level, logger and message; access and audit lines carry their fields as JSON values."""
    server = make_server(extra_config='log_format = "json"\naccess_log = true\n')
    _requests(server)
    lines = [json.loads(line) for line in server.log().splitlines()]
    assert all({"time", "level", "logger", "message", "pid"} <= line.keys() for line in lines), lines
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", lines[0]["time"]), lines[0]
    assert {"hongbao.master", "hongbao.worker", "hongbao.access", "hongbao.audit"} <= {x["logger"] for x in lines}
    balance = next(x for x in lines if x["logger"] == "hongbao.access" and x["route"] == "/v1/balance")
    assert (balance["method"], balance["path"], balance["status"], balance["user"]) == (
        "GET",
        "/v1/balance",
        200,
        "alice",
    )
    assert isinstance(balance["ms"], float) and balance["ms"] >= 0
    topup = next(x for x in lines if x["logger"] == "hongbao.audit")
    assert (topup["user"], topup["args"], topup["status"]) == ("boss", {"amount_fen": 500}, 200)
    assert topup["outcome"]["balance_fen"] == 500 and topup["level"] == "INFO"


def test_banner_masks_passwords_and_says_where_everything_is(tmp_path: Path) -> None:
    """The master's start line names version, backend, DSNs with their passwords as ***, layout,
    address, workers, data directory and region; no password is anywhere in the log and, the
    clock being real, there is no test-clock warning."""
    log = tmp_path / "serve.log"
    server = _spawn(
        tmp_path / "data",
        "--backend",
        "production",
        "--mysql-dsn",
        "mysql://hb:s3cret-pw@127.0.0.1:1",
        "--redis-url",
        "redis://:r3dis-pw@127.0.0.1:2",
        "--workers",
        "1",
        "--log-file",
        str(log),
        log=log,
    )
    try:
        text = server.log()
    finally:
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0
    assert re.search(
        r"hongbao \d+\.\d+\.\d+\S* starting: backend=production mysql=mysql://hb:\*\*\*@127\.0\.0\.1:1 "
        r"redis=redis://:\*\*\*@127\.0\.0\.1:2 layout=4 dbs x 4 tables listen=127\.0\.0\.1:\d+ workers=1 "
        rf"data_dir={re.escape(str(tmp_path / 'data'))} region=1 \(north\) log=text to {re.escape(str(log))} "
        r"access_log=off\n",
        text,
    ), text
    text = log.read_text() + (tmp_path / "data" / "stderr.log").read_text()
    assert "s3cret-pw" not in text and "r3dis-pw" not in text and "test_clock" not in text, text


def test_test_clock_start_warns_it_is_not_for_production(tmp_path: Path) -> None:
    """HONGBAO_TEST_CLOCK=true: the master warns that admins can move the clock and that it must
    never be used in production."""
    log = tmp_path / "data" / "stderr.log"
    server = _spawn(tmp_path / "data", "--workers", "1", log=log, env={"HONGBAO_TEST_CLOCK": "true"})
    finish_server(server)
    assert re.search(
        r"WARNING hongbao\.master pid=\d+ test_clock is on: any admin can move this server's time "
        r"\(POST /v1/admin/clock\).*never use it in production\n",
        server.log(),
    ), server.log()


def _worker_pids(text: str) -> set[int]:
    return {int(pid) for pid in re.findall(r"pid=(\d+) worker listening", text)}


def test_sighup_reopens_the_log_file_in_the_master_and_every_worker(tmp_path: Path) -> None:
    """logrotate's move and SIGHUP: the master and both workers write to a new file of the same
    name (the old one gets no more lines); the node keeps serving and stops cleanly."""
    log = tmp_path / "hongbao.log"
    server = _spawn(tmp_path / "data", "--workers", "2", "--access-log", "--log-file", str(log), log=log)
    try:
        _until(lambda: len(_worker_pids(log.read_text())) == 2, "two workers listening")
        workers = _worker_pids(log.read_text())
        rotated = log.rename(tmp_path / "hongbao.log.1")
        server.process.send_signal(signal.SIGHUP)
        _until(log.exists, "the log file made again")

        def answered_by_both() -> bool:
            for _ in range(10):  # a new connection each: SO_REUSEPORT spreads them over the workers
                assert httpx.get(f"{server.url}/healthz").status_code == 200
            return {int(pid) for pid in re.findall(r"pid=(\d+) GET /healthz", log.read_text())} == workers

        _until(answered_by_both, "access lines of both workers in the new file")
        said = rf"hongbao\.master .*SIGHUP: log file {re.escape(str(log))} reopened by the master, and passed on to 2 "
        assert re.search(said, log.read_text()), log.read_text()
        rotated_size = rotated.stat().st_size
        assert httpx.get(f"{server.url}/healthz").status_code == 200
    finally:
        server.process.send_signal(signal.SIGTERM)
        status = server.process.wait(30)
    assert status == 0 and "Traceback" not in log.read_text(), log.read_text()
    assert rotated.stat().st_size == rotated_size and "stopped" in log.read_text()


def test_sighup_without_a_log_file_leaves_the_node_serving(make_server: Callable[..., Server]) -> None:
    """Logging to stderr, SIGHUP to the master and to a worker changes nothing: both live on, the
    node answers, and it stops with status 0."""
    server = make_server(workers=2)
    _until(lambda: len(_worker_pids(server.log())) == 2, "two workers listening")
    workers = _worker_pids(server.log())
    server.process.send_signal(signal.SIGHUP)
    os.kill(min(workers), signal.SIGHUP)
    _until(lambda: "SIGHUP: logging to stderr, no log file to reopen" in server.log(), "the master's SIGHUP line")
    time.sleep(0.5)  # a process the signal killed would be gone by now
    assert server.process.poll() is None and httpx.get(f"{server.url}/healthz").status_code == 200
    assert _worker_pids(server.log()) == workers and "exited" not in server.log(), server.log()
    for pid in workers:
        os.kill(pid, 0)  # still there


def test_log_settings_are_checked() -> None:
    """A log format or level the server does not know is refused before it starts."""
    with pytest.raises(ConfigError, match="log_format must be text or json"):
        load_settings(None, env={"HONGBAO_LOG_FORMAT": "xml"})
    with pytest.raises(ConfigError, match="log_level must be one of"):
        load_settings(None, env={"HONGBAO_LOG_LEVEL": "loud"})
