"""``make bench-grab``: the grab benchmark on the production backend, ratios in one run.

1. Start a MariaDB and a redis-server of its own, as the integration tests do
   (tests/integration/mariadb.py, redis_servers.py: throwaway directories, loopback), and
   ``hongbao migrate`` a 2 x 2 layout.
2. The HTTP benchmark (bench/http/run.py) with ``hongbao serve --backend production --workers 2``:
   the uvloop ceiling, /healthz, grab by a member of a packet another member has opened (so every
   grab reads the packet's grab state on Redis: auto-pipelined HMGETs, nothing answered from a
   worker's memory alone), ``redis_rt`` (the ceiling paying one redis-py round trip per request),
   the ceiling again. Floors: grab >= 40 % of the ceiling, /healthz >= 70 %.
3. Redis memory of the grab state (MEMORY USAGE): a live 100-share packet nobody opened, and one
   all of whose 100 shares were opened, written by the product's adapter (core/adapters/redis/grab.py).

Usage: ``python -m hongbao.bench.http.grab [--duration 10] [--warmup 2] [--workers 2] [--no-gate]
[--out bench-results/grab.json]``. Exit status: 0 pass, 1 a floor missed or a run incorrect,
2 cannot run. It lives with the tests because it starts its servers with their helpers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hongbao_native
from hongbao.bench.http.run import Options, report, run, table
from hongbao.bench.services.mariadb import MariaDb
from hongbao.bench.services.process import BenchError
from hongbao.bench.services.redis_servers import standalone
from hongbao.core.adapters.redis.client import Pipelines, redis_client
from hongbao.core.adapters.redis.grab import RedisGrabState, key
from hongbao.core.adapters.redis.state import redis_breaker
from hongbao.core.packet import Kind, Packet, Receipt, Status
from hongbao.core.ports import OpenResult
from hongbao.core.times import business_yymmdd

SHARES = 100
FLOORS = {"healthz": 0.70, "grab": 0.40}


def production_config(mysql_dsn: str, redis_url: str) -> str:
    """hongbao's TOML for the production backend on a 2 x 2 layout (prefix ``grab_``)."""
    return (
        f'backend = "production"\nmysql_dsn = "{mysql_dsn}"\nmysql_prefix = "grab_"\nmysql_dbs = 2\n'
        f'mysql_tables = 2\nredis_url = "{redis_url}"\n'
    )


async def grab_state_memory(redis_url: str, packets: int = 100, opened: int = 10) -> dict[str, float]:
    """MEMORY USAGE (bytes) of the grab state of ``packets`` live 100-share packets, ``opened`` of
    them with every share opened; the keys are deleted afterwards."""
    client = redis_client(redis_url, cluster=False)
    await client.initialize()
    try:
        counts: dict[str, int] = {}
        state = RedisGrabState(Pipelines(client), redis_breaker(counts), counts)
        now = int(time.time() * 1000)
        ids = [hongbao_native.encode_order_id(1, business_yymmdd(now), 0, 900_000_000 + i) for i in range(packets)]
        await asyncio.gather(
            *(
                state.put(
                    Packet(
                        order_id,
                        "bench_sender",
                        Kind.LUCKY,
                        SHARES,
                        10_000,
                        "g7f3a9c2e41b05d68",
                        None,
                        10_000,
                        SHARES,
                        Status.ACTIVE,
                        now,
                        now,
                        now + 86_400_000,
                    ),
                    now,
                )
                for order_id in ids
            )
        )
        for order_id in ids[:opened]:
            await state.opened(
                order_id,
                [
                    OpenResult(Receipt(order_id, f"bench_u{u:05d}", 100 + u, now), last=u == SHARES - 1)
                    for u in range(SHARES)
                ],
            )
        usage = [int(await client.memory_usage(key(order_id), samples=0) or 0) for order_id in ids]
        await client.delete(*(key(order_id) for order_id in ids))
    finally:
        await client.aclose()
    fresh, full = statistics.mean(usage[opened:]), statistics.mean(usage[:opened])
    return {
        "bytes_per_live_packet": fresh,
        "bytes_per_fully_opened_packet": full,
        "bytes_per_opener": round((full - fresh) / SHARES, 1),
        "packets": packets,
        "fully_opened": opened,
    }


def main(argv: list[str] | None = None) -> int:
    """Steps 1-3 of the module's docstring; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m hongbao.bench.http.grab", description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=10.0, help="seconds per measured run")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up before each run")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--no-gate", dest="gate", action="store_false", help="report the floors without failing")
    p.add_argument("--out", type=Path, default=Path("bench-results/grab.json"))
    p.add_argument("--profile", type=Path, help="py-spy profiles (collapsed stacks) of the workers into this folder")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-grab-") as tmp:
        base = Path(tmp)
        database = MariaDb(base / "mariadb")
        database.start()
        try:
            with standalone(base / "redis") as redis:
                config = production_config(database.dsn, redis.url)
                (base / "hongbao.toml").write_text(config)
                subprocess.run(
                    [sys.executable, "-m", "hongbao.server.cli", "--config", str(base / "hongbao.toml"), "migrate"],
                    check=True,
                    capture_output=True,
                    timeout=300,
                )
                opts = Options(
                    a.duration,
                    a.warmup,
                    a.connections,
                    1,
                    (a.workers,),
                    a.out,
                    a.gate,
                    server_config=config,
                    grab_opened=True,
                    redis_url=redis.url,
                    targets=("ceiling", "healthz", "grab", "redis_rt"),
                    floors=dict(FLOORS),
                    profile_dir=a.profile,
                    profile_format="raw",
                )
                try:
                    result = run(opts)
                except BenchError as exc:
                    print(f"bench-grab: {exc}", file=sys.stderr)
                    return 2
                result["redis_memory"] = asyncio.run(grab_state_memory(redis.url))
        finally:
            database.stop()
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    memory = result["redis_memory"]
    text = (
        table(result) + f"\nRedis grab state: {memory['bytes_per_live_packet']:.0f} bytes per live packet, "
        f"{memory['bytes_per_fully_opened_packet']:.0f} once its {SHARES} shares are opened "
        f"({memory['bytes_per_opener']:.1f} per opener)"
    )
    return report("bench-grab", result, text, a.out, a.gate, "below floor (--no-gate)")


if __name__ == "__main__":
    sys.exit(main())
