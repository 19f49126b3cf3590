"""``make bench-storm``: the peak of hongbao and of the baseline, up a ladder of send rates.

For each rate of ``--rates`` (default 20, 40, 80, 150, 300 sends/s), lowest first, and for each
system still climbing (``knee.py``: a system stops after its first rung that does not hold; one
whose first rate fails goes down by halves until a rate holds), then
at the midpoints that narrow each knee to within ``--resolution`` (default 1/8) of it, then again
at the two rates that bracket each knee until ``--plays`` (default 2) plays of each agree:
- ``hongbao``: ``hongbao serve --backend production --workers 2`` (``production.serve_production``,
  2 x 4 shards), its users online as the scenario says (new-year-eve: 20 %, over WebSocket);
- ``hongbao-offline``: the same with nobody online (``online_p = 0``);
- ``baseline``: ``bench/baselines`` (FastAPI + uvicorn, 2 workers), nobody online (it has no push);
the full scenario (default ``new-year-eve``: 120 s of sends, a 60 s tail) is played at that rate
against a MariaDB and a redis-server started for the rung and stopped after it: every rung starts
from empty databases and cold caches, so its audit covers exactly what it paid. Each rung: the
storm's report (``OUT/<system>/rate-<R>/report.json`` and ``.png``; a rate's second play in
``rate-<R>-play2``, and so on) and the server's log
(``server.log`` there: what the workers said during the rung), the audit (hongbao's shards;
the baseline's ``baselines.audit``), and the CPU of the server, MariaDB and Redis over the load
(``meter.py``, with how it is attributed per request and per open). ``OUT/<system>`` is emptied
when the ladder starts: it holds this ladder's rungs only.

``OUT/peak.json``: the rule, each system's rungs by rate (p50/p99 per operation, timeouts, audit,
generator lag and CPU, CPU per request and per open, push delivery), each rate's plays and how
many held (``verdicts``), its knee and ``failed_at`` (the lowest rate that did not hold), knee
ratios hongbao / baseline (online and offline) and their bounds (``knee_ratio_bounds``: hongbao's
knee over the baseline's ``failed_at``, hongbao's ``failed_at`` over the baseline's knee; None
where a ladder never failed), and notes (a knee that is only a lower bound, a generator that was
the limit); the same as tables on stderr.

Usage: ``python -m hongbao.bench.storm.peak [--rates 20,40,80,150,300] [--resolution 0.125] [--plays 2]
[--systems hongbao,hongbao-offline,baseline] [--scenario new-year-eve] [--duration S] [--tail S] [--set F=V]
[--workers 2] [--out bench-results/storm-production]``. Exit status: 0 every audit that ran is
clean, 1 one is not, 2 the benchmark could not run. ``make bench-storm STORM_RATE=R`` plays one rate
instead (``production.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from hongbao.bench.baselines.audit import audit_baseline
from hongbao.bench.baselines.compare import start_baseline
from hongbao.bench.services.mariadb import MariaDb
from hongbao.bench.services.process import BenchError, Process, ServiceError
from hongbao.bench.services.redis_servers import RedisTarget, standalone
from hongbao.bench.storm import knee, peak_table, report
from hongbao.bench.storm.cli import add_scenario_flags, scenario_from, storm
from hongbao.bench.storm.meter import OPS, CpuMeter, per_request
from hongbao.bench.storm.production import serve_production
from hongbao.bench.storm.runner import StormError, StormOptions
from hongbao.bench.storm.scenario import Scenario, ScenarioError
from hongbao.server.composition import Auditor, auditor
from hongbao.server.config import load_settings
from rich.console import Console

SYSTEMS = ("hongbao", "hongbao-offline", "baseline")
RATES = (20.0, 40.0, 80.0, 150.0, 300.0)
DRAIN_TIMEOUT_S = 120.0


@contextlib.contextmanager
def services(base: Path) -> Iterator[tuple[MariaDb, RedisTarget]]:
    """A fresh MariaDB and redis-server with their files under ``base``, stopped afterwards."""
    (base / "mariadb").mkdir()
    database = MariaDb(base / "mariadb")
    database.start()
    try:
        with standalone(base / "redis") as redis:
            yield database, redis
    finally:
        database.stop()


def _target(
    system: str, base: Path, database: MariaDb, redis: RedisTarget, workers: int
) -> tuple[Process, str, Auditor | None]:
    """Start ``system`` on the rung's services: (process, JWT secret, hongbao's auditor or None)."""
    if system == "baseline":
        secret = secrets.token_hex(32)
        return start_baseline(base, database.dsn, redis.url, secret, workers), secret, None
    server, config = serve_production(base, database.dsn, redis.url, workers)
    settings = load_settings(config)
    assert settings.jwt_secret is not None  # serve_production writes one
    return server, settings.jwt_secret, auditor(settings)


def audit_violations(summary: dict[str, Any]) -> list[str]:
    """The audit of a storm's ``summary`` judged: its error first (``report.audit_error``: fewer
    packets than the storm paid, or nothing after its top-ups), then its violations; [] when it
    is clean and found what the storm did."""
    audit = summary["audit"]
    return ([audit["error"]] if audit["error"] else []) + list(audit["violations"])


def rung_of(rate: float, summary: dict[str, Any], meter: CpuMeter, loadavg: float) -> knee.Rung:
    """The rung from a storm's report ``summary``, its ``audit`` section filled in (the baseline's
    by ``play``); ``loadavg``: the machine's when the rung began."""
    clean, violations = report.money_ok(summary), audit_violations(summary)
    load = summary["load"]
    timeouts = sum(codes.get("timeout", 0) for op, codes in summary["errors"].items() if op in OPS)
    cpu = per_request(meter.used_s | {"generator": load["generator_cpu_s"]}, summary["operations"])
    push = summary["push"]
    return knee.Rung(
        rate,
        operations={op: e for op, e in summary["operations"].items() if op in OPS},
        timeouts=timeouts,
        unanswered=int(summary["unanswered"]) - timeouts,
        busy=int(summary["admission_rejections"]),
        audit_clean=clean,
        violations=violations[:5],
        lag_p99_ms=float(load["lag_p99_ms"]),
        generator_cores=list(load["generator_cores"]),
        cpu=cpu | {"quiet": meter.quiet},
        push=None if push is None else {k: push[k] for k in ("expected", "delivered", "missing", "p50_ms", "p99_ms")},
        loadavg=loadavg,
    )


def rung_dir(ladder: Path, rate: float) -> Path:
    """Where the next play of ``rate`` keeps its report under ``ladder`` (``OUT/<system>``):
    ``rate-<R>`` for the first, then ``rate-<R>-play2``, ``rate-<R>-play3``... (the first free one)."""
    first = ladder / f"rate-{rate:g}"
    later = (ladder / f"{first.name}-play{n}" for n in itertools.count(2))
    return next(d for d in itertools.chain([first], later) if not d.exists())


def play(system: str, rate: float, base_scenario: Scenario, args: argparse.Namespace, console: Console) -> knee.Rung:
    """One rung: ``system`` at ``rate`` sends/s on fresh services (see the module's docstring)."""
    online_p = base_scenario.online_p if system == "hongbao" else 0.0
    scenario = dataclasses.replace(base_scenario, send_rate=rate, online_p=online_p).checked()
    out = rung_dir(args.out / system, rate)
    loadavg = os.getloadavg()[0]
    console.rule(f"{system} at {rate:g} sends/s (load average {loadavg:.2f})")
    with tempfile.TemporaryDirectory(prefix=f"bench-peak-{system}-") as tmp, services(Path(tmp)) as (database, redis):
        base = Path(tmp)
        server, secret, audits = _target(system, base, database, redis, args.workers)
        mariadb_pid = database.process.pid if database.process else 0
        meter = CpuMeter({"server": server.pids, "mariadb": lambda: [mariadb_pid], "redis": lambda: redis.pids})
        opts = StormOptions(server.url, scenario, secret, base / "work", console=console, meter=meter)
        try:
            summary = storm(opts, audits, out, DRAIN_TIMEOUT_S if audits else 0.0)
        except StormError as exc:
            return knee.Rung(rate, error=str(exc).splitlines()[0][:300], loadavg=loadavg)
        finally:
            server.stop()
            out.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(server.log, out / "server.log")  # the temp directory goes: its log stays
        if system == "baseline":  # the storm said NOT AUDITED: the baseline writes its receipts after the answers
            audit = asyncio.run(audit_baseline(database.dsn, redis.url))
            clients = summary["clients"]
            summary["audit"] = report.audit_entry(audit, clients["packets_paid"], clients["users_topped_up"])
            found = audit_violations(summary)
            console.print(
                f"baseline audit, once its server stopped: {len(found)} violations "
                f"({audit.counts['packets']} packets, {audit.counts['receipts']} receipts)"
                + "".join(f"\n  {v}" for v in found[:5])
            )
    return rung_of(rate, summary, meter, loadavg)


def peak(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Climb the ladder for every system of ``args.systems``; write ``OUT/peak.json``, return it.
    Each of those systems' directories (``OUT/<system>``) is emptied first: the rungs it then holds
    are the ones ``peak.json`` lists, none of an earlier ladder."""
    scenario = scenario_from(args)
    args.out.mkdir(parents=True, exist_ok=True)
    for system in args.systems:
        if (args.out / system).exists():
            shutil.rmtree(args.out / system)

    def rung(system: str, rate: float) -> knee.Rung:
        return play(system, rate, scenario, args, console)

    ladders = knee.climb(args.rates, args.systems, rung)
    knee.settle(ladders, rung, args.rates, args.resolution, args.plays)
    result = summarize(ladders, scenario, args.rates, args.workers, args.resolution, args.plays)
    (args.out / "peak.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    return result


def summarize(
    ladders: dict[str, list[knee.Rung]],
    scenario: Scenario,
    rates: list[float],
    workers: int,
    resolution: float,
    plays: int,
) -> dict[str, Any]:
    """``peak.json``'s content from the rungs played (see the module's docstring)."""
    brackets = {system: knee.bracket(rungs) for system, rungs in ladders.items()}
    knees = {system: low for system, (low, _) in brackets.items()}
    ceilings = {system: high for system, (_, high) in brackets.items()}
    notes = []
    for system, rungs in ladders.items():
        if rungs and ceilings[system] is None:
            notes.append(f"{system} held every rate up to {knees[system]:g}/s: its knee is at least that (add rates)")
        if rungs and knees[system] is None:
            notes.append(f"{system} held no rate down to {ceilings[system]:g}/s: it has no knee, and no ratio")
        for rung in rungs:
            limits = knee.generator_limits(rung)
            if not limits:
                continue
            why = f"{'; '.join(limits)}; machine load average {rung.loadavg:.2f} when it began"
            server_side = [reason for reason in rung.reasons if reason not in limits]
            if server_side:
                notes.append(
                    f"the generator also fell behind for {system} at {rung.rate:g}/s ({why}): the rung fails on "
                    f"the server's side too ({'; '.join(server_side)}), on a machine it saturated"
                )
            else:
                notes.append(
                    f"the generator was the limit for {system} at {rung.rate:g}/s ({why}): that rung measured the "
                    "load generator, or a machine too busy to run it on time, not the server"
                )

    def ratio(ours: str) -> float | None:
        a, b = knees.get(ours), knees.get("baseline")
        return round(a / b, 2) if a is not None and b else None

    def bounds(ours: str) -> list[float | None] | None:
        """The ratio's range from the knees' bounds: [ours / baseline's ceiling, our ceiling / baseline]."""
        a, b = knees.get(ours), knees.get("baseline")
        if a is None or not b:
            return None
        low, high = ceilings["baseline"], ceilings[ours]
        return [None if low is None else round(a / low, 2), None if high is None else round(high / b, 2)]

    return {
        "scenario": scenario.as_json() | {"send_rate": None},
        "workers": workers,
        "rates": sorted(rates),
        "machine": {"cpus": os.cpu_count()},
        "rule": {
            "open_p99_ms_below": knee.OPEN_P99_MS,
            "timeouts": 0,
            "unanswered": 0,
            "audit": "clean",
            "generator_lag_p99_ms_below": knee.LAG_P99_MS,
            "generator_process_cores_below": knee.GENERATOR_CORE,
            "knee_resolution": resolution,
            "plays_to_settle": plays,
        },
        "cpu_attribution": (
            "server_ms_per_request: the server's CPU (master + workers, /proc utime + stime from the load's start "
            "until the credits drained and the processes went quiet) over every send, pay, grab and open attempt, "
            "with each operation's count in requests; ms_per_open: each process group's CPU over the opens "
            "answered 2xx (the whole storm's cost per open)"
        ),
        "systems": {
            system: {
                "knee": knees[system],
                "failed_at": ceilings[system],
                "verdicts": [
                    {"rate": rate, "held": held, "plays": played} for rate, (held, played) in knee.tally(rungs).items()
                ],
                "rungs": [rung.as_json() for rung in sorted(rungs, key=lambda r: r.rate)],
            }
            for system, rungs in ladders.items()
        },
        "knee_ratio": {"online": ratio("hongbao"), "offline": ratio("hongbao-offline")},
        "knee_ratio_bounds": {"online": bounds("hongbao"), "offline": bounds("hongbao-offline")},
        "audits_clean": all(r.audit_clean for rungs in ladders.values() for r in rungs if not r.error),
        "notes": notes,
    }


def _rates(text: str) -> list[float]:
    try:
        rates = sorted({float(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of sends/s: {text!r}") from None
    if not rates or rates[0] <= 0:
        raise argparse.ArgumentTypeError(f"rates must be positive sends/s: {text!r}")
    return rates


def _resolution(text: str) -> float:
    try:
        share = float(text)
    except ValueError:
        share = 0.0
    if not share > 0:
        raise argparse.ArgumentTypeError(f"resolution must be a positive share of the knee: {text!r}")
    return share


def _plays(text: str) -> int:
    try:
        plays = int(text)
    except ValueError:
        plays = 0
    if plays < 1:
        raise argparse.ArgumentTypeError(f"plays must be a whole number of at least 1: {text!r}")
    return plays


def _systems(text: str) -> list[str]:
    systems = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown or not systems:
        raise argparse.ArgumentTypeError(f"systems are {', '.join(SYSTEMS)}; not {', '.join(unknown) or 'none'}")
    return [s for s in SYSTEMS if s in systems]


def main(argv: list[str] | None = None) -> int:
    """Parse the flags and climb; returns the exit status (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="python -m hongbao.bench.storm.peak", description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=_rates, default=list(RATES), help="sends/s, comma-separated")
    parser.add_argument(
        "--resolution",
        type=_resolution,
        default=knee.RESOLUTION,
        help="narrow each knee until its lowest failing rate is within this share of it (knee.py)",
    )
    parser.add_argument(
        "--plays",
        type=_plays,
        default=knee.PLAYS,
        help="play each rate that brackets a knee until this many plays agree (1: one play each)",
    )
    parser.add_argument("--systems", type=_systems, default=list(SYSTEMS), help=", ".join(SYSTEMS))
    add_scenario_flags(parser, rate=False)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench-results/storm-production"))
    args = parser.parse_args(argv)
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
    try:
        result = peak(args, console)
    except (BenchError, ServiceError, StormError, ScenarioError, ValueError, subprocess.CalledProcessError) as exc:
        console.print(f"bench-storm: {exc}")
        return 2
    peak_table.print_peak(result, console)
    return 0 if result["audits_clean"] else 1


if __name__ == "__main__":
    sys.exit(main())
