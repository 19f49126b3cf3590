"""``make demo``: an embedded server, a 30-second ``smoke`` storm, the audit, the report's path.

Steps: start ``hongbao serve`` (embedded backend, ``--workers`` workers, default 1) on a free
port with a fresh data directory ``OUT/var`` (removed first); play ``smoke`` against it (load,
drain, audit, ``OUT/report.json`` and ``OUT/report.png``); stop the server (SIGTERM, it must
exit 0); audit the stopped database once more, drained (``hongbao audit --data-dir OUT/var``
gives the same). Exit status: 0 the money is clean, 1 a money violation (or the server failed),
2 cannot run. Pushes that did not arrive are printed, and do not fail the demo: they are the
push channel's delivery check (``hongbao storm`` exits 3 for them), not the money audit.

One worker by default: on the embedded backend a second worker contends for SQLite's single
writer (BEGIN IMMEDIATE across processes), and on 2 cores that made pay and open about ten
times slower at the median than one worker did (measured with this demo).

Usage: ``python -m hongbao.bench.storm.demo [--out bench-results/demo] [--workers 1] [--duration 20]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from hongbao.bench.services.process import BenchError, start_hongbao
from hongbao.bench.storm import report
from hongbao.bench.storm.cli import storm
from hongbao.bench.storm.runner import StormError, StormOptions
from hongbao.bench.storm.scenario import load_scenario
from hongbao.bench.storm.table import stderr_console
from hongbao.bench.storm.wire import storm_secret
from hongbao.server.composition import auditor
from hongbao.server.config import Settings


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit status (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="python -m hongbao.bench.storm.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench-results/demo"), help="report directory")
    parser.add_argument("--workers", type=int, default=1, help="server workers (default: 1)")
    parser.add_argument("--duration", type=float, help="seconds of sends (default: the smoke scenario's)")
    args = parser.parse_args(argv)
    console = stderr_console()
    data_dir = args.out / "var"
    shutil.rmtree(data_dir, ignore_errors=True)
    scenario = load_scenario("smoke", overrides={"duration_s": args.duration} if args.duration else None)
    try:
        server = start_hongbao(data_dir.resolve(), args.workers)
    except BenchError as exc:
        console.print(f"demo: the server did not start: {exc}")
        return 2
    console.print(f"demo: hongbao serve --workers {args.workers} at {server.url}, data in {data_dir}")
    try:
        opts = StormOptions(
            server.url,
            scenario,
            storm_secret(data_dir, None),
            args.out / "work",
            console=console,
            backend="embedded",
            workers=args.workers,
        )
        audit = auditor(Settings(data_dir=data_dir))
        summary = storm(opts, audit, args.out, drain_timeout_s=30.0)
    except StormError as exc:
        console.print(f"demo: {exc}")
        return 2
    finally:
        status = server.stop()
    final = audit(True)
    console.print(
        f"demo: server stopped (exit {status}); audit of the stopped database: {len(final.violations)} violations"
    )
    for line in final.violations:
        console.print(f"VIOLATION {line}")
    opens = summary["operations"].get("open", {})
    print(
        f"opens: {opens.get('ok', 0)} ok, {opens.get('rps', 0)}/s, "
        f"p50 {opens.get('p50_ms', 0)} ms, p99 {opens.get('p99_ms', 0)} ms"
    )
    if not report.push_ok(summary):
        print(
            f"push: {summary['push']['missing']} of {summary['push']['expected']} expected events did not reach "
            "their online users (docs/architecture.md section 11 delivery; hongbao storm exits 3 for this)"
        )
    print(f"report: {args.out / 'report.json'} {args.out / 'report.png'}")
    print(f"audit: {len(final.violations)} violations")
    return 0 if status == 0 and final.ok and report.money_ok(summary) else 1


if __name__ == "__main__":
    sys.exit(main())
