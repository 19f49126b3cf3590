"""``make bench-idle``: the load an idle production node puts on MariaDB, by worker count.

Starts its own MariaDB and redis-server, then for each worker count (default 2 and 4) a fresh
``hongbao serve --backend production`` (the storm benchmark's 2 x 4 shards), waits ``--warmup``
seconds, and counts the statements MariaDB executes over ``--seconds`` with nobody sending: the
``Questions`` status counter (less the benchmark's own reads), and the statements seen in the
general log, grouped by their text with the literals taken out, for where the load comes from.

The floor: fewer than ``--floor`` (5) statements a second at every worker count, so that the
periodic jobs (refunds, reconciliation, list repair, flags) do not grow with the workers.
Usage: ``python -m hongbao.bench.idle [--workers 2,4] [--seconds 20] [--out FILE]``. Exit status:
0 every count under the floor, 1 one over it, 2 cannot run.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hongbao.bench.services.mariadb import PASSWORD, USER, MariaDb
from hongbao.bench.services.process import BenchError
from hongbao.bench.services.redis_servers import standalone
from hongbao.bench.storm.production import serve_production

_LITERALS = re.compile(r"'[^']*'|\b\d+\b")
_STATEMENT = re.compile(r"\d+ (?:Query|Execute)\t(.*)")


def _sql(database: MariaDb, statement: str) -> list[list[str]]:
    """Rows of ``statement`` on ``database`` through the mariadb client (tab-separated)."""
    done = subprocess.run(
        ["mariadb", "-h127.0.0.1", f"-P{database.port}", f"-u{USER}", f"-p{PASSWORD}", "-N", "-B", "-e", statement],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return [line.split("\t") for line in done.stdout.splitlines() if line]


def _questions(database: MariaDb) -> int:
    return int(_sql(database, "SHOW GLOBAL STATUS LIKE 'Questions'")[0][1])


def statements(general_log: Path) -> Counter[str]:
    """The statements of a MariaDB general log (``Query`` and ``Execute`` lines), each with its
    string and number literals replaced by ``?``, counted."""
    counts: Counter[str] = Counter()
    for line in general_log.read_text(errors="replace").splitlines():
        found = _STATEMENT.search(line)
        if found is not None and not found.group(1).startswith(("SHOW GLOBAL STATUS", "SET GLOBAL general_log")):
            counts[_LITERALS.sub("?", found.group(1).strip())[:160]] += 1
    return counts


def measure(
    database: MariaDb, redis_url: str, work: Path, workers: int, warmup_s: float, seconds: float
) -> dict[str, Any]:
    """One idle server with ``workers`` workers: statements per second over ``seconds``."""
    work.mkdir(parents=True)
    server, _ = serve_production(work, database.dsn, redis_url, workers)
    log = work / "general.log"
    try:
        time.sleep(warmup_s)
        _sql(database, f"SET GLOBAL general_log_file = '{log}'; SET GLOBAL general_log = 1")
        before = _questions(database)
        time.sleep(seconds)
        after = _questions(database)
        _sql(database, "SET GLOBAL general_log = 0")
    finally:
        server.stop()
    own = 3  # the two reads of Questions and the SET that started the log
    per_s = max(0, after - before - own) / seconds
    top = statements(log).most_common(8)
    return {
        "workers": workers,
        "questions_per_s": round(per_s, 2),
        "top_statements_per_s": [[text, round(n / seconds, 2)] for text, n in top],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every worker count of ``args.workers`` on one MariaDB and one Redis."""
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        base = Path(tmp)
        database = MariaDb(base / "mariadb")
        (base / "mariadb").mkdir()
        database.start()
        try:
            with standalone(base / "redis") as redis:
                runs = []
                for n in args.workers:
                    redis.flush()  # no lease of the last server's workers left to wait out
                    runs.append(measure(database, redis.url, base / f"w{n}", n, args.warmup, args.seconds))
        finally:
            database.stop()
    over = [r for r in runs if r["questions_per_s"] >= args.floor]
    return {
        "floor_per_s": args.floor,
        "seconds": args.seconds,
        "runs": runs,
        "over_floor": [r["workers"] for r in over],
    }


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, measure, print and write the report; the exit status."""
    p = argparse.ArgumentParser(prog="python -m hongbao.bench.idle", description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=lambda t: [int(n) for n in t.split(",")], default=[2, 4])
    p.add_argument("--warmup", type=float, default=5.0, help="seconds after the start before counting (default 5)")
    p.add_argument("--seconds", type=float, default=20.0, help="seconds counted (default 20)")
    p.add_argument("--floor", type=float, default=5.0, help="statements/s every count must stay under (default 5)")
    p.add_argument("--out", type=Path, default=Path("bench-results/idle.json"))
    args = p.parse_args(argv)
    try:
        result = run(args)
    except (BenchError, subprocess.CalledProcessError, OSError) as exc:
        print(f"bench-idle: cannot run: {exc}", file=sys.stderr)
        return 2
    for r in result["runs"]:
        print(f"{r['workers']} workers: {r['questions_per_s']:.2f} statements/s idle")
        for text, per_s in r["top_statements_per_s"]:
            print(f"  {per_s:6.2f}/s  {text}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"bench-idle: wrote {args.out}; floor {args.floor}/s: " + ("ok" if not result["over_floor"] else "MISSED"))
    return 1 if result["over_floor"] else 0


if __name__ == "__main__":
    sys.exit(main())
