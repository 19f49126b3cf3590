"""A service event about a group (a packet's ``packet_received`` or ``finished``) goes to the group
queue as it is (server/push_fanout.py ``queue_group``): the group was checked when its packet was
sent, so the event does not wait on a read of the groups, and a database that cannot answer for
the group (busy, as under a storm past its knee) neither loses it nor makes every push stream
start a new epoch (docs/architecture.md section 7). In process over the real embedded stores; the
groups' database does not hold the group, so a read of it answers "no group"."""

from __future__ import annotations

import asyncio

from hongbao.core.events import Event
from hongbao.core.messages import GROUP_STREAM
from hongbao.server.push_hub import PushHub

from tests.push.test_broadcast_fanout import hub

__all__ = ["hub"]  # the fixture, used by name


async def test_a_service_event_of_a_group_is_queued_without_reading_the_groups(hub: PushHub) -> None:
    """notify() of an event of group g1, which the groups' database cannot answer for: one message
    on the group queue, no push failure counted (before: the existence check failed, the event was
    dropped and counted lost, and every stream started a new epoch)."""
    hub.notify(Event("packet_received", {"order_id": "1"}, (), "g1"))
    while hub._tasks:  # the notification's background task
        await asyncio.gather(*hub._tasks)
    assert await hub.stores.queue.depth(GROUP_STREAM) == 1
    assert hub.metrics.events["push_failures"] == 0
