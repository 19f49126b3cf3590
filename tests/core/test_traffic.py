"""The traffic switch (docs/architecture.md section 9) over the embedded backend's flags: what a
send's region is in each mode, and how another worker picks a setting up."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hongbao.core import errors
from hongbao.core.services.traffic import Traffic, TrafficSwitch
from hongbao.server.composition import Backend


async def test_each_mode_names_the_region_of_a_new_packet(make_backend: Callable[..., Backend]) -> None:
    """auto keeps a send in its node's region unless that region is down; north and south send
    everything there; weighted draws by the weights (3:1 over 4 000 seeded draws). A setting made
    by one worker reaches another at its next sync."""
    here, there = make_backend().services.traffic, make_backend().services.traffic
    assert [here.region_for_send(own, down) for own in (1, 2) for down in (False, True)] == [1, 2, 2, 1]
    await here.set(Traffic("south"))
    assert {here.region_for_send(own, down) for own in (1, 2) for down in (False, True)} == {2}
    assert there.region_for_send(1, False) == 1  # not synced yet
    await there.sync()
    assert there.traffic == Traffic("south") and there.region_for_send(1, False) == 2
    weighted = TrafficSwitch(here.flags, random.Random(7))
    await weighted.set(Traffic.parse({"new_packets": "weighted", "weights": {"north": 3, "south": 1}}))
    north = sum(weighted.region_for_send(2, False) == 1 for _ in range(4000))
    assert 2850 < north < 3150, north
    await there.sync()
    assert there.traffic.to_json() == {"new_packets": "weighted", "weights": {"north": 3.0, "south": 1.0}}


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"new_packets": "east"},
        {"new_packets": "auto", "weights": {"north": 1, "south": 1}},
        {"new_packets": "weighted"},
        {"new_packets": "weighted", "weights": {"north": 1}},
        {"new_packets": "weighted", "weights": {"north": 0, "south": 0}},
        {"new_packets": "weighted", "weights": {"north": -1, "south": 2}},
        {"new_packets": "weighted", "weights": {"north": "1", "south": 2}},
        {"new_packets": "weighted", "weights": {"north": True, "south": 2}},
    ],
)
def test_a_bad_setting_is_refused(body: dict[str, object]) -> None:
    """Anything but the four modes, with weights exactly when weighted, is InvalidRequest (400)."""
    with pytest.raises(errors.InvalidRequest):
        Traffic.parse(body)
