"""Storm scenarios: what load to play, from a named scenario, a TOML file, and flags.

A scenario fixes the population (users, groups and their size mix), the packets (rate, kinds,
counts, amounts in fen), how members react (the share that opens, delays, duplicate clicks,
client retries) and how the load is run (processes, connections). Units are in the names:
``*_s`` seconds, ``*_fen`` fen, ``*_rate`` per second, ``*_p`` probabilities in [0, 1].

Named scenarios: ``smoke`` (20 s of sends and 8 s of late opens: the demo's check), ``new-year-eve`` (the headline
peak: many groups, a high send rate, a long tail), ``hot-group`` (500 members on one group,
100-share packets: the hot-row case). A TOML file may start from one with ``base = "smoke"``
and override any field (``[storm]`` or top level); flags override the file.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

KINDS = ("lucky", "equal", "exclusive")


class ScenarioError(ValueError):
    """A scenario that cannot run: unknown name or field, wrong type, or values out of range.
    The message names the field (and the file) at fault."""


@dataclass(frozen=True)
class Scenario:
    """Everything a storm plays. ``group_sizes`` is a list of ``(weight, min, max)`` buckets of
    members per group (the creator included); ``kinds`` maps lucky/equal/exclusive to weights;
    delays after a packet is paid are log-normal (``delay_median_s``, ``delay_sigma``) and cut at
    ``tail_s``, so the storm lasts ``duration_s`` (sends) + ``tail_s`` (late openers). A share
    ``online_p`` of the users holds a WebSocket push connection, and ``drop_p`` of those drops
    and reconnects once (``push.py``)."""

    name: str = "custom"
    seed: int = 1
    duration_s: float = 20.0
    tail_s: float = 8.0
    users: int = 600
    groups: int = 60
    group_sizes: tuple[tuple[float, int, int], ...] = ((0.85, 3, 20), (0.12, 21, 100), (0.03, 101, 500))
    send_rate: float = 20.0
    kinds: tuple[tuple[str, float], ...] = (("lucky", 0.7), ("equal", 0.2), ("exclusive", 0.1))
    count_min: int = 2
    count_max: int = 30
    total_min_fen: int = 100
    total_max_fen: int = 20_000
    open_p: float = 0.9
    grab_p: float = 0.8
    delay_median_s: float = 1.5
    delay_sigma: float = 1.2
    duplicate_p: float = 0.05
    retry_p: float = 0.03
    busy_retries: int = 3
    online_p: float = 0.3
    drop_p: float = 0.1
    push_backoff_cap_s: float = 30.0  # the push clients' reconnect backoff cap (full jitter, as PushClient's)
    processes: int = 2
    connections: int = 64
    timeout_s: float = 30.0

    def checked(self) -> Scenario:
        """This scenario if its values make sense; ScenarioError naming the first that does not."""
        positive = (
            "duration_s",
            "users",
            "groups",
            "send_rate",
            "count_min",
            "total_min_fen",
            "delay_median_s",
            "processes",
            "connections",
            "timeout_s",
        )
        for name in positive:
            if not getattr(self, name) > 0:
                raise ScenarioError(f"{name} must be positive, got {getattr(self, name)!r}")
        for name in ("open_p", "grab_p", "duplicate_p", "retry_p", "online_p", "drop_p"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ScenarioError(f"{name} must be a probability in [0, 1], got {getattr(self, name)!r}")
        if self.tail_s < 0 or self.delay_sigma < 0 or self.busy_retries < 0:
            raise ScenarioError("tail_s, delay_sigma and busy_retries must not be negative")
        if not self.push_backoff_cap_s > 0:
            raise ScenarioError("push_backoff_cap_s must be a positive number of seconds")
        if self.count_max < self.count_min or self.total_max_fen < self.total_min_fen:
            raise ScenarioError("count_max/total_max_fen must not be below count_min/total_min_fen")
        if self.total_min_fen < self.count_max:
            raise ScenarioError(
                f"total_min_fen ({self.total_min_fen}) must cover count_max ({self.count_max}) shares of 1 fen"
            )
        if not self.group_sizes or any(w < 0 or not 2 <= lo <= hi for w, lo, hi in self.group_sizes):
            raise ScenarioError("group_sizes must be [weight, min, max] buckets with weight >= 0 and 2 <= min <= max")
        if max(hi for _, _, hi in self.group_sizes) > self.users:
            raise ScenarioError(
                f"a group of {max(hi for _, _, hi in self.group_sizes)} members needs at least that many users "
                f"({self.users})"
            )
        if sum(w for w, _, _ in self.group_sizes) <= 0:
            raise ScenarioError("group_sizes weights must not all be zero")
        if any(k not in KINDS or w < 0 for k, w in self.kinds) or sum(w for _, w in self.kinds) <= 0:
            raise ScenarioError(f"kinds must map {', '.join(KINDS)} to weights >= 0, not all zero")
        return self

    def with_overrides(self, values: Mapping[str, Any], source: str = "flags") -> Scenario:
        """A copy with ``values`` applied and checked; ScenarioError for an unknown field or a
        value of the wrong type (``source`` names where the values came from)."""
        known = {f.name: f for f in fields(self)}
        changes: dict[str, Any] = {}
        for key, value in values.items():
            if key not in known:
                raise ScenarioError(f"{source}: unknown scenario field {key!r} (known: {', '.join(sorted(known))})")
            changes[key] = _convert(key, value, getattr(self, key), source)
        return dataclasses.replace(self, **changes).checked()

    def as_json(self) -> dict[str, Any]:
        """The scenario as plain JSON values."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _convert(key: str, value: Any, default: Any, source: str) -> Any:
    try:
        if key == "group_sizes":
            return tuple((float(w), int(lo), int(hi)) for w, lo, hi in value)
        if key == "kinds":
            items = value.items() if isinstance(value, Mapping) else value
            return tuple((str(k), float(w)) for k, w in items)
        if isinstance(default, bool) or not isinstance(default, (int, float, str)):
            raise TypeError(type(default).__name__)
        if isinstance(default, int) and isinstance(value, float) and not value.is_integer():
            raise ValueError(f"not an integer: {value}")
        return type(default)(value)
    except (TypeError, ValueError) as exc:
        raise ScenarioError(f"{source}: {key} = {value!r} is not valid ({exc})") from None


SMOKE = Scenario(name="smoke")
NAMED: dict[str, Scenario] = {
    "smoke": SMOKE,
    "new-year-eve": dataclasses.replace(
        SMOKE,
        name="new-year-eve",
        duration_s=120.0,
        tail_s=60.0,
        users=20_000,
        groups=4_000,
        send_rate=150.0,
        delay_median_s=3.0,
        delay_sigma=1.4,
        online_p=0.2,
        processes=4,
        connections=128,
    ),
    "hot-group": dataclasses.replace(
        SMOKE,
        name="hot-group",
        duration_s=20.0,
        tail_s=5.0,
        users=500,
        groups=1,
        group_sizes=((1.0, 500, 500),),
        send_rate=1.0,
        kinds=(("lucky", 1.0),),
        count_min=100,
        count_max=100,
        total_min_fen=10_000,
        total_max_fen=20_000,
        open_p=1.0,
        grab_p=0.9,
        delay_median_s=0.4,
        delay_sigma=0.8,
        online_p=1.0,
        connections=256,
    ),
}


def load_scenario(
    name: str | None = None, file: Path | None = None, overrides: Mapping[str, Any] | None = None
) -> Scenario:
    """The named scenario (default ``smoke``), then the TOML ``file`` (its ``base`` names the
    scenario to start from), then ``overrides``. Raises ScenarioError (unknown name, unknown
    field, bad value, unreadable TOML) or FileNotFoundError."""
    values: dict[str, Any] = {}
    base = name
    if file is not None:
        try:
            with open(file, "rb") as handle:
                data = tomllib.load(handle)
        except tomllib.TOMLDecodeError as exc:
            raise ScenarioError(f"{file}: not valid TOML ({exc})") from None
        values = dict(data.pop("storm", {})) | data
        file_base = values.pop("base", None)
        base = name or (str(file_base) if file_base is not None else None)
    base = base or "smoke"
    if base not in NAMED:
        raise ScenarioError(f"unknown scenario {base!r} (named: {', '.join(NAMED)})")
    scenario = NAMED[base]
    if values:
        scenario = scenario.with_overrides({"name": f"{base}+{file.name if file else 'file'}"} | values, str(file))
    if overrides:
        scenario = scenario.with_overrides(overrides)
    return scenario.checked()
