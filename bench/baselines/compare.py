"""One storm, played against hongbao and against the baseline in the same run: the ratios and both audits.

``python -m hongbao.bench.baselines.compare --mysql-dsn DSN --redis-url URL [--scenario smoke]
[--set FIELD=VALUE ...] [--workers 1] [--out bench-results/compare]``

1. hongbao: ``hongbao serve --workers N`` (embedded backend) in a fresh data directory; the
   storm (load, drain, audit, report in ``OUT/hongbao``).
2. the baseline: its database and keys on DSN / URL are reset first (``hongbao_baseline``,
   ``bl:*``), then ``baselines.serve --workers N`` on a free port; the same storm (same seed,
   so the same plan; report in ``OUT/baseline``); its audit (``baselines.audit``).
3. ``OUT/compare.json`` and a table: per operation, 2xx/s and p99 of each and hongbao / baseline,
   and whether each passed its audit.
The users are not online (``online_p = 0``): the baseline has no push channel (``make bench-storm``
keeps hongbao's users online, so there hongbao carries its pushes in the ratio).
The production backend (MariaDB + Redis behind ``hongbao serve``) is not served yet; until it is,
hongbao runs embedded here. Exit status: 0 both audits ran, 1 hongbao's audit failed, 2 cannot run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio as aioredis
from hongbao.bench.baselines.app import DATABASE, mysql_pool
from hongbao.bench.baselines.audit import audit_baseline
from hongbao.bench.services.process import BenchError, Process, free_port, start_hongbao
from hongbao.bench.storm.cli import SHORTCUTS, scenario_from, storm
from hongbao.bench.storm.runner import StormError, StormOptions
from hongbao.bench.storm.scenario import NAMED, Scenario
from hongbao.bench.storm.wire import storm_secret
from hongbao.core.audit import AuditReport
from hongbao.server.composition import auditor
from hongbao.server.config import Settings
from rich.console import Console
from rich.table import Table

OPS = ("send", "pay", "grab", "open")


async def reset_baseline(mysql_dsn: str, redis_url: str) -> None:
    """Drop the baseline's database (it is made again at start) and delete its ``bl:*`` keys."""
    pool = await mysql_pool(mysql_dsn, size=1)
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
    pool.close()
    await pool.wait_closed()
    client = aioredis.from_url(redis_url)
    try:
        async for key in client.scan_iter(match="bl:*", count=1000):
            await client.delete(key)
    finally:
        await client.aclose()


def start_baseline(workdir: Path, mysql_dsn: str, redis_url: str, secret: str, workers: int) -> Process:
    """Start the baseline on a free port; wait until /healthz answers (BenchError otherwise)."""
    port, log = free_port(), workdir / "baseline.log"
    with open(log, "wb") as stderr:
        popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hongbao.bench.baselines.serve",
                "--port",
                str(port),
                "--workers",
                str(workers),
                "--mysql-dsn",
                mysql_dsn,
                "--redis-url",
                redis_url,
                "--jwt-secret",
                secret,
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    process = Process("baseline", f"http://127.0.0.1:{port}", popen, log)
    process.wait_ready("/healthz")
    return process


def ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """Per operation: 2xx/s and p99 (ms) of each and hongbao / baseline (None where a side has none)."""
    out: dict[str, Any] = {}
    for op in OPS:
        a, b = ours["operations"].get(op), theirs["operations"].get(op)
        if not a or not b:
            continue
        out[op] = {
            "hongbao_rps": a["rps"],
            "baseline_rps": b["rps"],
            "rps_ratio": round(a["rps"] / b["rps"], 2) if b["rps"] else None,
            "hongbao_p99_ms": a["p99_ms"],
            "baseline_p99_ms": b["p99_ms"],
            "p99_ratio": round(a["p99_ms"] / b["p99_ms"], 2) if b["p99_ms"] else None,
        }
    return out


def baseline_storm(
    scenario: Scenario, mysql_dsn: str, redis_url: str, workers: int, out: Path, console: Console
) -> tuple[dict[str, Any], AuditReport]:
    """Reset the baseline's data, serve it, play ``scenario`` (nobody online: no push channel
    there; report in ``out/baseline``), stop it, audit it; returns (report, audit)."""
    asyncio.run(reset_baseline(mysql_dsn, redis_url))
    secret = secrets.token_hex(32)
    baseline = start_baseline(out, mysql_dsn, redis_url, secret, workers)
    offline = dataclasses.replace(scenario, online_p=0.0)
    try:
        theirs = storm(
            StormOptions(baseline.url, offline, secret, out / "baseline" / "work", console=console),
            None,
            out / "baseline",
            0.0,
        )
    finally:
        baseline.stop()
    return theirs, asyncio.run(audit_baseline(mysql_dsn, redis_url))


def comparison(
    ours: dict[str, Any], theirs: dict[str, Any], audit: AuditReport, workers: int, out: Path
) -> dict[str, Any]:
    """The ratios and both audits, written to ``out/compare.json`` and returned."""
    result = {
        "scenario": ours["scenario"],
        "workers": workers,
        "operations": ratios(ours, theirs),
        "hongbao_audit": ours["audit"],
        "hongbao_push": ours["push"],
        "baseline_audit": {"ok": audit.ok, "violations": audit.violations[:50], "counts": dict(audit.counts)},
    }
    (out / "compare.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    return result


def compare(
    scenario: Scenario, mysql_dsn: str, redis_url: str, workers: int, out: Path, console: Console
) -> dict[str, Any]:
    """Run both storms (see the module's docstring); returns the comparison written to ``out/compare.json``."""
    data_dir = out / "hongbao-var"
    shutil.rmtree(data_dir, ignore_errors=True)
    server = start_hongbao(data_dir.resolve(), workers)
    try:
        ours = storm(
            StormOptions(server.url, scenario, storm_secret(data_dir, None), out / "hongbao" / "work", console=console),
            auditor(Settings(data_dir=data_dir)),
            out / "hongbao",
            30.0,
        )
    finally:
        server.stop()
    theirs, audit = baseline_storm(scenario, mysql_dsn, redis_url, workers, out, console)
    return comparison(ours, theirs, audit, workers, out)


def print_comparison(result: dict[str, Any], console: Console) -> None:
    """The ratio table and both audits' verdicts."""
    table = Table(title=f"hongbao / baseline, storm {result['scenario']['name']}, {result['workers']} worker(s)")
    for column in ("op", "hongbao 2xx/s", "baseline 2xx/s", "ratio", "hongbao p99 ms", "baseline p99 ms", "ratio"):
        table.add_column(column, justify="left" if column == "op" else "right")
    for op, r in result["operations"].items():
        table.add_row(
            op,
            str(r["hongbao_rps"]),
            str(r["baseline_rps"]),
            str(r["rps_ratio"]),
            str(r["hongbao_p99_ms"]),
            str(r["baseline_p99_ms"]),
            str(r["p99_ratio"]),
        )
    console.print(table)
    for name in ("hongbao_audit", "baseline_audit"):
        audit = result[name]
        console.print(f"{name.replace('_', ' ')}: {len(audit['violations'])} violations {audit['violations'][:3]}")


def main(argv: list[str] | None = None) -> int:
    """Run the comparison from flags; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m hongbao.bench.baselines.compare", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--mysql-dsn", required=True, help="mysql://user:pass@host:port of a MariaDB/MySQL for the baseline"
    )
    parser.add_argument("--redis-url", required=True, help="redis://host:port for the baseline")
    parser.add_argument("--scenario", choices=sorted(NAMED))
    parser.add_argument("--scenario-file", type=Path)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    for flag in SHORTCUTS:
        parser.add_argument(f"--{flag}", type=float)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("bench-results/compare"))
    args = parser.parse_args(argv)
    args.set.append("online_p=0")
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
    try:
        result = compare(scenario_from(args), args.mysql_dsn, args.redis_url, args.workers, args.out, console)
    except (BenchError, StormError, ValueError) as exc:
        console.print(f"compare: {exc}")
        return 2
    print_comparison(result, console)
    return 0 if result["hongbao_audit"] is not None and result["hongbao_audit"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
