"""The ``hongbao`` command: serve | token | audit | storm (migrate arrives with its issue).

``hongbao serve`` with no arguments runs the embedded backend on 127.0.0.1:8080 with its data
in ./var. ``hongbao token --user ID [--user ID ...]`` prints one token per line, signed with
the key of the configuration in the current directory, so scripts can act as any user against
a server started from the same directory; ``--admin`` mints an admin token.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from hongbao.bench.storm.cli import add_parser as add_storm_parser
from hongbao.server.auth import embedded_secret, mint
from hongbao.server.config import Settings, load_settings


def _settings(args: argparse.Namespace) -> Settings:
    flags = {k: getattr(args, k, None) for k in ("host", "port", "workers", "data_dir", "backend", "redis_url", "redis_cluster")}
    return load_settings(args.config, flags=flags)


def _serve(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if settings.backend != "embedded":
        print(f"hongbao: backend {settings.backend!r} is not available yet; use --backend embedded", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s pid=%(process)d %(message)s")
    from hongbao.server.master import serve

    return serve(settings)


def _token(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if not args.user and not args.admin:
        print("hongbao token: give --user ID (repeatable) or --admin", file=sys.stderr)
        return 2
    if not args.ttl > 0:
        print("hongbao token: the token lifetime (--ttl) must be positive", file=sys.stderr)
        return 2
    secret = settings.jwt_secret or embedded_secret(settings.data_dir)
    try:
        for user in args.user or []:
            print(mint(secret, user, ttl_s=args.ttl))
        if args.admin:
            print(mint(secret, args.admin_id, admin=True, ttl_s=args.ttl))
    except ValueError as exc:
        print(f"hongbao token: {exc}", file=sys.stderr)
        return 2
    return 0


def _audit(args: argparse.Namespace) -> int:
    settings = _settings(args)
    from hongbao.bench.audit import audit_sqlite

    report = audit_sqlite(settings.data_dir, drained=not args.not_drained)
    print("\n".join(report.lines()))
    return 0 if report.ok else 1


def parser() -> argparse.ArgumentParser:
    """The argument parser of the ``hongbao`` command."""
    top = argparse.ArgumentParser(prog="hongbao", description="Red-packet backend with real-time push.")
    top.add_argument("--config", type=Path, help="TOML file (default: ./hongbao.toml when present)")
    sub = top.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", type=Path, default=argparse.SUPPRESS, help="TOML file (also accepted before the command)")
    serve = sub.add_parser("serve", parents=[common], help="run the server (master + workers)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--workers", type=int)
    serve.add_argument("--data-dir", dest="data_dir", type=Path)
    serve.add_argument("--backend", choices=["embedded"])
    serve.add_argument("--redis-url", dest="redis_url", help="redis://host:port: push state in Redis (also HONGBAO_REDIS_URL)")
    serve.add_argument("--redis-cluster", dest="redis_cluster", action="store_true", default=None,
                       help="--redis-url names a node of a Redis Cluster (also HONGBAO_REDIS_CLUSTER)")
    serve.set_defaults(run=_serve)
    token = sub.add_parser("token", parents=[common], help="mint bearer tokens with this directory's key")
    token.add_argument("--user", action="append", help="user id (repeatable; one token per line)")
    token.add_argument("--admin", action="store_true", help="also mint an admin token")
    token.add_argument("--admin-id", default="admin", help="the admin token's sub (default: admin)")
    token.add_argument("--ttl", type=float, default=24 * 3600, help="lifetime in seconds (default: 86400)")
    token.add_argument("--data-dir", dest="data_dir", type=Path)
    token.set_defaults(run=_token)
    audit = sub.add_parser("audit", parents=[common], help="check the money invariants of DESIGN.md section 11; exit 1 on any violation")
    audit.add_argument("--data-dir", dest="data_dir", type=Path)
    audit.add_argument("--not-drained", action="store_true",
                       help="the reconciler has not run yet: pending credits and refunds are not violations")
    audit.set_defaults(run=_audit)
    add_storm_parser(sub, [common])
    return top


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``hongbao`` console script; returns the exit status."""
    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (ValueError, FileNotFoundError, OSError) as exc:
        print(f"hongbao: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
