"""A worker keeps a paid packet's fixed fields in memory: opens do not read its row again, and
what changes (status, remainder) is still decided by the open transaction."""

from __future__ import annotations

import pytest
from hongbao.core import errors
from hongbao.server.composition import Backend

from tests.core import test_service as suite
from tests.core.counting import Counting


async def test_opens_read_the_packet_row_once_and_still_see_it_finish(backend: Backend) -> None:
    """Three members open a 3-share packet and a fourth comes late: the row is read for the first
    open only; the late opener is refused as finished by the database (the worker saw the last share
    go, so by its receipt read), not by the memory of the fixed fields."""
    svc = backend.services
    members = ["S", "A", "B", "C", "D"]
    await suite._group(svc, "g", members)
    order_id = await suite._paid(svc, "S", {"count": 3, "total_fen": 30, "group_id": "g"}, fund=30)
    counting = Counting(svc.audience.packets)
    svc.audience.packets = counting  # type: ignore[assignment]
    for user in ("A", "B", "C"):
        await svc.opening.open(user, order_id)
    with pytest.raises(errors.Finished):
        await svc.opening.open("D", order_id)
    assert counting.calls["get_packet"] == 1
