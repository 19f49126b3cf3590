"""A fleet described in one TOML file (docs/architecture.md section 9, ``hongbao fleet``): two
regions, each with its MySQL/MariaDB and Redis and its nodes, the home region of the users' data,
and the settings every node shares; turned into one ``hongbao serve`` configuration per node.

    home = "north"            # the region holding accounts, ledger, lists, groups, push (default north)
    workers = 1               # worker processes per node (default 1)
    host = "127.0.0.1"        # where every node listens and is reached (default 127.0.0.1)

    [north]
    mysql_dsn = "mysql://user:pass@127.0.0.1:3306"   # both left out: `hongbao fleet` starts a
    redis_url = "redis://127.0.0.1:6379"             # throwaway mariadbd and redis-server for it
    ports = [8081, 8082]      # one node each; every node is an entry of its region

    [south]
    mysql_dsn = "mysql://user:pass@127.0.0.1:3307"
    redis_url = "redis://127.0.0.1:6380"
    ports = [9081, 9082]

    [settings]                # any setting of docs/settings.md, for every node (mysql_dbs, ...)
    mysql_dbs = 2

Each node gets: the production backend on its region's stores, the home region's as
``home_mysql_dsn``/``home_redis_url`` when its region is not the home, both regions' nodes as
their entries (``region_entry_urls``), its URL (``fleet_node_url``) and name (``node_name``, e.g.
``north-1``).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hongbao.core.services.traffic import REGION_NAMES
from hongbao.server.config import ConfigError, Settings

_TOP = {"home", "workers", "host", "north", "south", "settings"}
_REGION = {"mysql_dsn", "redis_url", "ports"}
#: What the fleet file sets for each node itself: not in its [settings].
_OWN = {"backend", "port", "host", "workers", "region", "mysql_dsn", "redis_url", "node_name", "fleet_node_url"}
_OWN |= {"home_mysql_dsn", "home_redis_url", "region_entry_urls", "data_dir"}


@dataclass(frozen=True, slots=True)
class Region:
    """One region: ``number`` (1 north, 2 south), its stores (both empty: to be started by
    ``hongbao fleet``, server/fleet_launch.py) and its nodes' ``ports``."""

    number: int
    mysql_dsn: str
    redis_url: str
    ports: tuple[int, ...]

    @property
    def name(self) -> str:
        """north or south."""
        return REGION_NAMES[self.number]


@dataclass(frozen=True, slots=True)
class Node:
    """One node of a fleet: ``name`` (``north-1``...), ``region``, ``port``, ``url`` and its
    ``hongbao serve`` configuration (``toml``, the whole file)."""

    name: str
    region: int
    port: int
    url: str
    toml: str


@dataclass(frozen=True, slots=True)
class Fleet:
    """A fleet: ``regions`` (north, south), the ``home`` region's number, ``workers`` per node,
    the ``host`` of every node and the ``settings`` (TOML keys) every node shares."""

    regions: tuple[Region, Region]
    home: int
    workers: int
    host: str
    settings: dict[str, Any]

    def entries(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Each region's entries, north first: its nodes' URLs (the first one is tried first)."""
        north, south = (tuple(f"http://{self.host}:{port}" for port in region.ports) for region in self.regions)
        return north, south

    def nodes(self) -> list[Node]:
        """Every node, north's first, each with its configuration."""
        home = self.regions[self.home - 1]
        entries = self.entries()
        found = []
        for region in self.regions:
            for index, port in enumerate(region.ports, 1):
                url = f"http://{self.host}:{port}"
                own: dict[str, Any] = {
                    "backend": "production",
                    "host": self.host,
                    "port": port,
                    "workers": self.workers,
                    "region": region.number,
                    "mysql_dsn": region.mysql_dsn,
                    "redis_url": region.redis_url,
                    "node_name": f"{region.name}-{index}",
                    "fleet_node_url": url,
                    "region_entry_urls": [",".join(urls) for urls in entries],
                }
                if region.number != self.home:
                    own |= {"home_mysql_dsn": home.mysql_dsn, "home_redis_url": home.redis_url}
                toml = "".join(f"{key} = {_toml(value)}\n" for key, value in {**self.settings, **own}.items())
                found.append(Node(f"{region.name}-{index}", region.number, port, url, toml))
        return found

    def mysql_dsns(self) -> list[str]:
        """Every region's MySQL DSN, north first (the audit reads them as one set of books)."""
        return [region.mysql_dsn for region in self.regions]


def load_fleet(path: Path) -> Fleet:
    """The fleet of the TOML file at ``path``. Raises FileNotFoundError, or ConfigError naming
    what is wrong (an unknown key, a missing region or store, a bad port, a [settings] key that
    is not a setting, has a bad value, or is one the fleet sets for each node)."""
    with open(path, "rb") as handle:
        try:
            data = tomllib.load(handle)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"fleet file {path}: {exc}") from None
    _only(data, _TOP, f"fleet file {path}")
    home = data.get("home", "north")
    if home not in ("north", "south"):
        raise ConfigError(f"fleet file {path}: home must be north or south, got {home!r}")
    workers, host = data.get("workers", 1), data.get("host", "127.0.0.1")
    if type(workers) is not int or not 1 <= workers <= 64:
        raise ConfigError(f"fleet file {path}: workers must be a whole number from 1 to 64, got {workers!r}")
    if not isinstance(host, str) or not host:
        raise ConfigError(f"fleet file {path}: host must be a host name or address, got {host!r}")
    regions = tuple(_region(path, number, data.get(name)) for number, name in REGION_NAMES.items())
    ports = [port for region in regions for port in region.ports]
    if twice := sorted({port for port in ports if ports.count(port) > 1}):
        raise ConfigError(f"fleet file {path}: port {', '.join(map(str, twice))} is given to two nodes")
    common = data.get("settings", {})
    if not isinstance(common, dict):
        raise ConfigError(f"fleet file {path}: [settings] must be a table of settings")
    if clash := sorted(set(common) & _OWN):
        raise ConfigError(f"fleet file {path}: [settings] cannot set {', '.join(clash)}: the fleet sets it per node")
    try:
        Settings().with_overrides(common).checked()
    except ValueError as exc:  # ConfigError, or with_overrides' ValueError: each names the setting
        raise ConfigError(f"fleet file {path}: [settings]: {exc}") from None
    north, south = regions
    return Fleet((north, south), 1 if home == "north" else 2, workers, host, dict(common))


def _region(path: Path, number: int, table: object) -> Region:
    name = REGION_NAMES[number]
    if not isinstance(table, dict):
        raise ConfigError(f"fleet file {path}: [{name}] is missing (its ports, and mysql_dsn and redis_url)")
    _only(table, _REGION, f"fleet file {path}: [{name}]")
    dsn, url, ports = table.get("mysql_dsn", ""), table.get("redis_url", ""), table.get("ports")
    if not isinstance(dsn, str) or not isinstance(url, str) or bool(dsn) != bool(url):
        raise ConfigError(f"fleet file {path}: [{name}] needs both mysql_dsn and redis_url, or neither (started here)")
    if not isinstance(ports, list) or not ports or not all(type(p) is int and 0 < p < 65536 for p in ports):
        got = "nothing" if ports is None else repr(ports)
        raise ConfigError(f"fleet file {path}: [{name}] ports must be a list of port numbers 1-65535, got {got}")
    if dsn:
        Settings(backend="production", mysql_dsn=dsn, redis_url=url).checked()
    return Region(number, dsn, url, tuple(ports))


def _only(table: dict[str, Any], allowed: set[str], where: str) -> None:
    if unknown := sorted(set(table) - allowed):
        raise ConfigError(f"{where}: unknown key {', '.join(unknown)} (known: {', '.join(sorted(allowed))})")


def _toml(value: object) -> str:
    """``value`` (str, bool, int, float, or a list of them) as a TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
