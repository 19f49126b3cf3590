"""The push benchmark of issue 4: hongbao's WebSocket push against a plain ``websockets`` server,
ratios in one run, the same client fleet for both.

1. Memory per idle connection: server RSS growth / N at N = ``--idle`` (default 10 000), hongbao
   vs the websockets server (sides.py).
2. Fan-out: ``--broadcasts`` broadcasts of a 100-byte text to ``--fanout`` (5 000) subscribed
   connections; server CPU time (every thread of the server's processes) per message the clients
   received, hongbao vs the websockets server (sides.py).
3. Push latency: an open over HTTP to the ``opened`` event at the opener's socket, p50 and p99
   (latency.py).
4. Redis memory per online user: MEMORY USAGE of the three session layers in a real
   redis-server, against the 380 bytes budgeted (redis_memory.py; ``--skip-redis`` leaves it out).

hongbao runs as ``hongbao serve`` with ONE worker, the embedded backend (push state in its SQLite;
in Redis for step 4), tokens minted with its key; the websockets server (baseline_server.py) is
one process on uvloop. The clients are light hand-written WebSocket clients (client.py) in
``--procs`` processes (fleet.py). RLIMIT_NOFILE is raised to the hard limit for the servers and
the clients. The floors (``FLOORS``: hongbao / websockets may not exceed them) and the Redis
budget gate the exit status unless ``--no-gate``; a run that is incorrect (a connection refused,
a message missing) fails regardless. The result goes to ``bench-results/push.json`` and a table
is printed.

Usage (from the checkout): ``python bench/push/run.py [--idle 10000] [--fanout 5000] [--no-gate]``,
or ``python -m hongbao.bench.push.run``, or ``make bench-push``.
Exit status: 0 pass, 1 a floor missed or a run incorrect, 2 cannot run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

from hongbao.bench.http.run import BenchError, Process
from hongbao.bench.push import latency, redis_memory, servers
from hongbao.bench.push.fleet import Fleet, FleetError, raise_nofile
from hongbao.bench.push.sides import BaselineSide, HongbaoSide, Measured, fanout, idle_memory

#: hongbao / websockets, measured in the same run, may not exceed these.
FLOORS = {"fanout_cpu_per_message": 1 / 3, "memory_per_idle_connection": 1 / 2}
REDIS_BUDGET_BYTES = 380  # the session design's budget per online user (three layers)
HEADROOM_FDS = 1000  # file descriptors a server needs beside its WebSocket connections


@dataclass(frozen=True)
class Options:
    """Sizes (connections, messages, samples), client processes, output, and whether floors fail the run."""

    idle: int = 10_000
    fanout: int = 5_000
    broadcasts: int = 40
    openers: int = 20
    packets: int = 10
    redis_users: int = 2_000
    procs: int = 4
    skip_redis: bool = False
    out: Path = Path("bench-results/push.json")
    gate: bool = True
    keep_dir: bool = False


def _ratio(ours: float, theirs: float) -> float | None:
    """ours / theirs; None when theirs is not positive (too small a run to measure)."""
    return round(ours / theirs, 4) if theirs > 0 else None


def _two(measure: str, ours: Measured, theirs: Measured, key: str, ratios: dict[str, float | None],
         problems: list[str]) -> dict[str, Any]:
    ratios[measure] = _ratio(ours.values[key], theirs.values[key])
    problems += ours.problems + theirs.problems
    return {"hongbao": ours.values, "websockets": theirs.values}


def _servers_and_clients(opts: Options, workdir: Path, result: dict[str, Any], problems: list[str]) -> None:
    """Steps 1 to 3 (both servers, the fleet), into ``result``."""
    most = max(opts.idle, opts.fanout) + HEADROOM_FDS
    fleet = Fleet(opts.procs)
    procs: list[Process] = []
    try:
        hb_proc, secret = servers.hongbao(workdir / "hongbao", most)
        procs.append(hb_proc)
        procs.append(base_proc := servers.baseline(workdir))
        ours = HongbaoSide(hb_proc, secret)
        theirs = BaselineSide(base_proc, secret, ours)
        ratios: dict[str, float | None] = result["ratios"]
        result["memory"] = _two("memory_per_idle_connection", idle_memory(fleet, ours, opts.idle),
                                idle_memory(fleet, theirs, opts.idle), "bytes_per_connection", ratios, problems)
        fan = result["fanout"] = _two("fanout_cpu_per_message", fanout(fleet, ours, opts.fanout, opts.broadcasts),
                                      fanout(fleet, theirs, opts.fanout, opts.broadcasts), "cpu_us_per_message", ratios, problems)
        # where the time goes: the same ratio without the kernel's share (not gated)
        ratios["fanout_user_cpu_per_message"] = _ratio(fan["hongbao"]["user_us_per_message"], fan["websockets"]["user_us_per_message"])
        result["latency"] = uvloop.run(latency.measure(hb_proc.url, secret, opts.openers, opts.packets))
        if result["latency"]["missing_events"]:
            problems.append(f"latency: {result['latency']['missing_events']} opens never saw their event")
        if opts.skip_redis:
            return
        redis_proc, redis_url = servers.redis_server(workdir)
        try:
            red_proc, red_secret = servers.hongbao(workdir / "hongbao-redis", opts.redis_users + HEADROOM_FDS, redis_url)
            procs.append(red_proc)
            result["redis"], found = redis_memory.measure(fleet, HongbaoSide(red_proc, red_secret), redis_url, opts.redis_users)
            problems += found
        finally:
            redis_proc.terminate()
            redis_proc.wait(timeout=30)
    finally:
        fleet.stop()
        for proc in procs:
            if proc.stop() != 0:
                problems.append(f"{proc.name} exited with {proc.popen.returncode}")


def floor_misses(result: dict[str, Any]) -> list[str]:
    """Each ratio over its floor (or not measurable), and the Redis memory over its budget, as a sentence."""
    misses = []
    for name, floor in FLOORS.items():
        ratio = result["ratios"].get(name)
        if ratio is None:
            misses.append(f"{name}: not measured (the websockets side measured nothing)")
        elif ratio > floor:
            misses.append(f"{name}: hongbao / websockets = {ratio:.3f}, floor {floor:.3f}")
    redis_bytes = result.get("redis", {}).get("three_layers_bytes_per_user")
    if redis_bytes is not None and redis_bytes > REDIS_BUDGET_BYTES:
        misses.append(f"redis: {redis_bytes} bytes per online user, budget {REDIS_BUDGET_BYTES}")
    return misses


def run(opts: Options) -> dict[str, Any]:
    """Run the whole benchmark and return the JSON result (also written to ``opts.out``)."""
    nofile = raise_nofile()
    if nofile < max(opts.idle, opts.fanout) + HEADROOM_FDS:
        raise BenchError(f"the open-file hard limit ({nofile}) is too low for {max(opts.idle, opts.fanout)} connections")
    workdir = Path(tempfile.mkdtemp(prefix="hongbao-bench-push-"))
    problems: list[str] = []
    result: dict[str, Any] = {
        "settings": {"idle_connections": opts.idle, "fanout_connections": opts.fanout, "broadcasts": opts.broadcasts,
                     "latency_samples": opts.openers * opts.packets, "redis_users": opts.redis_users,
                     "client_processes": opts.procs, "hongbao_workers": 1, "hongbao_backend": "embedded",
                     "cpus": os.cpu_count(), "loadavg_before": list(os.getloadavg())},
        "floors": FLOORS, "redis_budget_bytes": REDIS_BUDGET_BYTES, "ratios": {}}
    try:
        _servers_and_clients(opts, workdir, result, problems)
    except FleetError as exc:
        raise BenchError(f"a client process failed:\n{exc}") from None
    finally:
        if not opts.keep_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    result["settings"]["loadavg_after"] = list(os.getloadavg())
    result["incorrect"], result["floor_misses"] = problems, floor_misses(result)
    result["passed"] = not problems and not result["floor_misses"]
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def table(result: dict[str, Any]) -> str:
    """The printed summary: one line per measurement."""
    fan, mem = result["fanout"], result["memory"]
    ratios = {name: ratio if ratio is not None else float("nan") for name, ratio in result["ratios"].items()}
    lines = [f"{'measure':34} {'hongbao':>12} {'websockets':>12} {'ratio':>7}  floor",
             f"{'fan-out CPU us / message':34} {fan['hongbao']['cpu_us_per_message']:12.3f} "
             f"{fan['websockets']['cpu_us_per_message']:12.3f} {ratios['fanout_cpu_per_message']:7.3f}  "
             f"<= {FLOORS['fanout_cpu_per_message']:.3f}",
             f"{'  of which user space':34} {fan['hongbao']['user_us_per_message']:12.3f} "
             f"{fan['websockets']['user_us_per_message']:12.3f} {ratios['fanout_user_cpu_per_message']:7.3f}",
             f"{'  of which kernel (one write each)':34} {fan['hongbao']['system_us_per_message']:12.3f} "
             f"{fan['websockets']['system_us_per_message']:12.3f}",
             f"{'memory KiB / idle connection':34} {mem['hongbao']['kib_per_connection']:12.2f} "
             f"{mem['websockets']['kib_per_connection']:12.2f} {ratios['memory_per_idle_connection']:7.3f}  "
             f"<= {FLOORS['memory_per_idle_connection']:.3f}"]
    lat = result["latency"]
    lines.append(f"push latency open -> event: p50 {lat['push']['p50_ms']:.2f} ms, p99 {lat['push']['p99_ms']:.2f} ms "
                 f"({lat['samples']} samples; the HTTP answer p50 {lat['http_answer']['p50_ms']:.2f} ms)")
    if "redis" in result:
        red = result["redis"]
        layers = ", ".join(f"{k} {v}" for k, v in red["bytes_per_user"].items())
        lines.append(f"redis bytes / online user: {red['three_layers_bytes_per_user']} ({layers}), "
                     f"budget {REDIS_BUDGET_BYTES}; used_memory grew {red['used_memory_delta_per_user']} / user")
    settings = result["settings"]
    lines.append(f"hongbao: 1 worker, embedded; {settings['client_processes']} client processes; load average "
                 f"{settings['loadavg_before'][0]:.2f} -> {settings['loadavg_after'][0]:.2f} on {settings['cpus']} cpus")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> Options:
    """The command line of ``bench/push/run.py`` as Options."""
    p = argparse.ArgumentParser(description="hongbao's WebSocket push against a websockets server (issue 4)")
    p.add_argument("--idle", type=int, default=10_000, help="idle connections for the memory measure (default 10000)")
    p.add_argument("--fanout", type=int, default=5_000, help="subscribed connections for the fan-out (default 5000)")
    p.add_argument("--broadcasts", type=int, default=40, help="measured broadcasts (default 40)")
    p.add_argument("--openers", type=int, default=20, help="latency: openers, one packet share each (default 20)")
    p.add_argument("--packets", type=int, default=10, help="latency: packets each opener opens (default 10)")
    p.add_argument("--redis-users", type=int, default=2_000, help="online users for the Redis memory (default 2000)")
    p.add_argument("--procs", type=int, default=4, help="client processes (default 4)")
    p.add_argument("--skip-redis", action="store_true", help="leave out the Redis memory measure")
    p.add_argument("--out", type=Path, default=Path("bench-results/push.json"))
    p.add_argument("--no-gate", dest="gate", action="store_false", help="report the floors without failing")
    p.add_argument("--keep", dest="keep_dir", action="store_true", help="keep the temporary directory (server logs)")
    a = p.parse_args(argv)
    if min(a.idle, a.fanout, a.broadcasts, a.openers, a.packets, a.redis_users, a.procs) < 1:
        p.error("every size must be positive")
    return Options(a.idle, a.fanout, a.broadcasts, a.openers, a.packets, a.redis_users, a.procs, a.skip_redis, a.out,
                   a.gate, a.keep_dir)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 pass, 1 floor missed or incorrect, 2 cannot run)."""
    opts = parse(argv)
    try:
        result = run(opts)
    except BenchError as exc:
        print(f"bench-push: {exc}", file=sys.stderr)
        return 2
    print(table(result))
    for problem in result["incorrect"]:
        print(f"bench-push: INCORRECT {problem}")
    for miss in result["floor_misses"]:
        print(f"bench-push: {'FAIL' if opts.gate else 'over the floor (--no-gate)'} {miss}")
    print(f"bench-push: wrote {opts.out}")
    return 1 if result["incorrect"] or (opts.gate and result["floor_misses"]) else 0


if __name__ == "__main__":
    sys.exit(main())
