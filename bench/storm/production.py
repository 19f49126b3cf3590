"""``make bench-storm STORM_RATE=R``: the storm at one rate on the production backend and on the baseline, in one run.

1. Start a MariaDB and a redis-server of its own, as the integration tests do
   (tests/integration/mariadb.py, redis_servers.py: throwaway directories, loopback, MariaDB with
   the test settings, i.e. no fsync at commit: the figure is not a durability figure).
2. ``hongbao migrate`` a 2 x 4 layout, then ``hongbao serve --backend production --workers 2``
   (money on the shards, queues and push state on Redis).
3. The storm (default ``new-year-eve``, users online over WebSocket), drained, then the shards
   audited (``audit_mysql``); report in ``OUT/hongbao``.
4. The same storm against the baseline on the same MariaDB and Redis (``bench/baselines``,
   nobody online there: it has no push channel); its audit; ``OUT/compare.json``.
5. ``OUT/bench-storm.json``: the headline (opens/s with the audit clean, p50/p99 per operation,
   push p99, the ratios, both audits).

Usage: ``python -m hongbao.bench.storm.production [--scenario new-year-eve] [--rate SENDS_PER_S]
[--duration S] [--set F=V] [--workers 2] [--out bench-results/storm-production]``. Exit status: 0
hongbao's audit is clean, 1 it is not, 2 cannot run. It lives with the tests because it starts its
servers with their helpers.

Sizing: without ``--rate`` the scenario plays its own rate (new-year-eve: 150 sends/s). One rate
tells how each system fares there, not where it gives way: ``make bench-storm`` without
``STORM_RATE`` climbs a ladder of rates to each system's knee (``peak.py``), which is the figure
to compare systems with; an overloaded single run measures the collapse, not the throughput.
"""

from __future__ import annotations

import argparse
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
from hongbao.bench.baselines.compare import baseline_storm, comparison, print_comparison
from hongbao.bench.services.mariadb import MariaDb
from hongbao.bench.services.process import BenchError, Process, free_port
from hongbao.bench.services.redis_servers import standalone
from hongbao.bench.storm.cli import add_scenario_flags, scenario_from, storm
from hongbao.bench.storm.runner import StormError, StormOptions
from hongbao.server.composition import auditor
from hongbao.server.config import load_settings
from rich.console import Console


def serve_production(work: Path, mysql_dsn: str, redis_url: str, workers: int) -> tuple[Process, Path]:
    """Write the server's TOML (2 x 4 shards, a fresh JWT secret), migrate, start ``hongbao serve``;
    (process, config)."""
    config = work / "hongbao.toml"
    config.write_text(
        f'backend = "production"\nmysql_dsn = "{mysql_dsn}"\nmysql_prefix = "storm_"\nmysql_dbs = 2\n'
        f'mysql_tables = 4\nredis_url = "{redis_url}"\njwt_secret = "{secrets.token_hex(32)}"\n'
        f'data_dir = "{work / "var"}"\n'
    )
    cli = [sys.executable, "-m", "hongbao.server.cli", "--config", str(config)]
    subprocess.run([*cli, "migrate"], check=True, capture_output=True, timeout=300)
    port, log = free_port(), work / "server.log"
    with open(log, "wb") as stderr:
        popen = subprocess.Popen(
            [*cli, "serve", "--port", str(port), "--workers", str(workers)], stdout=subprocess.DEVNULL, stderr=stderr
        )
    process = Process("hongbao", f"http://127.0.0.1:{port}", popen, log)
    process.wait_ready("/healthz")
    return process, config


def headline(ours: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """The figures the issue asks for, from hongbao's report and the comparison."""
    ops = ours["operations"]
    return {
        "opens_per_s": ops.get("open", {}).get("rps"),
        "audit_clean": bool(ours["audit"] and ours["audit"]["ok"]),
        "latency_ms": {op: {"p50": e["p50_ms"], "p99": e["p99_ms"]} for op, e in ops.items()},
        "push_p99_ms": ours["push"]["p99_ms"] if ours["push"] else None,
        "push_missing": ours["push"]["missing"] if ours["push"] else None,
        "ratios": result["operations"],
        "baseline_audit_clean": result["baseline_audit"]["ok"],
    }


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Steps 1-5 of the module's docstring; returns the headline."""
    scenario = scenario_from(args)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-storm-") as tmp:
        base = Path(tmp)
        (base / "mariadb").mkdir()
        (base / "redis").mkdir()
        database = MariaDb(base / "mariadb")
        database.start()
        try:
            with standalone(base / "redis") as redis:
                server, config = serve_production(base, database.dsn, redis.url, args.workers)
                settings = load_settings(config)
                try:
                    opts = StormOptions(
                        server.url, scenario, settings.jwt_secret, args.out / "hongbao" / "work", console=console
                    )
                    ours = storm(opts, auditor(settings), args.out / "hongbao", 120.0)
                finally:
                    server.stop()
                theirs, audit = baseline_storm(scenario, database.dsn, redis.url, args.workers, args.out, console)
                result = comparison(ours, theirs, audit, args.workers, args.out)
        finally:
            database.stop()
    print_comparison(result, console)
    summary = headline(ours, result)
    (args.out / "bench-storm.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    """Parse the flags and run; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m hongbao.bench.storm.production", description=__doc__.splitlines()[0]
    )
    add_scenario_flags(parser)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench-results/storm-production"))
    args = parser.parse_args(argv)
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
    try:
        summary = run(args, console)
    except (BenchError, StormError, ValueError, subprocess.CalledProcessError) as exc:
        console.print(f"bench-storm: {exc}")
        return 2
    print(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
    return 0 if summary["audit_clean"] else 1


if __name__ == "__main__":
    sys.exit(main())
