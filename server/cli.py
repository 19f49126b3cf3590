"""The ``hongbao`` command: serve | migrate | token | audit | fleet | storm.

``hongbao serve`` with no arguments runs the embedded backend on 127.0.0.1:8080 with its data
in ./var. ``hongbao token --user ID [--user ID ...]`` prints one token per line, signed with
the key of the configuration in the current directory, so scripts can act as any user against
a server started from the same directory; ``--admin`` mints an admin token. Every command
exits with a status of EXIT_STATUSES (``hongbao --help`` and the README list them).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING

import hongbao_native
from hongbao.core.redact import redact
from hongbao.server.auth import KEY_FILE, embedded_secret, mint
from hongbao.server.config import ConfigError, Settings, load_settings

if TYPE_CHECKING:
    from hongbao.core.audit import AuditReport

MAX_TOKEN_TTL_S = 10 * 365 * 24 * 3600  # ten years
STORM_HELP = "play a red-packet storm against a server, audit, report"

EXIT_OK, EXIT_FAILED, EXIT_CANNOT_RUN = 0, 1, 2
# The exit statuses of every command: (status, meaning), as the --help epilog and the README list them.
EXIT_STATUSES = (
    (EXIT_OK, "ok"),
    (EXIT_FAILED, "a check failed: audit found a money violation (storm: hongbao storm --help lists its checks)"),
    (
        EXIT_CANNOT_RUN,
        "cannot run: bad flags or settings, a database unreachable, refused or not migrated (serve starts degraded "
        "while one is unreachable), a port taken, workers that die before serving; audit: nothing to check",
    ),
    (3, "storm only: the money is clean but an expected push did not arrive"),
)


def _ttl(text: str) -> float:
    """A token lifetime in seconds: a finite number in (0, MAX_TOKEN_TTL_S]; argparse's error otherwise."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < seconds <= MAX_TOKEN_TTL_S:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(
            f"must be more than 0 and at most {MAX_TOKEN_TTL_S} seconds (10 years), got {text}"
        )
    return seconds


def _settings(args: argparse.Namespace, *, dsn_means_production: bool = False) -> Settings:
    flags = {
        k: getattr(args, k, None)
        for k in (
            "host",
            "port",
            "workers",
            "data_dir",
            "backend",
            "mysql_dsn",
            "redis_url",
            "redis_cluster",
            "access_log",
            "log_format",
            "log_file",
        )
    }
    return load_settings(args.config, flags=flags, dsn_means_production=dsn_means_production)


def _serve(args: argparse.Namespace) -> int:
    settings = _settings(args, dsn_means_production=True)  # a DSN, from anywhere, means the shards
    from hongbao.server.composition import check_production, preflight
    from hongbao.server.logs import configure

    check_production(settings)
    configure(settings)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # never the end of the node; the master reopens the log on it
    for warning in asyncio.run(preflight(settings)):  # ValueError (exit 2) for what cannot fix itself
        logging.getLogger("hongbao.master").warning("%s", warning)
    from hongbao.server.master import serve

    return serve(settings)


def _token(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if not args.user and not args.admin:
        print("hongbao token: give --user ID (repeatable) or --admin", file=sys.stderr)
        return EXIT_CANNOT_RUN
    if not settings.jwt_secret and not (settings.data_dir / KEY_FILE).exists():
        print(
            f"hongbao token: no key in {settings.data_dir}/ yet: created {settings.data_dir / KEY_FILE}; only a server "
            f"started with --data-dir {settings.data_dir} accepts these tokens",
            file=sys.stderr,
        )
    secret = settings.jwt_secret or embedded_secret(settings.data_dir)
    try:
        for user in args.user or []:
            print(mint(secret, user, ttl_s=args.ttl))
        if args.admin:
            print(mint(secret, args.admin_id, admin=True, ttl_s=args.ttl))
    except ValueError as exc:
        print(f"hongbao token: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    return EXIT_OK


def _mysql_dsn(settings: Settings, command: str) -> str:
    if not settings.mysql_dsn:
        raise ValueError(
            f"{command} needs the MySQL DSN: --mysql-dsn mysql://user:pass@host:port (or HONGBAO_MYSQL_DSN, "
            "or mysql_dsn in the TOML file)"
        )
    return settings.mysql_dsn


def _mysql_failed(command: str, dsn: str, exc: BaseException) -> int:
    """Print one line for a MySQL server that refused, could not be reached or holds another
    schema: which servers (the DSN, its passwords masked) and the error; returns EXIT_CANNOT_RUN."""
    print(f"hongbao {command}: MySQL at {redact(dsn)}: {exc}", file=sys.stderr)
    return EXIT_CANNOT_RUN


def _migrate(args: argparse.Namespace) -> int:
    settings = _settings(args)
    dsn, layout = _mysql_dsn(settings, "hongbao migrate"), settings.mysql_layout()
    from asyncmy.errors import MySQLError
    from hongbao.server.composition import migrate, move_cold_packets

    try:
        report = asyncio.run(migrate(settings))
        print(
            f"migrate: {report.databases} databases x {layout.n_tables} tables x 31 days, "
            f"schema {report.schema_version}, {report.tables_created} tables created"
        )
        if args.cold:
            moved = asyncio.run(move_cold_packets(settings, int(time.time() * 1000)))
            print(f"cold: {moved} closed packets older than {layout.hot_days} days moved to the cold databases")
    except (MySQLError, OSError, RuntimeError) as exc:  # unreachable, refused, another layout or a newer schema
        return _mysql_failed("migrate", dsn, exc)
    return EXIT_OK


def _audit(args: argparse.Namespace) -> int:
    """``hongbao audit``: EXIT_OK the books are clean, EXIT_FAILED a violation, EXIT_CANNOT_RUN nothing
    was checked (no database, MySQL refused or unreachable, or a database with no packets and no
    ledger entries)."""
    settings = _settings(args, dsn_means_production=True)  # a DSN, from anywhere, means the shards
    from hongbao.server.composition import DB_FILE, auditor

    if settings.backend == "production":
        from asyncmy.errors import MySQLError

        dsn = _mysql_dsn(settings, "hongbao audit")
        try:
            report = auditor(settings)(not args.not_drained)
            pending = not report.ok and not args.not_drained and auditor(settings)(False).ok
        except (MySQLError, OSError) as exc:  # refused, unreachable, not migrated: no audit, not a violation
            return _mysql_failed("audit", dsn, exc)
    elif not (settings.data_dir / DB_FILE).is_file():
        print(
            f"hongbao audit: no database at {settings.data_dir / DB_FILE} (serve there first, or give --data-dir; "
            "a production server's: --mysql-dsn)",
            file=sys.stderr,
        )
        return EXIT_CANNOT_RUN
    else:
        report = auditor(settings)(not args.not_drained)
        pending = not report.ok and not args.not_drained and auditor(settings)(False).ok
    if report.ok and report.empty:  # nothing was checked: not "0 violations"
        print(f"hongbao audit: nothing to audit in {report.source}: no packets, no ledger entries", file=sys.stderr)
        return EXIT_CANNOT_RUN
    return _verdict("audit", report, pending)


def _fleet(args: argparse.Namespace) -> int:
    """``hongbao fleet FLEET.toml``: start the fleet (server/fleet_launch.py) until SIGTERM/SIGINT;
    with ``--audit``, audit every region's shards as one set of books instead (exit as ``audit``)."""
    from asyncmy.errors import MySQLError
    from hongbao.server.fleet_config import load_fleet

    fleet = load_fleet(args.fleet)
    if not args.audit:
        from hongbao.server.fleet_launch import run_fleet

        try:
            return run_fleet(fleet, args.data_dir)
        except (MySQLError, OSError, RuntimeError) as exc:  # a region's MySQL refused, down or of another layout
            print(f"hongbao fleet: {exc}", file=sys.stderr)
            return EXIT_CANNOT_RUN
    from hongbao.core.adapters.mysql.audit import audit_mysql
    from hongbao.server.fleet_launch import with_stores

    fleet = with_stores(fleet, args.data_dir)  # the stores `hongbao fleet` started, for a file that names none
    layout = Settings().with_overrides(fleet.settings).mysql_layout()
    try:
        report = asyncio.run(audit_mysql(fleet.mysql_dsns(), layout, drained=not args.not_drained))
        pending = (
            not report.ok
            and not args.not_drained
            and asyncio.run(audit_mysql(fleet.mysql_dsns(), layout, drained=False)).ok
        )
    except (MySQLError, OSError) as exc:
        return _mysql_failed("fleet --audit", ", ".join(fleet.mysql_dsns()), exc)
    if report.ok and report.empty:
        print(f"hongbao fleet --audit: nothing to audit in {report.source}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    return _verdict("fleet --audit", report, pending)


def _verdict(command: str, report: AuditReport, pending: bool) -> int:
    """Print ``report``'s lines; EXIT_OK when clean, else EXIT_FAILED. ``pending``: every violation
    is a credit or refund not applied yet (the books pass as not drained): stderr says so and
    names ``--not-drained``, the audit of a live server."""
    print("\n".join(report.lines()))
    if pending:
        print(
            f"hongbao {command}: every violation above is a credit or refund not applied yet, which a live server's "
            "reconciler applies; to audit a running server, add --not-drained",
            file=sys.stderr,
        )
    return EXIT_OK if report.ok else EXIT_FAILED


def version() -> str:
    """What ``hongbao --version`` prints: hongbao's version, and the native module's with its build
    profile (a debug build is far slower)."""
    import importlib.metadata  # some 40 ms: only when asked

    native = f"hongbao_native {hongbao_native.__version__} ({hongbao_native.build_profile} build)"
    return f"hongbao {importlib.metadata.version('hongbao')}, {native}"


class _Version(argparse.Action):
    """``--version``: print ``version()`` on stdout and exit 0, as argparse's own version action does,
    but computed only when given."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(version())
        parser.exit()


def parser(*, with_storm: bool = True) -> argparse.ArgumentParser:
    """The argument parser of the ``hongbao`` command. ``with_storm`` False lists ``storm`` without
    its flags, so that the other commands never import the load generator (hongbao.bench.storm)."""
    statuses = "\n".join(
        textwrap.fill(meaning, 78, initial_indent=f"  {status}  ", subsequent_indent=" " * 5)
        for status, meaning in EXIT_STATUSES
    )
    top = argparse.ArgumentParser(
        prog="hongbao",
        description="Red-packet backend with real-time push.",
        epilog=f"exit status (every command):\n{statuses}\n\nevery setting, its flag, HONGBAO_* variable and TOML key: "
        "docs/settings.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("--version", action=_Version, help="print the versions of hongbao and hongbao_native")
    top.add_argument("--config", type=Path, help="TOML file (default: ./hongbao.toml when present)")
    sub = top.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config", type=Path, default=argparse.SUPPRESS, help="TOML file (also accepted before the command)"
    )
    serve = sub.add_parser("serve", parents=[common], help="run the server (master + workers)")
    serve.add_argument("--host", help="address to listen on (default: 127.0.0.1; also HONGBAO_HOST)")
    serve.add_argument(
        "--port", type=int, help="port to listen on (default: 8080; 0: a free port, the same for every worker)"
    )
    serve.add_argument(
        "--workers",
        type=int,
        help="worker processes (default, or 0: one per core with --backend production, 1 on the embedded backend)",
    )
    serve.add_argument(
        "--data-dir", dest="data_dir", type=Path, help="the embedded data and the token key jwt.key (default: ./var)"
    )
    serve.add_argument(
        "--backend",
        choices=["embedded", "production"],
        help="production: money in MySQL/MariaDB (--mysql-dsn), queues in Redis (--redis-url)",
    )
    serve.add_argument("--mysql-dsn", dest="mysql_dsn", help="mysql://user:pass@host:port (also HONGBAO_MYSQL_DSN)")
    serve.add_argument(
        "--redis-url", dest="redis_url", help="redis://host:port: push state in Redis (also HONGBAO_REDIS_URL)"
    )
    serve.add_argument(
        "--redis-cluster",
        dest="redis_cluster",
        action="store_true",
        default=None,
        help="--redis-url names a node of a Redis Cluster (also HONGBAO_REDIS_CLUSTER)",
    )
    serve.add_argument(
        "--access-log",
        dest="access_log",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="one log line per HTTP request and WebSocket upgrade (default: off; also HONGBAO_ACCESS_LOG)",
    )
    serve.add_argument(
        "--log-format",
        dest="log_format",
        choices=["text", "json"],
        help="text lines, or one JSON object a line (default: text; also HONGBAO_LOG_FORMAT)",
    )
    serve.add_argument(
        "--log-file",
        dest="log_file",
        help="append the log to this file, reopened on SIGHUP (default: stderr; also HONGBAO_LOG_FILE)",
    )
    serve.set_defaults(run=_serve)
    mysql = argparse.ArgumentParser(add_help=False)
    mysql.add_argument("--mysql-dsn", dest="mysql_dsn", help="mysql://user:pass@host:port (also HONGBAO_MYSQL_DSN)")
    migrate = sub.add_parser(
        "migrate",
        parents=[common, mysql],
        help="create or upgrade the sharded MySQL/MariaDB schema (idempotent); --cold archives old packets",
    )
    migrate.add_argument(
        "--cold", action="store_true", help="also move closed packets older than mysql_hot_days to the cold databases"
    )
    migrate.set_defaults(run=_migrate)
    token = sub.add_parser("token", parents=[common], help="mint bearer tokens with this directory's key")
    token.add_argument("--user", action="append", help="user id (repeatable; one token per line)")
    token.add_argument("--admin", action="store_true", help="also mint an admin token")
    token.add_argument("--admin-id", default="admin", help="the admin token's sub (default: admin)")
    token.add_argument(
        "--ttl", type=_ttl, default=24 * 3600, help=f"lifetime in seconds, up to {MAX_TOKEN_TTL_S} (default: 86400)"
    )
    token.add_argument(
        "--data-dir", dest="data_dir", type=Path, help="the server's data directory: its jwt.key signs (default: ./var)"
    )
    token.set_defaults(run=_token)
    audit = sub.add_parser(
        "audit",
        parents=[common, mysql],
        help="check the money invariants (docs/architecture.md section 11) of the embedded database (--data-dir) "
        "or the MySQL shards (--mysql-dsn); exit 0 clean, 1 on any violation, 2 when nothing was checked: no database, "
        "MySQL refused or unreachable, or no packets and no ledger entries in it",
        description="Audit the money of the embedded database DATA_DIR/hongbao.db, or with a MySQL DSN (--mysql-dsn, "
        "HONGBAO_MYSQL_DSN or mysql_dsn in the TOML file) the production shards of the TOML file's layout. "
        "Exit status: 0 the books are clean, 1 a violation, 2 nothing was checked (no database there, MySQL "
        "refused or unreachable, a database with no packets and no ledger entries, or a bad setting).",
    )
    audit.add_argument(
        "--data-dir", dest="data_dir", type=Path, help="the embedded server's data directory (default: ./var)"
    )
    audit.add_argument(
        "--backend",
        choices=["embedded", "production"],
        help="production: the MySQL shards of --mysql-dsn (the default when a DSN is given); embedded: the SQLite "
        "file in --data-dir (the default without a DSN; refused beside one)",
    )
    audit.add_argument(
        "--not-drained",
        action="store_true",
        help="the reconciler has not run yet: pending credits and refunds are not violations",
    )
    audit.set_defaults(run=_audit)
    fleet = sub.add_parser(
        "fleet",
        help="start a fleet of nodes in two regions on this machine from one TOML file (server/fleet_config.py), "
        "or audit its regions as one set of books (--audit)",
        description="Start the fleet FLEET describes (two regions, each with its MySQL/MariaDB, Redis and nodes; "
        "docs/operations.md, 'Run a fleet'): each region's shards are migrated, then one `hongbao serve` per node "
        "in DATA_DIR/<node>; runs until SIGTERM or Ctrl-C. With --audit, check the money of every region together.",
    )
    fleet.add_argument("fleet", type=Path, help="the fleet's TOML file")
    fleet.add_argument(
        "--data-dir",
        dest="data_dir",
        type=Path,
        default=Path("var-fleet"),
        help="the nodes' directories and the "
        "fleet's token key (default: ./var-fleet; `hongbao token --data-dir` it to act as a user)",
    )
    fleet.add_argument(
        "--audit",
        action="store_true",
        help="audit every region's shards as one set of books (stores the fleet started: while it runs)",
    )
    fleet.add_argument("--not-drained", action="store_true", help="with --audit: pending credits are not violations")
    fleet.set_defaults(run=_fleet)
    if with_storm:
        from hongbao.bench.storm.cli import add_parser as add_storm_parser  # loaded for `hongbao storm` only

        add_storm_parser(sub, [common], STORM_HELP)
    else:
        sub.add_parser("storm", help=STORM_HELP, add_help=False)
    return top


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``hongbao`` console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    args = parser(with_storm="storm" in argv).parse_args(argv)
    try:
        return int(args.run(args))
    except ConfigError as exc:  # before any worker starts; as for a bad flag
        print(f"hongbao: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except FileNotFoundError as exc:  # a --config, key or data file named but not there
        print(f"hongbao: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except ValueError as exc:  # a setting that cannot work (a missing or malformed DSN...), as for a bad flag
        print(f"hongbao: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except OSError as exc:  # the machine refuses (a port already served, a data directory not writable...)
        print(f"hongbao: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main())
