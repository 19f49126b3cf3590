"""The traffic switch (docs/architecture.md section 9): which region a new packet goes to.

An operator sets it (``POST /v1/admin/traffic``): ``auto`` (the default: a send stays in the
region of the node it reached, unless that region's packet databases are down, then it goes to
the other region), ``north`` or ``south`` (every new packet there), or ``weighted`` (each send
draws its region by the weights). It is a flag (hongbao.core.ports.Flags) on the home region, so
every node of both regions follows it within its flag sync (one second). Packets already made
stay where they are: the switch moves new packets only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import orjson
from hongbao.core import errors
from hongbao.core.ports import Flags

TRAFFIC_FLAG = "traffic"
MODES = ("auto", "north", "south", "weighted")
REGION_NAMES = {1: "north", 2: "south"}


@dataclass(frozen=True, slots=True)
class Traffic:
    """One setting of the switch: ``mode`` (one of MODES) and, for ``weighted``, the relative
    ``weights`` of north and south (non-negative, not both 0)."""

    mode: str = "auto"
    weights: tuple[float, float] = (1.0, 1.0)

    def to_json(self) -> dict[str, object]:
        """``{"new_packets": mode, "weights": {"north": w, "south": w}}`` (the weights when weighted)."""
        answer: dict[str, object] = {"new_packets": self.mode}
        if self.mode == "weighted":
            answer["weights"] = {"north": self.weights[0], "south": self.weights[1]}
        return answer

    @staticmethod
    def parse(body: dict[str, object]) -> Traffic:
        """A setting from ``{"new_packets": auto | north | south | weighted, "weights": {"north",
        "south"}}`` (weights only, and required, with ``weighted``). Raises InvalidRequest."""
        mode = body.get("new_packets")
        if mode not in MODES:
            raise errors.InvalidRequest(f"new_packets must be one of {', '.join(MODES)}")
        weights = body.get("weights")
        if mode != "weighted":
            if weights is not None:
                raise errors.InvalidRequest("weights go with new_packets = weighted only")
            return Traffic(str(mode))
        if not isinstance(weights, dict) or set(weights) != {"north", "south"}:
            raise errors.InvalidRequest('weighted needs weights {"north": number, "south": number}')
        pair = (weights["north"], weights["south"])
        if not all(type(w) in (int, float) and 0 <= w <= 1e6 for w in pair) or not any(pair):
            raise errors.InvalidRequest("weights are numbers from 0 to 1e6, not both 0")
        return Traffic("weighted", (float(pair[0]), float(pair[1])))


class TrafficSwitch:
    """The switch over ``flags``; ``traffic`` is this worker's copy, ``rng`` draws weighted sends."""

    __slots__ = ("flags", "traffic", "rng")

    def __init__(self, flags: Flags, rng: random.Random | None = None) -> None:
        self.flags, self.traffic, self.rng = flags, Traffic(), rng or random.Random()

    async def set(self, traffic: Traffic) -> None:
        """Set it for every node (they sync within a second) and here now."""
        await self.flags.set(TRAFFIC_FLAG, orjson.dumps(traffic.to_json()).decode())
        self.traffic = traffic

    async def sync(self) -> None:
        """Pick up a setting made by another worker or node (an unreadable one is kept out)."""
        value = await self.flags.get(TRAFFIC_FLAG)
        if value is None:
            return
        try:
            self.traffic = Traffic.parse(orjson.loads(value))
        except (orjson.JSONDecodeError, errors.InvalidRequest, AttributeError):
            pass

    def region_for_send(self, own: int, own_down: bool) -> int:
        """The region (1, 2) a new packet made at a node of region ``own`` goes to; ``own_down``:
        that region's packet databases are down (``auto`` then sends it to the other region)."""
        mode = self.traffic.mode
        if mode == "north":
            return 1
        if mode == "south":
            return 2
        if mode == "weighted":
            north, south = self.traffic.weights
            return 1 if self.rng.random() * (north + south) < north else 2
        return 3 - own if own_down else own
