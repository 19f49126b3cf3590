"""``make chaos``: the storm against ``hongbao serve --backend production`` while faults come
together, then proof that no fen was lost or made and that the node still serves.

1. Start a MariaDB and a redis-server of the run's own (hongbao.bench.services; Redis keeps a
   dump, so it can come back to an older one), migrate a 2 x 2 layout, and serve it with 2 workers
   and the crash points inside pays and open batches armed (``test_faults``).
2. Play the ``smoke`` storm (users online over WebSocket) for ``--duration`` seconds at ``--rate``
   sends/s while the faults of hongbao.bench.chaos.faults happen: a worker SIGKILLed every few
   seconds, Redis frozen, Redis restarted empty, Redis restarted from an older dump, MariaDB restarted.
3. After the reconciler's window: ``hongbao audit`` of the shards (drained: every receipt credited
   once, every debit with its packet or its refund, money conserved to the fen), the node still
   serving (its master never gave up: a send, pay and open go through), every expected push
   delivered or its user told ``reset`` after it was due, then a graceful stop and the audit again.
4. ``OUT/chaos.json`` and a table: the faults injected (when, how long the node took to be ready
   again), worker restarts, the money, the pushes (delivered, told, untold), and the p99 latency of
   the requests before, during and after each fault.

Exit status: 0 every check held, 1 one did not, 2 the run could not start.
Usage: ``python -m hongbao.bench.chaos [--duration 600] [--rate 10] [--kill-every 6] [--out bench-results/chaos]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from hongbao.bench.chaos.faults import FAULTS, Chaos, Injected, RedisProcess
from hongbao.bench.services import redis_servers
from hongbao.bench.services.mariadb import MariaDb
from hongbao.bench.services.process import BenchError, Process, ServiceError, start_hongbao
from hongbao.bench.storm.cli import storm
from hongbao.bench.storm.runner import StormError, StormOptions
from hongbao.bench.storm.scenario import ScenarioError, load_scenario
from hongbao.bench.storm.stats import percentile
from hongbao.core.sharding import Layout
from hongbao.server.auth import mint
from hongbao.server.composition import auditor, migrate
from hongbao.server.config import load_settings
from rich.console import Console

LAYOUT = Layout(2, 2, prefix="chaos_")
WINDOW_S = 5.0  # the spans before and after a fault whose latency is reported
RECOVER_S = 90.0
#: The storm's push clients reconnect within this (full jitter): a worker dies every few seconds here,
#: so their connections never stay up long enough to reset the backoff, and at the default 30 s cap a
#: client would come back after the storm stopped listening (its pushes due, not lost).
PUSH_BACKOFF_CAP_S = 3.0  # the schedule's last fault may take this long to end after the storm
CRASH_POINTS = "pay_debited=0.004,pay_inserted=0.004,open_committed=0.002"
SERVER_CONFIG = """backend = "production"
mysql_dsn = "{dsn}"
mysql_prefix = "{prefix}"
mysql_dbs = {dbs}
mysql_tables = {tables}
redis_url = "{redis}"
jwt_secret = "{secret}"
test_clock = true
test_faults = "{faults}"
credit_interval_s = 0.05
refund_interval_s = 0.5
reconcile_interval_s = 0.5
reconcile_window_ms = 2000
"""


def _first_pay(url: str, timeout_s: float = 300.0) -> float:
    """Wait until the server has answered a pay (its /metrics); time.monotonic() then."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            text = httpx.get(f"{url}/metrics", timeout=2).text
            if re.search(r'route="/v1/packets/\{order_id\}/pay",status="200"\} [1-9]', text):
                return time.monotonic()
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise StormError("no pay was answered: the load did not start")


def _flow(url: str, secret: str) -> bool:
    """A send, pay and open through the node (top-up and group first): True when every step answered."""

    def client(user: str, *, admin: bool = False) -> httpx.Client:
        token = mint(secret, user, admin=admin)
        return httpx.Client(base_url=url, headers={"authorization": f"Bearer {token}"}, timeout=10)

    tag = secrets.token_hex(3)
    sender, member = f"flow-s-{tag}", f"flow-m-{tag}"
    with client("admin", admin=True) as admin, client(sender) as s, client(member) as m:
        steps = [admin.post(f"/v1/admin/accounts/{sender}/topup", json={"amount_fen": 100})]
        created = s.post("/v1/groups", json={"members": [member]})
        steps.append(created)
        if created.status_code != 201:
            return False
        sent = s.post("/v1/packets", json={"count": 1, "total_fen": 100, "group_id": created.json()["group_id"]})
        steps.append(sent)
        if sent.status_code != 201:
            return False
        order_id = sent.json()["order_id"]
        steps += [_retried(s, f"/v1/packets/{order_id}/pay"), _retried(m, f"/v1/packets/{order_id}/open")]
    return all(r.status_code in (200, 201) for r in steps)


def _retried(client: httpx.Client, path: str, tries: int = 3) -> httpx.Response:
    """POST ``path`` (a pay or an open: idempotent), again when the connection is lost before the
    answer, as a client does: the crash points stay armed after the faults, so a pay or an open
    may still take its worker down with it (CRASH_POINTS). Raises the last loss after ``tries``."""
    for _ in range(tries - 1):
        try:
            return client.post(path)
        except httpx.TransportError:
            continue
    return client.post(path)


def _audit(config: Path) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "hongbao.server.cli", "--config", str(config), "audit"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stdout + done.stderr


def _latency(
    samples: list[list[Any]], faults: list[Injected], started_at: float, t0_wall: float
) -> list[dict[str, Any]]:
    """Per fault: p99 (ms) of the requests that started in the WINDOW_S before it, during it (to
    its recovery), and in the WINDOW_S after."""
    shift = t0_wall - started_at  # the faults' clock (s since the first pay) -> the samples' (s since the load)
    rows = []
    for fault in faults:
        start, end = fault.start + shift, fault.end + shift + (fault.recovered or 0.0)
        spans = {"before": (start - WINDOW_S, start), "during": (start, end), "after": (end, end + WINDOW_S)}
        row: dict[str, Any] = {"name": fault.name, "at_s": round(fault.start, 1)}
        for label, (lo, hi) in spans.items():
            values = sorted(latency * 1000.0 for _, t, latency, *_ in samples if lo <= t < hi)
            row[f"{label}_p99_ms"] = round(percentile(values, 99.0), 1) if values else None
        rows.append(row)
    return rows


def _restarts(log: Path) -> int:
    return len(re.findall(r"worker \d+ exited", log.read_text(errors="replace")))


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One chaos run (see the module); the report. Raises ServiceError / BenchError / StormError
    when it cannot start."""
    out: Path = args.out.resolve()  # the servers it starts run in their own directories
    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
    mariadb = MariaDb(work / "mariadb")
    mariadb.start()
    (port,) = redis_servers.free_ports(1)
    redis = RedisProcess(work / "redis", port)
    redis.start()
    server: Process | None = None
    try:
        secret = secrets.token_hex(32)
        config = SERVER_CONFIG.format(
            dsn=mariadb.dsn,
            prefix=LAYOUT.prefix,
            dbs=LAYOUT.n_dbs,
            tables=LAYOUT.n_tables,
            redis=redis.url,
            secret=secret,
            faults=args.crash_points,
        )
        config_file = work / "var" / "hongbao.toml"
        config_file.parent.mkdir(parents=True)
        config_file.write_text(config)
        settings = load_settings(config_file)
        asyncio.run(migrate(settings))  # before the start: the node refuses shards not migrated
        server = start_hongbao(work / "var", args.workers, config)
        overrides = {
            "duration_s": args.duration,
            "send_rate": args.rate,
            "seed": args.seed,
            "users": args.users,
            "push_backoff_cap_s": PUSH_BACKOFF_CAP_S,
        }
        scenario = load_scenario("smoke", None, overrides)
        opts = StormOptions(server.url, scenario, secret, work / "storm", console=console)
        faults = tuple(f for f in args.faults.split(",") if f)
        chaos = Chaos(server, redis, mariadb, scenario.duration_s, args.kill_every, faults=faults, seed=args.seed)
        first_pay: list[float] = []

        url = server.url

        def schedule() -> None:
            first_pay.append(_first_pay(url))
            first_pay.append(time.time())
            chaos.run(first_pay[0])

        scheduler = threading.Thread(target=schedule, name="chaos", daemon=True)
        scheduler.start()
        summary = storm(opts, auditor(settings), out / "storm", drain_timeout_s=120.0)
        chaos.stop()
        scheduler.join(timeout=RECOVER_S)
        time.sleep(3.0)  # the reconciler's window (2 s), then a run
        serving = server.popen.poll() is None and httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
        flowed = serving and _flow(server.url, secret)
        audit_code, audit_text = _audit(config_file)
        status = server.stop()
        server = None
        final_code, final_text = _audit(config_file)
        samples = [
            s
            for path in sorted((work / "storm").glob("samples-*.json"))
            for s in orjson.loads(path.read_bytes())["samples"]
        ]
        push = summary["push"] or {}
        report = {
            "duration_s": scenario.duration_s,
            "send_rate": scenario.send_rate,
            "workers": args.workers,
            "crash_points": args.crash_points,
            "faults": [f.as_json() for f in chaos.injected],
            "worker_restarts": _restarts(work / "var" / "server.log"),
            "latency": _latency(samples, chaos.injected, summary["load"]["started_at"], first_pay[1])
            if len(first_pay) == 2
            else [],
            "money": {
                "storm_audit_ok": bool(summary["audit"] and summary["audit"]["ok"]),
                "audit_exit": audit_code,
                "audit": audit_text.strip().splitlines()[-12:],
                "stopped_audit_exit": final_code,
                "stopped_audit": final_text.strip().splitlines()[-1:],
            },
            "node": {"serving_after": serving, "flow_after": flowed, "stop_exit": status},
            "pushes": {
                k: push.get(k)
                for k in ("expected", "delivered", "missing", "untold", "resets", "online_users", "missing_examples")
            },
            "operations": {
                op: {k: v for k, v in stats.items() if k in ("ok", "failed", "p50_ms", "p99_ms")}
                for op, stats in summary["operations"].items()
            },
        }
        report["failed"] = _verdict(report)
        report["passed"] = not report["failed"]
        return report
    finally:
        if server is not None:
            server.stop()
        redis.kill(keep_dump=True)
        mariadb.stop()


def _verdict(report: dict[str, Any]) -> list[str]:
    """The checks that failed (empty: the run passed)."""
    failed = []
    money, node, pushes = report["money"], report["node"], report["pushes"]
    if money["audit_exit"] != 0 or money["stopped_audit_exit"] != 0 or not money["storm_audit_ok"]:
        failed.append("money: the audit found violations")
    if not (node["serving_after"] and node["flow_after"] and node["stop_exit"] == 0):
        failed.append("node: not serving after the faults, or not stopping cleanly")
    if pushes.get("untold"):
        failed.append(f"pushes: {pushes['untold']} expected push(es) neither delivered nor told (reset)")
    if any(f["recovered_s"] is None for f in report["faults"]):
        failed.append("recovery: the node was not ready again after a fault")
    return failed


def print_report(report: dict[str, Any], console: Console) -> None:
    """The report as a few lines and a table."""
    console.print(
        f"chaos: {report['duration_s']:.0f} s at {report['send_rate']} sends/s, {report['workers']} workers, "
        f"{len(report['faults'])} faults, {report['worker_restarts']} worker restarts"
    )
    for fault, row in zip(report["faults"], report["latency"], strict=False):
        console.print(
            f"  {fault['name']:24} at {fault['start_s']:6.1f} s  recovered in {fault['recovered_s']} s  p99 before "
            f"{row['before_p99_ms']} / during {row['during_p99_ms']} / after {row['after_p99_ms']} ms"
        )
    money, pushes = report["money"], report["pushes"]
    console.print(
        f"money: audit exit {money['audit_exit']} (stopped: {money['stopped_audit_exit']}): "
        f"{money['audit'][-1] if money['audit'] else ''}"
    )
    console.print(
        f"pushes: {pushes.get('delivered')} of {pushes.get('expected')} delivered, "
        f"{(pushes.get('missing') or 0) - (pushes.get('untold') or 0)} told by a reset, "
        f"{pushes.get('untold')} untold ({pushes.get('resets')} resets)"
    )
    if pushes.get("untold"):  # event, order id, user, due at (s), the user's last reset before (s)
        console.print(f"untold pushes, e.g.: {pushes['missing_examples']}")
    console.print(
        f"node: serving after {report['node']['serving_after']}, a flow through it "
        f"{report['node']['flow_after']}, stop exit {report['node']['stop_exit']}"
    )
    console.print("chaos: PASS" if report["passed"] else "chaos: FAIL: " + "; ".join(report["failed"]))


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The flags of ``python -m hongbao.bench.chaos``."""
    parser = argparse.ArgumentParser(prog="hongbao.bench.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of sends (default: 600)")
    parser.add_argument("--rate", type=float, default=10.0, help="sends a second (default: 10)")
    parser.add_argument("--users", type=int, default=600, help="users of the storm (default: 600)")
    parser.add_argument("--workers", type=int, default=2, help="server workers (default: 2)")
    parser.add_argument("--kill-every", type=float, default=6.0, help="seconds between worker kills (0: none)")
    parser.add_argument(
        "--faults",
        default=",".join(FAULTS),
        help=f"the faults besides the worker kills, comma-separated (default: all: {','.join(FAULTS)}; '' for none)",
    )
    parser.add_argument(
        "--crash-points", default=CRASH_POINTS, help=f"test_faults of the server (default: {CRASH_POINTS})"
    )
    parser.add_argument("--seed", type=int, default=1, help="the storm's and the faults' seed")
    parser.add_argument("--out", type=Path, default=Path("bench-results/chaos"), help="report directory")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run, write ``OUT/chaos.json``, print; the exit status."""
    args = parse(argv)
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
    try:
        report = run(args)
    except (ServiceError, BenchError, StormError, ScenarioError) as exc:
        print(f"chaos: cannot run: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "chaos.json").write_text(json.dumps(report, indent=2) + "\n")
    print_report(report, console)
    return 0 if report["passed"] else 1
