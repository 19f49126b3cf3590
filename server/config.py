"""Server configuration: defaults, then ``hongbao.toml`` (or ``--config FILE``), then HONGBAO_*
environment variables, then command-line flags; the embedded backend needs none of them.

Units are in the names: ``*_s`` seconds, ``*_ms`` milliseconds, ``*_bytes`` bytes, ``*_fen`` fen.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hongbao.core.adapters.mysql_db import Layout
from hongbao.core.rules import Limits

DEFAULT_CONFIG_FILE = "hongbao.toml"


@dataclass(frozen=True, slots=True)
class Settings:
    """Every knob of ``hongbao serve``; see docs/operations.md for what each one trades."""

    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 0  # 0: automatic, see worker_count()
    data_dir: Path = Path("var")
    backend: str = "embedded"  # embedded | production (MySQL/MariaDB money, Redis state)
    mysql_dsn: str = ""  # mysql://user:pass@host:port; comma-separated: database i lives on DSN i mod count
    mysql_dbs: int = 4  # N databases (db_00..), DESIGN.md section 5
    mysql_tables: int = 4  # M tables per database and day
    mysql_prefix: str = ""  # database names are {prefix}db_{i:02}
    mysql_pool_size: int = 10  # connections per database per worker
    mysql_hot_days: int = 3  # `hongbao migrate --cold` moves closed packets older than this
    region: int = 1
    jwt_secret: str = ""  # HS256 secret; empty -> the embedded key file data_dir/jwt.key
    jwt_public_key_file: str = ""  # RS256/ES256 public key (PEM); verification only
    jwt_leeway_s: float = 5.0
    max_body_bytes: int = 64 * 1024
    max_header_bytes: int = 8 * 1024
    max_headers: int = 64
    header_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    keepalive_timeout_s: float = 75.0
    max_connections: int = 10_000
    max_in_db: int = 2  # K: open transactions per packet in the DB at once
    crediting_mode: str = "realtime_large"
    realtime_threshold_fen: int = 2000
    credit_interval_s: float = 0.05
    refund_interval_s: float = 1.0
    reconcile_interval_s: float = 5.0
    reconcile_window_ms: int = 60_000
    test_clock: bool = False  # tests only: POST /v1/admin/clock moves the server's time
    log_level: str = "info"
    ws_rate_per_s: float = 5000.0  # new WebSocket connections a second, host-wide (native RateLimiter)
    ws_burst: int = 500  # ... of which this many at once after a quiet spell
    ws_allowed_origins: tuple[str, ...] = ()  # Origin values a handshake may carry; empty: any
    ws_max_message_bytes: int = 64 * 1024  # largest client message (and frame), payload bytes
    ws_max_output_bytes: int = 1 << 20  # queued output per connection past which it is closed with 1013
    ws_idle_timeout_s: float = 180.0  # no inbound frame for this long: close
    ws_close_timeout_s: float = 5.0  # wait this long for the client's close reply, then drop TCP
    ws_token_grace_s: float = 30.0  # a connection outlives its token's exp by this much, then 4003
    node_name: str = ""  # this host's push node name; empty: the host name (node id: {node_name}/{pid})
    internal_host: str = "127.0.0.1"  # where each worker's internal push listener binds (ephemeral port)
    internal_secret: str = ""  # shared secret of forwards between nodes; empty: derived from data_dir/jwt.key
    push_node_ttl_s: float = 5.0  # a node that stops its heartbeat (every second) is dead this long after
    push_session_ttl_s: float = 600.0  # a session not refreshed for this long reads as offline
    push_forward_timeout_s: float = 0.5  # wait this long for another node's answer to a forward
    push_store_failures: int = 3  # consecutive push store failures before this node drops its connections
    push_log_max_messages: int = 1000  # per-user offline queue: the newest N messages are kept...
    push_log_max_age_s: float = 86_400.0  # ... none older than this
    redis_url: str = ""  # redis://[user:pass@]host:port: push state (sessions, logs, topics, group queue) in Redis; empty: embedded
    redis_cluster: bool = False  # redis_url names one node of a Redis Cluster
    limits: Limits = field(default_factory=Limits)

    def checked(self) -> Settings:
        """This object, if its values make sense together; ValueError naming the first that does not."""
        if self.redis_cluster and not self.redis_url:
            raise ValueError("redis_cluster needs redis_url (one node of the cluster)")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if self.workers < 0:
            raise ValueError(f"workers must be at least 1 (or 0: automatic), got {self.workers}")
        if self.region not in (1, 2):
            raise ValueError(f"region must be 1 (north) or 2 (south), got {self.region}")
        for name in ("max_body_bytes", "max_header_bytes", "max_headers", "max_connections", "max_in_db", "ws_burst",
                     "ws_max_message_bytes", "ws_max_output_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.backend not in ("embedded", "production"):
            raise ValueError(f"backend must be embedded or production, got {self.backend!r}")
        if min(self.mysql_dbs, self.mysql_tables, self.mysql_pool_size, self.mysql_hot_days) < 1:
            raise ValueError("mysql_dbs, mysql_tables, mysql_pool_size and mysql_hot_days must be at least 1")
        for name in ("push_store_failures", "push_log_max_messages"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.push_node_ttl_s > 1.0:
            raise ValueError(f"push_node_ttl_s must be more than the 1 s heartbeat, got {self.push_node_ttl_s}")
        for name in ("ws_rate_per_s", "ws_idle_timeout_s", "ws_close_timeout_s", "push_session_ttl_s", "push_forward_timeout_s",
                     "push_log_max_age_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
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
        """A copy with ``values`` applied (unknown keys raise ValueError; strings are converted)."""
        known = {f.name: f for f in fields(self)}
        changes: dict[str, Any] = {}
        limit_changes: dict[str, Any] = {}
        for key, value in values.items():
            if key == "limits" and isinstance(value, Mapping):
                limit_changes.update(value)
            elif key in known and key != "limits":
                changes[key] = _convert(value, type(getattr(self, key)))
            elif key in {f.name for f in fields(Limits)}:
                limit_changes[key] = value
            else:
                raise ValueError(f"unknown setting {key!r}")
        if limit_changes:
            limits = self.limits
            changes["limits"] = dataclasses.replace(limits, **{k: _convert(v, type(getattr(limits, k))) for k, v in limit_changes.items()})
        return dataclasses.replace(self, **changes)


def _convert(value: Any, kind: type) -> Any:
    if kind is bool and isinstance(value, str):
        if value.lower() not in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
            raise ValueError(f"not a boolean: {value!r}")
        return value.lower() in {"1", "true", "yes", "on"}
    if kind is Path:
        return Path(value)
    if kind is tuple:  # a TOML list, or a comma-separated string from the environment
        items = value.split(",") if isinstance(value, str) else value
        return tuple(str(item).strip() for item in items if str(item).strip())
    return kind(value)


def load_settings(config_file: Path | None = None, env: Mapping[str, str] | None = None,
                  flags: Mapping[str, Any] | None = None) -> Settings:
    """Defaults <- TOML file (``config_file``, else ./hongbao.toml when present) <- HONGBAO_* env <- flags.

    Raises FileNotFoundError for a named config file that is missing, ValueError for an unknown
    setting or a value of the wrong type."""
    settings = Settings()
    path = config_file or (Path(DEFAULT_CONFIG_FILE) if Path(DEFAULT_CONFIG_FILE).exists() else None)
    if path is not None:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
        flat: dict[str, Any] = {}
        for key, value in data.items():
            if isinstance(value, dict) and key not in {"limits"}:
                flat.update(value)  # sections such as [server] or [jwt] are only for readability
            else:
                flat[key] = value
        settings = settings.with_overrides(flat)
    env = os.environ if env is None else env
    for key, value in sorted(env.items()):
        if key.startswith("HONGBAO_"):
            try:
                settings = settings.with_overrides({key[len("HONGBAO_"):].lower(): value})
            except ValueError as exc:
                raise ValueError(f"environment variable {key}={value!r}: {exc}") from None
    if flags:
        settings = settings.with_overrides({k: v for k, v in flags.items() if v is not None})
    return settings.checked()
