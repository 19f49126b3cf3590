"""Server configuration: defaults, then ``hongbao.toml`` (or ``--config FILE``), then HONGBAO_*
environment variables, then command-line flags; the embedded backend needs none of them.

Units are in the names: ``*_s`` seconds, ``*_ms`` milliseconds, ``*_bytes`` bytes, ``*_fen`` fen.
Each setting's docstring is its line in docs/settings.md (``python -m hongbao.server.settings_doc``).
A value is echoed in messages only through ``hongbao.core.redact``: a secret never is.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import sys
import tomllib
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hongbao.core.faults import parse_faults
from hongbao.core.redact import redact
from hongbao.core.rules import Limits, check_range
from hongbao.core.sharding import Layout

DEFAULT_CONFIG_FILE = "hongbao.toml"
ENV_PREFIX = "HONGBAO_"
DAY_S = 24 * 3600.0


class ConfigError(ValueError):
    """A setting that is unknown, of the wrong type, or out of its range; ``hongbao`` exits 2 on it."""


# Allowed values of every numeric setting, inclusive, and what the ends mean. Durations are at
# least a millisecond (a zero timeout or interval would spin or close at once).
RANGES: dict[str, tuple[float, float, str]] = {
    "port": (0, 65535, ""),
    "workers": (0, 1024, " (0: automatic)"),
    "mysql_dbs": (1, 100, ""),
    "mysql_tables": (1, 100, ""),
    "mysql_pool_size": (1, 1000, ""),
    "mysql_timeout_ms": (1, 600_000, ""),
    "mysql_transaction_timeout_ms": (1, 600_000, ""),
    "redis_timeout_ms": (1, 600_000, ""),
    "mysql_hot_days": (1, 365, ""),
    "region": (1, 2, " (1: north, 2: south)"),
    "jwt_leeway_s": (0, 3600, ""),
    "max_body_bytes": (1, 1 << 30, ""),
    "max_header_bytes": (1, 1 << 20, ""),
    "max_headers": (1, 1000, ""),
    "header_timeout_s": (0.001, DAY_S, ""),
    "body_timeout_s": (0.001, DAY_S, ""),
    "keepalive_timeout_s": (0.001, DAY_S, ""),
    "max_connections": (1, 10_000_000, ""),
    "max_in_db": (1, 1000, ""),
    "realtime_threshold_fen": (0, 100_000_000_000, ""),
    "credit_interval_s": (0.001, 3600, ""),
    "refund_interval_s": (0.001, 3600, ""),
    "reconcile_interval_s": (0.001, 3600, ""),
    "reconcile_window_ms": (1, 7 * 24 * 3600 * 1000, ""),
    "ws_rate_per_s": (0.001, 1e9, ""),
    "ws_burst": (1, 1_000_000_000, ""),
    "ws_max_message_bytes": (1, 1 << 30, ""),
    "ws_max_output_bytes": (1, 1 << 40, ""),
    "ws_idle_timeout_s": (0.001, 30 * DAY_S, ""),
    "ws_close_timeout_s": (0.001, 3600, ""),
    "ws_token_grace_s": (0, DAY_S, ""),
    "push_node_ttl_s": (1.001, DAY_S, " (more than the 1 s heartbeat)"),
    "fleet_node_ttl_s": (1.001, DAY_S, " (more than the 1 s beat)"),
    "send_rate_per_s": (0.001, 1e9, ""),
    "send_burst": (1, 1_000_000_000, ""),
    "region_send_rate_per_s": (0.001, 1e9, ""),
    "region_send_burst": (1, 1_000_000_000, ""),
    "grab_ok_per_share": (0, 1e6, " (0: no limit)"),
    "shed_lag_ms": (0, 600_000, " (0: never shed)"),
    "fleet_forward_timeout_ms": (1, 600_000, ""),
    "push_session_ttl_s": (0.001, 30 * DAY_S, ""),
    "push_forward_timeout_s": (0.001, 3600, ""),
    "push_store_failures": (1, 1_000_000, ""),
    "push_log_max_messages": (1, 1_000_000, ""),
    "push_log_max_age_s": (0.001, 365 * DAY_S, ""),
}

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
# The values a word setting takes. crediting_mode's are CreditingMode's (core/services/crediting.py,
# too heavy an import for the CLI's start; a test keeps the two equal).
CHOICES: dict[str, tuple[str, ...]] = {
    "backend": ("embedded", "production"),
    "crediting_mode": ("realtime_large", "queued", "deferred"),
}


@dataclass(frozen=True, slots=True)
class Settings:
    """Every knob of ``hongbao serve``, each with its docstring; docs/settings.md lists them with
    their flags, variables, defaults, units and ranges, docs/operations.md says what they trade."""

    host: str = "127.0.0.1"
    """Address to listen on."""
    port: int = 8080
    """Port to listen on; 0: a free port, the same for every worker (named in the ``serving`` log line)."""
    workers: int = 0
    """Worker processes; 0: one per core on the production backend, 1 on the embedded one (worker_count())."""
    data_dir: Path = Path("var")
    """The embedded backend's files (hongbao.db, push.db) and the token key jwt.key."""
    backend: str = "embedded"
    """embedded: SQLite files in data_dir; production: MySQL/MariaDB (mysql_dsn) and Redis (redis_url)."""
    mysql_dsn: str = ""
    """mysql://user:pass@host:port; comma-separated: database i lives on DSN i mod count."""
    mysql_dbs: int = 4
    """N: databases {prefix}db_00.. (docs/architecture.md section 5)."""
    mysql_tables: int = 4
    """M: tables per database (and per day for packets and receipts)."""
    mysql_prefix: str = ""
    """Prefix of the database names (several deployments on one server)."""
    mysql_pool_size: int = 10
    """Connections per database per worker, in each of its two pools (single statements, transactions)."""
    mysql_timeout_ms: int = 300
    """Bound of one MySQL statement on the request path, the wait for a connection included."""
    mysql_transaction_timeout_ms: int = 5000
    """Bound of one MySQL transaction (a batched open of hundreds of receipts)."""
    mysql_hot_days: int = 3
    """``hongbao migrate --cold`` moves closed packets older than this to the cold databases."""
    region: int = 1
    """This node's region, the order id's first digit (docs/architecture.md section 4)."""
    jwt_secret: str = ""
    """HS256 secret of the bearer tokens; empty: the embedded key file data_dir/jwt.key."""
    jwt_public_key_file: str = ""
    """RS256/ES256 public key (PEM) that verifies the tokens instead (verification only)."""
    jwt_leeway_s: float = 5.0
    """Clock skew allowed on a token's exp."""
    max_body_bytes: int = 64 * 1024
    """Largest request body; more is answered 413."""
    max_header_bytes: int = 8 * 1024
    """Largest request head (request line and headers)."""
    max_headers: int = 64
    """Most header lines a request may carry."""
    header_timeout_s: float = 10.0
    """A request head must arrive within this long."""
    body_timeout_s: float = 10.0
    """A request body must arrive within this long."""
    keepalive_timeout_s: float = 75.0
    """An idle keep-alive connection is closed after this long."""
    max_connections: int = 10_000
    """Open connections (HTTP and WebSocket) per worker; more are answered 503."""
    max_in_db: int = 2
    """K: open transactions per packet in the database at once, host-wide (the admission table)."""
    crediting_mode: str = "realtime_large"
    """When a receipt reaches the balance: realtime_large (at least realtime_threshold_fen in the request, the rest
    queued), queued, or deferred (the reconciler credits); switched at run time by POST /v1/admin/crediting-mode."""
    realtime_threshold_fen: int = 2000
    """In realtime_large mode, receipts of at least this many fen are credited in the request."""
    credit_interval_s: float = 0.25
    """How often each worker drains the credit and list queues: the longest a queued credit or list row waits,
    and what sizes their batches (one ledger insert per table and one commit per database for each batch)."""
    refund_interval_s: float = 1.0
    """How often the refund job (one worker at a time, by lease) refunds expired packets."""
    reconcile_interval_s: float = 5.0
    """How often the reconciler (one worker at a time, by lease) runs."""
    reconcile_window_ms: int = 60_000
    """The reconciler completes a two-step money movement cut between its steps once it is this old."""
    test_clock: bool = False
    """Tests only: POST /v1/admin/clock moves the server's time."""
    test_faults: str = ""
    """Tests only (needs test_clock): crash points, "pay_debited=0.02,..." (core/faults.py)."""
    log_level: str = "info"
    """Lowest level logged: debug, info, warning, error or critical (access and audit lines: see access_log)."""
    log_format: str = "text"
    """text, or json (one JSON object a line), for the master and every worker."""
    log_file: str = ""
    """Append the log to this file (reopened on SIGHUP, for logrotate); empty: stderr."""
    access_log: bool = False
    """One line per HTTP request and WebSocket upgrade (logger hongbao.access); off: a proxy usually keeps it."""
    ws_rate_per_s: float = 5000.0
    """New WebSocket connections a second, host-wide (the native RateLimiter); more are answered 503."""
    ws_burst: int = 500
    """New WebSocket connections let in at once after a quiet spell (the depth of the ws_rate_per_s bucket)."""
    ws_allowed_origins: tuple[str, ...] = ()
    """Origin values a WebSocket handshake may carry (a TOML list, or comma-separated); empty: any."""
    ws_max_message_bytes: int = 64 * 1024
    """Largest client message (and frame) payload; more is closed with 1009."""
    ws_max_output_bytes: int = 1 << 20
    """Output queued for one connection past which it is closed with 1013."""
    ws_idle_timeout_s: float = 180.0
    """A WebSocket with no inbound frame for this long is closed."""
    ws_close_timeout_s: float = 5.0
    """Wait this long for the client's close reply, then drop the TCP connection."""
    ws_token_grace_s: float = 30.0
    """A WebSocket outlives its token's exp by this much, then is closed with 4003."""
    node_name: str = ""
    """This host's push node name; empty: the host name (node id: {node_name}/{pid})."""
    internal_host: str = "127.0.0.1"
    """Where each worker's internal push listener binds (ephemeral port)."""
    internal_secret: str = ""
    """Shared secret of forwards between nodes; empty: derived from data_dir/jwt.key."""
    push_node_ttl_s: float = 5.0
    """A node that stops its heartbeat (every second) is dead this long after."""
    push_session_ttl_s: float = 600.0
    """A push session not refreshed for this long reads as offline."""
    push_forward_timeout_s: float = 0.5
    """Wait this long for another node's answer to a forward."""
    push_store_failures: int = 3
    """Consecutive push store failures before this node drops its connections (1011)."""
    push_log_max_messages: int = 1000
    """Per-user offline queue: the newest this many messages are kept (and none past push_log_max_age_s)."""
    push_log_max_age_s: float = 86_400.0
    """Per-user offline queue: no message older than this is kept."""
    send_rate_per_s: float = 2000.0
    """Sends this node takes a second (every worker together); more get 429 busy with Retry-After."""
    send_burst: int = 2000
    """Sends this node takes at once after a quiet spell."""
    region_send_rate_per_s: float = 10_000.0
    """Sends the region takes a second (every node together, on its Redis; production); more get 429 busy."""
    region_send_burst: int = 10_000
    """Sends the region takes at once after a quiet spell."""
    grab_ok_per_share: float = 0.0
    """Grabs a worker answers ok a second per share a packet has left, more get 429 busy; 0: no limit (opens admit)."""
    shed_lag_ms: int = 300
    """A worker whose event loop runs this many ms behind answers new user requests 429 busy; 0: never shed."""
    home_mysql_dsn: str = ""
    """The home region's MySQL (accounts, ledger, lists, groups, flags); empty: mysql_dsn (a home region node)."""
    home_redis_url: str = ""
    """The home region's Redis (push, profiles, read caches, the membership feed); empty: redis_url."""
    region_entry_urls: tuple[str, ...] = ()
    """Each region's entries, north first: http://host:port[,...], tried in turn (for the other region's orders)."""
    fleet_node_url: str = ""
    """Where the other nodes of the region reach this node (production); empty: http://{host}:{port} as it listens."""
    fleet_node_ttl_s: float = 3.0
    """A node not heard for this long leaves its region's live set, and its packets move to their next owner."""
    fleet_forward_timeout_ms: int = 1000
    """A relayed request not answered in this: its owner is skipped for fleet_node_ttl_s and the next one serves."""
    redis_url: str = ""
    """redis://[user:pass@]host:port: the production backend's Redis; beside the embedded backend, push state
    (sessions, logs, topics, the group queue) in Redis. Empty: push state in data_dir/push.db."""
    redis_cluster: bool = False
    """redis_url names one node of a Redis Cluster."""
    redis_timeout_ms: int = 250
    """Bound of one Redis reply (a frozen Redis: the breaker opens within about two of them)."""
    limits: Limits = field(default_factory=Limits)

    def checked(self) -> Settings:
        """This object, if its values make sense together and each number lies in its RANGES range
        (and each limit in LIMIT_RANGES); ConfigError naming the first that does not, its value and
        the allowed range."""
        if self.redis_cluster and not self.redis_url:
            raise ConfigError("redis_cluster needs redis_url (one node of the cluster)")
        if self.redis_url:
            _check_redis_url("redis_url", self.redis_url)
        entries = [url for urls in self.region_entry_urls for url in urls.split(",")]
        for name, url in (("fleet_node_url", self.fleet_node_url), *(("region_entry_urls", u) for u in entries)):
            if url:
                _check_node_url(name, url)
        if self.region_entry_urls and len(self.region_entry_urls) != 2:
            raise ConfigError(f"region_entry_urls names north and south: 2 entries, got {len(self.region_entry_urls)}")
        if self.home_redis_url:
            _check_redis_url("home_redis_url", self.home_redis_url)
        if self.test_faults:
            if not self.test_clock:
                raise ConfigError("test_faults kills workers on purpose: it needs test_clock = true (a test server)")
            try:
                parse_faults(self.test_faults)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        for name, choices in CHOICES.items():
            if getattr(self, name) not in choices:
                raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}")
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(f"log_format must be text or json, got {self.log_format!r}")
        if self.log_level.lower() not in LOG_LEVELS:
            raise ConfigError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}")
        try:
            for name, (low, high, note) in RANGES.items():
                check_range(name, getattr(self, name), low, high, note)
            self.limits.checked()
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return self

    def worker_count(self) -> int:
        """The worker processes to run: ``workers``, or when it is 0, one per core (os.cpu_count())
        on the production backend and 1 on the embedded one (SQLite takes one writer at a time per
        host, so more workers add lock waits, not throughput; ``--workers N`` is still correct there)."""
        if self.workers:
            return self.workers
        return (os.cpu_count() or 1) if self.backend == "production" else 1

    def mysql_layout(self) -> Layout:
        """The sharded MySQL layout these settings name (mysql_dbs x mysql_tables, prefix, hot window)."""
        return Layout(self.mysql_dbs, self.mysql_tables, self.mysql_prefix, self.mysql_hot_days)

    def with_overrides(self, values: Mapping[str, Any]) -> Settings:
        """A copy with ``values`` applied (strings are converted); ValueError for an unknown key, naming
        the setting it probably meant when one is close, or a value that does not convert."""
        known = {f.name: f for f in fields(self)}
        changes: dict[str, Any] = {}
        limit_changes: dict[str, Any] = {}
        for key, value in values.items():
            if key == "limits" and isinstance(value, Mapping):
                limit_changes.update(value)
            elif key in known and key != "limits":
                changes[key] = _convert(key, value, type(getattr(self, key)))
            elif key in {f.name for f in fields(Limits)}:
                limit_changes[key] = value
            else:
                raise ValueError(f"unknown setting {key!r}{_did_you_mean(key)}")
        if limit_changes:
            limits = self.limits
            unknown = set(limit_changes) - {f.name for f in fields(Limits)}
            if unknown:
                raise ValueError(f"unknown setting limits.{min(unknown)}{_did_you_mean(min(unknown), 'limits.')}")
            changes["limits"] = dataclasses.replace(
                limits, **{k: _convert(f"limits.{k}", v, type(getattr(limits, k))) for k, v in limit_changes.items()}
            )
        return dataclasses.replace(self, **changes)


def setting_names() -> list[str]:
    """Every setting as the TOML file and HONGBAO_* name it, in Settings' order: its fields, then the
    limits' (which may also sit under ``[limits]``)."""
    return [f.name for f in fields(Settings) if f.name != "limits"] + [f.name for f in fields(Limits)]


def _closest(name: str) -> str | None:
    """The setting ``name`` was probably meant to be (difflib), or None when none is close."""
    close = difflib.get_close_matches(name, setting_names(), n=1, cutoff=0.75)
    return close[0] if close else None


def _did_you_mean(name: str, prefix: str = "") -> str:
    close = _closest(name)
    return f" (did you mean {prefix}{close}?)" if close else ""


def _convert(name: str, value: Any, kind: type) -> Any:
    """``value`` as setting ``name`` of type ``kind`` takes it; ValueError naming both when it does not
    convert (the value redacted)."""
    try:
        return _converted(value, kind)
    except (TypeError, ValueError):
        shown = redact(value, name)
        raise ValueError(f"{name} must be {_KIND_NAMES.get(kind, kind.__name__)}, got {shown!r}") from None


_KIND_NAMES = {int: "an integer", float: "a number", bool: "a boolean", str: "a string", tuple: "a list of strings"}


def _converted(value: Any, kind: type) -> Any:
    if kind is bool and isinstance(value, str):
        if value.lower() not in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
            raise ValueError(value)
        return value.lower() in {"1", "true", "yes", "on"}
    if kind is Path:
        return Path(value)
    if kind is tuple:  # a TOML list, or a comma-separated string from the environment
        items = value.split(",") if isinstance(value, str) else value
        return tuple(str(item).strip() for item in items if str(item).strip())
    return kind(value)


def warn_on_stderr(message: str) -> None:
    """Print ``message`` as one ``hongbao: warning:`` line on stderr (load_settings' default ``warn``)."""
    print(f"hongbao: warning: {message}", file=sys.stderr)


def load_settings(
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    *,
    dsn_means_production: bool = False,
    warn: Callable[[str], None] = warn_on_stderr,
) -> Settings:
    """Defaults <- TOML file (``config_file``, else ./hongbao.toml when present) <- HONGBAO_* env <- flags.

    With ``dsn_means_production`` (``hongbao audit``, ``hongbao storm``), a mysql_dsn from any
    source selects the production backend when no source sets ``backend``.

    A HONGBAO_* variable that names no setting is ignored with a warning (``warn``, one line naming
    the variable and the setting it probably meant, never its value); a key the TOML file sets
    twice (at the top level and under a section, or under two) warns too, and the last one counts.

    Raises FileNotFoundError for a named config file that is missing, ConfigError (a ValueError)
    for an unknown key in the file, a value of the wrong type or out of its range (the message
    names the setting, the value redacted and, for a range, the allowed values), and with
    ``dsn_means_production`` for a mysql_dsn beside a backend set to embedded (the message names
    where each was set)."""
    settings = Settings()
    given: dict[str, str] = {}  # backend, mysql_dsn -> where it was last set
    path = config_file or (Path(DEFAULT_CONFIG_FILE) if Path(DEFAULT_CONFIG_FILE).exists() else None)
    if path is not None:
        with open(path, "rb") as handle:
            try:
                data = tomllib.load(handle)
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"config file {path}: {exc}") from None
        flat = _flattened(data, path, warn)
        settings = _overridden(settings, flat, f"config file {path}")
        given.update(_sources(flat, "toml", path))
    env = os.environ if env is None else env
    known = set(setting_names())
    for key, value in sorted(env.items()):
        if key.startswith(ENV_PREFIX):
            name = key[len(ENV_PREFIX) :].lower()
            if name not in known:
                close = _closest(name)
                hint = f" (did you mean {ENV_PREFIX}{close.upper()}?)" if close else ""
                warn(f"ignoring the environment variable {key}: no setting is called {name}{hint}")
                continue
            settings = _overridden(settings, {name: value}, f"environment variable {key}={redact(value, name)!r}")
            given.update(_sources({name: value}, "env"))
    if flags:
        values = {k: v for k, v in flags.items() if v is not None}
        settings = _overridden(settings, values, "command line")
        given.update(_sources(values, "flag"))
    if dsn_means_production and settings.mysql_dsn:
        if "backend" not in given:
            settings = dataclasses.replace(settings, backend="production")
        elif settings.backend == "embedded":
            raise ConfigError(
                f"{given['mysql_dsn']} means the production backend, but {given['backend']} was given: drop one of them"
            )
    return settings.checked()


def _flattened(data: Mapping[str, Any], path: Path, warn: Callable[[str], None]) -> dict[str, Any]:
    """The settings of a TOML document: the keys of every ``[section]`` but ``[limits]`` read as if
    they were at the top level (sections such as ``[server]`` or ``[mysql]`` are for readability
    only, docs/settings.md); a key set twice warns, and the last one counts."""
    flat: dict[str, Any] = {}
    where: dict[str, str] = {}
    for key, value in data.items():
        section = isinstance(value, dict) and key != "limits"
        for name, item in value.items() if section else [(key, value)]:
            place = f"in [{key}]" if section else "at the top level"
            if name in where:
                warn(f"config file {path}: {name} is set {where[name]} and {place}: the last one counts")
            where[name], flat[name] = place, item
    return flat


def _sources(values: Mapping[str, Any], kind: str, path: Path | None = None) -> dict[str, str]:
    """Where ``backend`` and ``mysql_dsn`` of ``values`` were set, as the user wrote it (``kind``:
    flag, env, or toml with its ``path``): ``--backend embedded``, ``HONGBAO_MYSQL_DSN``,
    ``backend = "embedded" in FILE``... Never a DSN's value: it holds the password."""
    out: dict[str, str] = {}
    if "backend" in values:
        backend = values["backend"]
        out["backend"] = {
            "flag": f"--backend {backend}",
            "env": f"HONGBAO_BACKEND={backend}",
            "toml": f'backend = "{backend}" in {path}',
        }[kind]
    if "mysql_dsn" in values:
        out["mysql_dsn"] = {"flag": "--mysql-dsn", "env": "HONGBAO_MYSQL_DSN", "toml": f"mysql_dsn in {path}"}[kind]
    return out


def _overridden(settings: Settings, values: Mapping[str, Any], source: str) -> Settings:
    """``settings.with_overrides(values)``; ConfigError naming ``source`` for an unknown key or a value
    that does not convert."""
    try:
        return settings.with_overrides(values)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _check_node_url(name: str, url: str) -> None:
    """ConfigError unless ``url`` (of setting ``name``) is ``http://host:port`` (nothing after the port but a ``/``)."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme != "http" or not parts.hostname or not port or parts.path.strip("/"):
        raise ConfigError(f"{name} must look like http://host:port, got {url!r}")


def _check_redis_url(name: str, url: str) -> None:
    """ConfigError (the URL redacted) unless ``url`` is ``redis://`` or ``rediss://`` with a host
    and, if any, a numeric port: what redis-py would otherwise refuse in every worker."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise ConfigError(f"{name} must look like redis://[user:password@]host:port, got {redact(url)!r}")
