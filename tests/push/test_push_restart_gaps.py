"""Push gaps around a worker restart and a renewed stream, in process over the real embedded push
stores (a second connection to the push file plays the dead worker / another worker of the host):
what is logged after a stream's renewal reaches the next connection, after its ``reset``."""

from __future__ import annotations

import asyncio

from tests.push.test_push_order import Socket, Worker, worker  # noqa: F401 (the fixture)


async def test_events_logged_by_a_restarted_worker_before_its_first_tick_are_replayed(worker: Worker) -> None:
    """A worker started after a crash (``after_crash``) renews every stream; an event it logs for a
    user who is not online yet, before its first flush, is replayed on that user's next connection
    (after the reset), not wiped by the renewal."""
    hub = worker.hub
    old = [await worker.append_elsewhere("bob", f"old{i}") for i in (1, 2)]  # the dead worker's epoch
    await hub.start(after_crash=True)
    pushed = await hub.push_to_user("bob", "opened", {})  # Bob's client is still backing off
    assert pushed.result == "queued"
    await hub.flush()  # the first tick after the start
    conn = Socket("bob")
    await hub.attach(conn, 2, old[0].epoch, hello=True)  # the client resumes where it was
    assert conn.sent[0]["type"] == "reset"
    assert [event for _, event in conn.events()] == ["opened"]


async def test_ack_of_the_old_epoch_does_not_trim_the_renewed_stream(worker: Worker) -> None:
    """An ack pending when the user's stream is renewed (another worker's lost append) names an
    offset of the old epoch: written at the connection's close, it must not drop the new epoch's
    messages the connection never had; the next connection gets them after its reset."""
    hub, conn = worker.hub, Socket("carol")
    old = [await worker.append_elsewhere("carol", f"old{i}") for i in range(1, 6)]
    await hub.attach(conn, None, None)
    assert [offset for offset, _ in conn.events()] == [1, 2, 3, 4, 5]
    hub.on_message(conn, {"type": "ack", "offset": 5})  # written at the next tick, or at the close
    await worker.other.lost(["carol"])  # another worker could not log one of Carol's events
    fresh = [await worker.append_elsewhere("carol", f"new{i}") for i in range(1, 4)]
    assert [m.offset for m in fresh] == [1, 2, 3] and fresh[0].epoch != old[0].epoch
    hub.detach(conn)  # the connection drops before the tick (the forwards never reached it)
    while hub._tasks:  # the close's ack and logout
        await asyncio.gather(*hub._tasks)
    again = Socket("carol")
    await hub.attach(again, 5, old[0].epoch)
    assert again.sent[0]["type"] == "reset"
    assert [event for _, event in again.events()] == ["new1", "new2", "new3"]


async def test_an_event_lost_before_its_audience_was_known_resets_every_live_session(worker: Worker) -> None:
    """The services tell the hub an event was lost whose users they could not name (``lost``):
    at the next flush every stream starts a new epoch and each live session gets its ``reset``
    at once, before what is logged after it."""
    hub, dave, erin = worker.hub, Socket("dave"), Socket("erin")
    for conn in (dave, erin):
        await hub.attach(conn, None, None)
    await hub.push_to_user("dave", "opened", {})
    hub.lost()
    await hub.flush()
    while hub._tasks:  # the sessions' catch-up reads
        await asyncio.gather(*hub._tasks)
    await hub.push_to_user("dave", "credited", {})
    assert [m["type"] for m in dave.sent] == ["event", "reset", "event"]
    assert [m["type"] for m in erin.sent] == ["reset"]
    assert [event for _, event in dave.events()] == ["opened", "credited"]
