"""``hongbao storm``: flags, and the whole run (load, drain, audit, report).

``hongbao storm --target URL --data-dir DIR`` plays the ``smoke`` scenario against the server
at URL whose data directory is DIR (its ``jwt.key`` mints the users' tokens; DIR defaults to the
configuration's, ./var, as for ``hongbao token``). The storm audits the database the target
runs, named as for ``hongbao audit``: the embedded one in DIR, or with a MySQL DSN (``--mysql-dsn``,
HONGBAO_MYSQL_DSN or mysql_dsn in ``--config FILE``, e.g. the server's own hongbao.toml, which
also gives the shard layout) the production shards. ``--jwt-secret`` mints without DIR (a server
elsewhere; no audit then, unless a DSN names its shards).

Before the load it checks that DIR is plausibly the target's: the target must accept a token
minted with the key (one GET /v1/balance), and an embedded audit needs DIR/hongbao.db. After the
load, an audit that finds no packets (or nothing at all) although the storm paid some read
another database than the target's: an error, not "0 violations".

Exit status: 0 the audit is clean (or was not asked for) and every expected push arrived; 1 a
money violation, a repeated open answered with another amount, or fewer packets in the audit
than the storm paid; 2 the storm could not run (bad flags or scenario, no database in DIR, the
target refused the key, setup refused, a load process died) or its audit found no packets after
the storm paid some (not the target's database); 3 the money is clean but a push did not arrive.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hongbao.bench.storm.scenario import NAMED, Scenario, ScenarioError, load_scenario

if TYPE_CHECKING:
    from hongbao.bench.storm.runner import StormOptions
    from hongbao.server.composition import Auditor

# The heavy imports (httptools, rich, matplotlib) wait until a storm runs: ``hongbao serve`` builds
# this parser too.
# flag -> scenario field, for the knobs changed most often (any other: --set FIELD=VALUE)
SHORTCUTS = {
    "duration": "duration_s",
    "tail": "tail_s",
    "rate": "send_rate",
    "users": "users",
    "groups": "groups",
    "processes": "processes",
    "connections": "connections",
    "seed": "seed",
}


def add_parser(sub: Any, parents: list[argparse.ArgumentParser], help_text: str) -> None:
    """Add the ``storm`` subcommand, listed with ``help_text``, to the ``hongbao`` command's subparsers."""
    storm = sub.add_parser(
        "storm",
        parents=parents,
        help=help_text,
        description="Play a red-packet storm against the server at --target, wait for its credits to drain, audit "
        "the database it runs (its --data-dir's hongbao.db, or with --mysql-dsn / a --config naming a DSN, such as "
        "the server's hongbao.toml, its MySQL shards) and report. Exit status: 0 the audit is clean and every "
        "expected push arrived; 1 a money violation, a repeated open answered with another amount, or fewer packets "
        "in the audit than the storm paid; 2 the storm could not run (bad flags or scenario, no database to audit, "
        "the target refused the key, setup refused) or the audit found no packets after the storm paid some (not "
        "the target's database); 3 the money is clean but a push did not arrive.",
    )
    storm.add_argument("--target", required=True, help="the server's base URL, e.g. http://127.0.0.1:8080")
    storm.add_argument("--scenario", choices=sorted(NAMED), help="named scenario (default: smoke, or the file's base)")
    storm.add_argument("--scenario-file", type=Path, help="TOML scenario: base = NAME, then any field to override")
    storm.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="override a scenario field (repeatable)"
    )
    for flag, name in SHORTCUTS.items():
        storm.add_argument(
            f"--{flag}", type=float if name.endswith(("_s", "_rate")) else int, help=f"scenario field {name}"
        )
    storm.add_argument(
        "--data-dir",
        dest="data_dir",
        type=Path,
        help="the target's data directory: its jwt.key mints the tokens; an embedded target's hongbao.db there is "
        "audited (default: ./var)",
    )
    storm.add_argument(
        "--backend",
        choices=["embedded", "production"],
        help="the target's backend, whose database is audited: production, the MySQL shards of --mysql-dsn (the "
        "default when a DSN is given); embedded, the SQLite file in --data-dir (refused beside a DSN)",
    )
    storm.add_argument(
        "--mysql-dsn",
        dest="mysql_dsn",
        help="mysql://user:pass@host:port of a production target: its shards are audited (the layout from --config; "
        "also HONGBAO_MYSQL_DSN)",
    )
    storm.add_argument(
        "--jwt-secret", help="the target's HS256 secret (instead of --data-dir; no audit unless a DSN names its shards)"
    )
    storm.add_argument(
        "--out",
        type=Path,
        help="report directory (default: bench-results/storm, with --replay bench-results/storm-replay)",
    )
    storm.add_argument("--record", type=Path, help="write every request as JSON lines to FILE")
    storm.add_argument("--replay", type=Path, help="play the requests of a record FILE instead of the scenario's plan")
    storm.add_argument(
        "--drain-timeout",
        type=float,
        default=90.0,
        help="seconds to wait for credits to drain and for the audit to come clean (default: 90: a movement cut by "
        "a crash is completed by the server's reconciler after its reconcile_window_ms, 60 s by default)",
    )
    storm.set_defaults(run=main)


def _value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def add_scenario_flags(parser: argparse.ArgumentParser, *, rate: bool = True) -> None:
    """The flags ``scenario_from`` reads: ``--scenario``, ``--scenario-file``, ``--set F=V`` and
    the SHORTCUTS (``--rate`` only when ``rate``: a ladder of rates has its own flag)."""
    parser.add_argument("--scenario", choices=sorted(NAMED), default="new-year-eve")
    parser.add_argument("--scenario-file", type=Path)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    for flag in SHORTCUTS:
        if rate or flag != "rate":
            parser.add_argument(f"--{flag}", type=float)


def scenario_from(args: argparse.Namespace) -> Scenario:
    """The scenario the flags ask for; ScenarioError (the message names the field) otherwise."""
    overrides: dict[str, Any] = {}
    for item in args.set:
        field, sep, text = item.partition("=")
        if not sep:
            raise ScenarioError(f"--set {item!r}: expected FIELD=VALUE")
        overrides[field.strip()] = _value(text.strip())
    for flag, name in SHORTCUTS.items():
        if getattr(args, flag, None) is not None:
            overrides[name] = getattr(args, flag)
    return load_scenario(args.scenario, args.scenario_file, overrides)


def storm(opts: StormOptions, auditor: Auditor | None, out: Path, drain_timeout_s: float) -> dict[str, Any]:
    """Play the storm, then drain and audit (``auditor``: ``composition.auditor``; None: no audit)
    while the push clients stay connected (``opts.meter`` stopped between the two), then write
    ``out/report.json`` and ``out/report.png`` and print the table; returns the report. Raises
    StormError when the storm cannot run."""
    from hongbao.bench.storm import plot, report, table
    from hongbao.bench.storm.runner import run_load
    from hongbao.bench.storm.settle import settle

    console = opts.console or table.stderr_console()
    on_drained = opts.meter.stop if opts.meter is not None else None
    result, settlement = run_load(opts, lambda: settle(opts.url, auditor, drain_timeout_s, on_drained))
    summary = report.build(result, settlement, opts.scenario, opts.url, backend=opts.backend, workers=opts.workers)
    report.write_json(summary, out / "report.json")
    plot.write_png(summary, out / "report.png")
    table.print_table(summary, console)
    return summary


def main(args: argparse.Namespace) -> int:
    """Run ``hongbao storm`` from parsed flags; returns the exit status (see the module's docstring)."""
    from hongbao.bench.storm import report
    from hongbao.bench.storm.runner import StormError, StormOptions
    from hongbao.bench.storm.settle import check_audit_target
    from hongbao.bench.storm.table import stderr_console
    from hongbao.bench.storm.wire import storm_secret
    from hongbao.server.auth import KEY_FILE
    from hongbao.server.composition import auditor
    from hongbao.server.config import load_settings

    console = stderr_console()
    if args.out is None:  # a replay keeps the recorded run's report
        args.out = Path("bench-results/storm-replay" if args.replay else "bench-results/storm")
    try:
        flags = {"data_dir": args.data_dir, "backend": args.backend, "mysql_dsn": args.mysql_dsn}
        settings = load_settings(args.config, flags=flags, dsn_means_production=True)
        audited = args.data_dir or settings.backend == "production" or not args.jwt_secret
        audit = auditor(settings) if audited else None
        scenario = scenario_from(args)
        secret = storm_secret(settings.data_dir, args.jwt_secret or settings.jwt_secret)
        if audited:
            check_audit_target(settings)  # before the load: the database to audit is there
    except (ScenarioError, ValueError, FileNotFoundError) as exc:
        print(f"hongbao storm: {exc}", file=sys.stderr)
        return 2
    key = "--jwt-secret" if args.jwt_secret else "jwt_secret" if settings.jwt_secret else settings.data_dir / KEY_FILE
    opts = StormOptions(
        args.target,
        scenario,
        secret,
        args.out / "work",
        args.record,
        args.replay,
        console,
        key_origin=str(key),
        backend=settings.backend if audited else "",
    )
    try:
        summary = storm(opts, audit, args.out, args.drain_timeout)
    except StormError as exc:
        print(f"hongbao storm: {exc}", file=sys.stderr)
        return 2
    console.print(f"report: {args.out / 'report.json'} and {args.out / 'report.png'}")
    if report.audit_blind(summary):
        return 2
    if not report.money_ok(summary):
        return 1
    return 0 if report.push_ok(summary) else 3
