"""A worker keeps a paid packet's fixed fields in memory: opens do not read its row again, and
what changes (status, remainder) is still decided by the open transaction."""

from __future__ import annotations

from typing import Any

import pytest
from hongbao.core import errors
from hongbao.core.ports import PacketStore
from hongbao.server.composition import Backend

from tests.core import test_service as suite


class _CountingReads:
    """The real packet store, counting its ``get_packet`` calls."""

    def __init__(self, store: PacketStore) -> None:
        self.store, self.reads = store, 0

    async def get_packet(self, order_id: str) -> Any:
        self.reads += 1
        return await self.store.get_packet(order_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def test_opens_read_the_packet_row_once_and_still_see_it_finish(backend: Backend) -> None:
    """Three members open a 3-share packet and a fourth comes late: the row is read for the first
    open only; the late opener is refused as finished (the transaction's verdict, not memory's)."""
    svc = backend.services
    members = ["S", "A", "B", "C", "D"]
    await suite._group(svc, "g", members)
    order_id = await suite._paid(svc, "S", {"count": 3, "total_fen": 30, "group_id": "g"}, fund=30)
    counting = _CountingReads(svc.audience.packets)
    svc.audience.packets = counting  # type: ignore[assignment]
    for user in ("A", "B", "C"):
        await svc.opening.open(user, order_id)
    with pytest.raises(errors.Finished):
        await svc.opening.open("D", order_id)
    assert counting.reads == 1
