"""Run the baseline: ``python -m hongbao.bench.baselines.serve --port P --mysql-dsn DSN --redis-url URL
--jwt-secret S [--workers N]`` (uvicorn with uvloop and httptools, N worker processes)."""

from __future__ import annotations

import argparse
import os

import uvicorn


def main(argv: list[str] | None = None) -> None:
    """Parse the flags, put the settings in the environment (each uvicorn worker reads them), serve."""
    parser = argparse.ArgumentParser(prog="python -m hongbao.bench.baselines.serve", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--mysql-dsn", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--jwt-secret", required=True)
    args = parser.parse_args(argv)
    os.environ.update(
        BASELINE_MYSQL_DSN=args.mysql_dsn, BASELINE_REDIS_URL=args.redis_url, BASELINE_JWT_SECRET=args.jwt_secret
    )
    uvicorn.run(
        "hongbao.bench.baselines.app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
