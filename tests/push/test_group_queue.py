"""A service event about a group (a packet's ``packet_received`` or ``finished``) goes to the group
queue as it is (server/push_fanout.py ``queue_group``): the group was checked when its packet was
sent, so the event does not wait on a read of the groups, and a database that cannot answer for
the group (busy, as under a storm past its knee) neither loses it nor makes every push stream
start a new epoch (docs/architecture.md section 7); a queue that refuses it renews the group's
members' streams only. In process over the real embedded stores (the first test's group is not in
the groups' database, so a read of it answers "no group")."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
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


async def test_a_group_event_that_cannot_be_queued_renews_its_members_streams_only(
    hub: PushHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group queue refuses an event of a group of three (Redis timing out while a worker's loop
    lags, as at 60 sends/s online): the next flush renews those three streams, not every stream
    (before: every stream started a new epoch, and every online client reloaded at once, on a
    machine already past its knee). When the members cannot be read either, every stream."""
    group_id, members = await hub.fanout.groups.create("u1", ["u2", "u3"])
    renewed: list[Sequence[str] | None] = []

    async def refused(*_: object) -> None:
        raise ConnectionError("the queue timed out")

    async def lost(_: object, uids: Sequence[str] | None = None) -> None:
        renewed.append(uids)

    # (on the classes: the stores' objects have slots)
    monkeypatch.setattr(type(hub.fanout.queue), "publish", refused)
    monkeypatch.setattr(type(hub.stores.log), "lost", lost)
    hub.notify(Event("packet_received", {"order_id": "1"}, (), group_id))
    while hub._tasks:
        await asyncio.gather(*hub._tasks)
    await hub.flush()
    assert renewed == [sorted(members)] and sorted(members) == ["u1", "u2", "u3"]
    assert hub.metrics.events["push_failures"] == 1

    async def unreadable(*_: object) -> list[str]:
        raise ConnectionError("the groups' database is busy")

    monkeypatch.setattr(type(hub.fanout.groups), "members", unreadable)
    hub.notify(Event("packet_received", {"order_id": "2"}, (), group_id))
    while hub._tasks:
        await asyncio.gather(*hub._tasks)
    await hub.flush()
    assert renewed[1:] == [None]  # every stream
