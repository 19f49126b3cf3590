"""``make bench-fleet``: the storm against a two-region fleet and against one node with the same
total workers, same scenario and rate, in one run (docs/architecture.md section 9).

- ``fleet``: two regions (each its own MariaDB and redis-server, north the home region) of two
  nodes of ``--workers-per-node`` workers each, started as ``hongbao fleet`` starts them
  (server/fleet_launch.py); every node is an entry, north and south alternating: load process
  ``p`` plays its users against the ``p``-th (mod 4), so requests land on nodes that do not own
  the packet, and on the other region's nodes, as they would behind a plain balancer;
- ``one node``: ``hongbao serve`` with all those workers on one MariaDB and one redis-server.

Each plays the scenario (default ``new-year-eve``, users offline unless ``--online``), drains and
audits (the fleet: both regions' shards as one set of books). ``OUT/fleet.json`` and the table on
stderr: opens/s, p50/p99 per operation, the server's CPU per request, the share of requests a
node relayed (to the packet's owner, to the other region) with the relays' cost: the fleet's
server CPU beyond the one node's per relayed request, and its latency (the relays' round trip,
``hongbao_fleet_relay_seconds``, beyond the packet routes' time where served in place); and the
most open transactions one packet row had at once in each system (InnoDB's lock waits on the
packet tables, sampled every 5 ms: the holder and its waiters), which must stay at most K
(``max_in_db``) however many nodes there are.

Usage: ``python -m hongbao.bench.storm.fleet [--rate SENDS_PER_S] [--duration S] [--tail S]
[--workers-per-node 1] [--online] [--out bench-results/storm-fleet]``. Exit status: 0 both audits
clean, 1 one is not, 2 it could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncmy
import httpx
import orjson
from hongbao.bench.services.mariadb import MariaDb
from hongbao.bench.services.process import BenchError, Process, ServiceError, free_port
from hongbao.bench.services.redis_servers import RedisTarget, standalone
from hongbao.bench.storm.cli import add_scenario_flags, scenario_from, storm
from hongbao.bench.storm.meter import OPS, CpuMeter, per_request
from hongbao.bench.storm.production import serve_production
from hongbao.bench.storm.runner import StormError, StormOptions
from hongbao.bench.storm.scenario import ScenarioError
from hongbao.core.adapters.mysql.audit import audit_mysql
from hongbao.core.adapters.mysql.db import connect_args
from hongbao.core.sharding import parse_dsn
from hongbao.server.auth import embedded_secret
from hongbao.server.composition import auditor
from hongbao.server.config import Settings, load_settings
from hongbao.server.fleet_config import Fleet, Region
from hongbao.server.fleet_launch import migrate_regions, start_node
from rich.console import Console
from rich.table import Table

DRAIN_TIMEOUT_S = 120.0
LAYOUT = {"mysql_dbs": 2, "mysql_tables": 4, "mysql_prefix": "storm_"}
RELAYS = ("hongbao_fleet_forwarded_total", "hongbao_fleet_region_forwarded_total")
RELAY_TIME = ("hongbao_fleet_relay_seconds_sum", "hongbao_fleet_relay_seconds_count")
#: Requests naming a packet: their server-side seconds and count, summed over the routes.
OWNED = re.compile(
    r'^hongbao_http_request_duration_seconds_(sum|count)\{method="\w+",route="[^"]*\{order_id\}[^"]*"\} (\S+)$'
)
#: The packet rows' lock waits now: per locked row, the transactions waiting for it.
LOCK_WAITS = (
    "SELECT COUNT(DISTINCT w.requesting_trx_id) FROM information_schema.INNODB_LOCK_WAITS w "
    "JOIN information_schema.INNODB_LOCKS l ON l.lock_id = w.blocking_lock_id "
    "WHERE l.lock_table LIKE '%t\\_packet\\_%' GROUP BY l.lock_table, l.lock_data"
)
SAMPLE_S = 0.005


@contextlib.contextmanager
def region_services(base: Path) -> Iterator[list[tuple[MariaDb, RedisTarget]]]:
    """A MariaDB and a redis-server for each region, under ``base``; stopped afterwards."""
    with contextlib.ExitStack() as stack:
        found = []
        for name in ("north", "south"):
            database = MariaDb(base / f"{name}-mariadb")
            database.start()
            stack.callback(database.stop)
            found.append((database, stack.enter_context(standalone(base / f"{name}-redis"))))
        yield found


def counters(urls: list[str]) -> dict[str, float]:
    """The relay counters and relay seconds, and the packet routes' seconds and requests
    (``owned_sum``, ``owned_count``), summed over the nodes at ``urls`` (their /metrics)."""
    total = dict.fromkeys((*RELAYS, *RELAY_TIME, "owned_sum", "owned_count"), 0.0)
    for url in urls:
        text = httpx.get(f"{url}/metrics", timeout=10).text
        for name in (*RELAYS, *RELAY_TIME):
            found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
            total[name] += float(found.group(1)) if found else 0.0
        for kind, value in (m.groups() for m in map(OWNED.match, text.splitlines()) if m):
            total[f"owned_{kind}"] += float(value)
    return total


class RowLocks:
    """Samples, every SAMPLE_S in a thread of its own, how many open transactions one packet row
    has at once in each of ``dsns`` (the holder and those waiting for its lock, from InnoDB's
    lock waits); ``most`` is the largest seen (1 when no transaction ever waited)."""

    def __init__(self, dsns: list[str]) -> None:
        self.dsns, self.most, self.samples = dsns, 1, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RowLocks:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.run(self._sample())

    async def _sample(self) -> None:
        conns = [await asyncmy.connect(**connect_args(parse_dsn(dsn)[0])) for dsn in self.dsns]
        try:
            while not self._stop.is_set():
                for conn in conns:
                    async with conn.cursor() as cur:
                        await cur.execute(LOCK_WAITS)
                        for (waiting,) in await cur.fetchall():
                            self.most = max(self.most, int(waiting) + 1)
                self.samples += 1
                await asyncio.sleep(SAMPLE_S)
        finally:
            for conn in conns:
                conn.close()


def play_fleet(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """The storm against the fleet; its report with ``cpu`` and ``relays`` added."""
    scenario = scenario_from(args)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp, region_services(Path(tmp)) as stores:
        base = Path(tmp)
        regions = [
            Region(number, database.dsn, redis.url, (free_port(), free_port()))
            for number, (database, redis) in enumerate(stores, 1)
        ]
        fleet = Fleet((regions[0], regions[1]), 1, args.workers_per_node, "127.0.0.1", dict(LAYOUT))
        secret = embedded_secret(base)
        migrate_regions(fleet)
        nodes = [
            Process(node.name, node.url, start_node(node, base), base / node.name / "server.log")
            for node in fleet.nodes()
        ]
        try:
            for node in nodes:
                node.wait_ready("/healthz", 60.0)
            pids = {db.process.pid for db, _ in stores if db.process is not None}
            meter = CpuMeter(
                {
                    "server": lambda: [pid for node in nodes for pid in node.pids()],
                    "mariadb": lambda: sorted(pids),
                    "redis": lambda: [pid for _, redis in stores for pid in redis.pids],
                }
            )
            north, south = nodes[:2], nodes[2:]
            urls = [node.url for pair in zip(north, south, strict=True) for node in pair]  # regions alternate
            layout = Settings().with_overrides(LAYOUT).mysql_layout()
            dsns = [region.mysql_dsn for region in regions]
            opts = StormOptions(
                urls[0], scenario, secret, base / "work", console=console, meter=meter, entries=tuple(urls)
            )
            before = counters(urls)
            with RowLocks(dsns) as locks:
                summary = storm(
                    opts,
                    lambda drained: asyncio.run(audit_mysql(dsns, layout, drained=drained)),
                    args.out / "fleet",
                    DRAIN_TIMEOUT_S,
                )
            after = counters(urls)
        finally:
            for node in nodes:
                node.stop()
    summary["cpu"] = per_request(meter.used_s, summary["operations"])
    summary["relays"] = {name: after[name] - before[name] for name in RELAYS}
    summary["times"] = {name: after[name] - before[name] for name in (*RELAY_TIME, "owned_sum", "owned_count")}
    summary["row_lock"] = {"most": locks.most, "samples": locks.samples}
    return summary


def play_one_node(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """The storm against one node with the fleet's total workers; its report with ``cpu`` added."""
    scenario = scenario_from(args)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-one-") as tmp:
        base = Path(tmp)
        (base / "mariadb").mkdir()
        database = MariaDb(base / "mariadb")
        database.start()
        try:
            with standalone(base / "redis") as redis:
                server, config = serve_production(base, database.dsn, redis.url, 4 * args.workers_per_node)
                settings = load_settings(config)
                pid = database.process.pid if database.process is not None else 0
                meter = CpuMeter({"server": server.pids, "mariadb": lambda: [pid], "redis": lambda: redis.pids})
                opts = StormOptions(
                    server.url, scenario, settings.jwt_secret, base / "work", console=console, meter=meter
                )
                try:
                    with RowLocks([database.dsn]) as locks:
                        summary = storm(opts, auditor(settings), args.out / "one-node", DRAIN_TIMEOUT_S)
                finally:
                    server.stop()
        finally:
            database.stop()
    summary["cpu"] = per_request(meter.used_s, summary["operations"])
    summary["row_lock"] = {"most": locks.most, "samples": locks.samples}
    return summary


def compare(fleet: dict[str, Any], one: dict[str, Any]) -> dict[str, Any]:
    """The figures of the module's docstring from both reports."""

    def figures(summary: dict[str, Any]) -> dict[str, Any]:
        ops = summary["operations"]
        return {
            "opens_per_s": ops.get("open", {}).get("rps"),
            "latency_ms": {op: {"p50": ops[op]["p50_ms"], "p99": ops[op]["p99_ms"]} for op in OPS if op in ops},
            "server_ms_per_request": summary["cpu"]["server_ms_per_request"],
            "requests": sum(summary["cpu"]["requests"].values()),
            "audit_clean": bool(summary["audit"] and summary["audit"]["ok"]),
            "packet_row_transactions_max": summary["row_lock"]["most"],
            "packet_row_samples": summary["row_lock"]["samples"],
        }

    ours, theirs = figures(fleet), figures(one)
    relayed = sum(fleet["relays"].values())
    extra_ms = (ours["server_ms_per_request"] or 0.0) - (theirs["server_ms_per_request"] or 0.0)
    times = fleet["times"]
    timed = times["hongbao_fleet_relay_seconds_count"]
    relay_ms = 1000 * times["hongbao_fleet_relay_seconds_sum"] / timed if timed else None
    # the route counts a request at every node it passes, at a relaying one with about its relay's round trip
    here = times["owned_count"] - timed
    served_ms = 1000 * (times["owned_sum"] - times["hongbao_fleet_relay_seconds_sum"]) / here if here > 0 else None
    return {
        "fleet": ours,
        "one_node": theirs,
        "relays": fleet["relays"],
        "relay_times": times,
        "relayed_share": round(relayed / ours["requests"], 3) if ours["requests"] else None,
        "relay_cpu_ms": round(extra_ms * ours["requests"] / relayed, 3) if relayed else None,
        "relay_round_trip_ms": None if relay_ms is None else round(relay_ms, 3),
        "served_here_ms": None if served_ms is None else round(served_ms, 3),
        "relay_latency_ms": None if relay_ms is None or served_ms is None else round(relay_ms - served_ms, 3),
    }


def print_table(result: dict[str, Any], console: Console) -> None:
    """The comparison as a table on ``console``."""
    table = Table(title="fleet (2 regions x 2 nodes) vs one node, same workers")
    for column in ("system", "opens/s", *(f"{op} p50/p99 ms" for op in OPS), "server ms/req", "audit"):
        table.add_column(column)
    for name, key in (("fleet", "fleet"), ("one node", "one_node")):
        row = result[key]
        ops = [
            f"{row['latency_ms'][op]['p50']}/{row['latency_ms'][op]['p99']}" if op in row["latency_ms"] else "-"
            for op in OPS
        ]
        clean = "clean" if row["audit_clean"] else "DIRTY"
        table.add_row(name, str(row["opens_per_s"]), *ops, str(row["server_ms_per_request"]), clean)
    console.print(table)
    console.print(
        f"relayed: {result['relayed_share']} of requests ({result['relays']}); per relayed request: server CPU "
        f"beyond one node's {result['relay_cpu_ms']} ms, latency {result['relay_latency_ms']} ms (round trip "
        f"{result['relay_round_trip_ms']} ms against {result['served_here_ms']} ms served in place); most open "
        f"transactions on one packet row at once: fleet {result['fleet']['packet_row_transactions_max']}, one node "
        f"{result['one_node']['packet_row_transactions_max']} (K = max_in_db = 2)"
    )


def main(argv: list[str] | None = None) -> int:
    """Parse the flags and run; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m hongbao.bench.storm.fleet", description=__doc__.splitlines()[0])
    add_scenario_flags(parser)
    parser.add_argument("--workers-per-node", type=int, default=1)
    parser.add_argument("--online", action="store_true", help="users online over WebSocket as the scenario says")
    parser.add_argument("--out", type=Path, default=Path("bench-results/storm-fleet"))
    args = parser.parse_args(argv)
    if not args.online:
        args.set.append("online_p=0")
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 140)
    try:
        fleet = play_fleet(args, console)
        one = play_one_node(args, console)
    except (BenchError, ServiceError, StormError, ScenarioError, ValueError) as exc:
        console.print(f"bench-fleet: {exc}")
        return 2
    result = compare(fleet, one)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fleet.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    print_table(result, console)
    return 0 if result["fleet"]["audit_clean"] and result["one_node"]["audit_clean"] else 1


if __name__ == "__main__":
    sys.exit(main())
