"""A pay cut between its steps (the worker killed, a database restarting) is completed or undone
by the reconciler, never left: the crash points of hongbao.core.faults stop the flow where a
kill would, on the embedded backend here and on MariaDB + Redis in
tests/integration/test_mysql_service.py, which runs this module too."""

from __future__ import annotations

import dataclasses

import pytest
from hongbao.core import errors
from hongbao.core.clock import ManualClock
from hongbao.core.events import Event
from hongbao.core.faults import FaultInjected, Faults, raising
from hongbao.core.messages import LISTS_STREAM
from hongbao.core.packet import Status
from hongbao.core.services import Services

from tests.core.counting import Counting
from tests.core.test_service import _drain, _group

WINDOW_MS = 2000
BODY = {"count": 3, "total_fen": 600, "group_id": "g", "greeting": "恭喜发财"}


class Heard:
    """A notifier that keeps every event."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def notify(self, event: Event) -> None:
        self.events.append(event)

    def named(self, name: str) -> list[Event]:
        return [e for e in self.events if e.name == name]


async def _cut_pay(svc: Services, point: str) -> str:
    """Fund S, send a packet to group g (S, B), and pay it with crash point ``point`` armed: the
    pay stops there, as a killed worker would."""
    await _group(svc, "g", ["S", "B"])
    await svc.accounts.topup("S", 1000, "fund-S")
    order_id, _ = await svc.sending.send("S", BODY)
    svc.sending.faults = Faults({point: (1.0, raising)})
    with pytest.raises(FaultInjected):
        await svc.sending.pay("S", order_id)
    svc.sending.faults = Faults()
    return order_id


async def test_a_pay_cut_after_its_debit_is_activated_from_its_pre_order(backend: object, clock: ManualClock) -> None:
    """Debit in, packet missing: within the window nothing happens; after it the reconciler activates
    the packet from the claimed pre-order (expiry from the debit), once, and members can open it."""
    svc: Services = backend.services  # type: ignore[attr-defined]
    svc.outbox.notifier = heard = Heard()
    order_id = await _cut_pay(svc, "pay_debited")
    debited_at = clock.now_ms()
    assert await svc.ports.ledger.balance("S") == 400
    assert await svc.ports.packets.get_packet(order_id) is None
    clock.advance_ms(WINDOW_MS - 1)
    assert await svc.settlement.reconcile(WINDOW_MS) == 0 and await svc.ports.packets.get_packet(order_id) is None
    clock.advance_ms(2)
    assert await svc.settlement.reconcile(WINDOW_MS) == 1
    packet = await svc.ports.packets.get_packet(order_id)
    assert packet is not None and (packet.status, packet.remaining_fen, packet.remaining_count) == (
        Status.ACTIVE,
        600,
        3,
    )
    assert packet.expires_at_ms == debited_at + svc.limits.expiry_ms
    assert [e.data["order_id"] for e in heard.named("packet_received")] == [order_id]
    assert await svc.ports.preorders.get(order_id, clock.now_ms()) is None
    assert await svc.settlement.reconcile(WINDOW_MS) == 0  # settled once
    receipt, _ = await svc.opening.open("B", order_id)
    await _drain(svc)
    assert await svc.ports.ledger.balance("B") == receipt.amount_fen
    assert await svc.ports.ledger.balance("S") == 400


async def test_a_pay_cut_after_its_debit_with_its_pre_order_lost_is_refunded(
    backend: object, clock: ManualClock
) -> None:
    """Debit in, packet missing, pre-order gone (Redis restarted empty): the reconciler records the
    packet refunded and gives the sender back the whole total exactly once; a late retry of the pay
    moves no money and answers the refunded packet."""
    svc: Services = backend.services  # type: ignore[attr-defined]
    order_id = await _cut_pay(svc, "pay_debited")
    assert await svc.ports.preorders.delete(order_id)
    clock.advance_ms(WINDOW_MS + 1)
    assert await svc.settlement.reconcile(WINDOW_MS) == 1
    packet = await svc.ports.packets.get_packet(order_id)
    assert packet is not None and (packet.status, packet.total_fen, packet.refunded_fen) == (Status.REFUNDED, 600, 600)
    assert await svc.ports.ledger.balance("S") == 1000
    assert await svc.ports.ledger.amount("S", "refund", order_id) == 600
    assert await svc.settlement.reconcile(WINDOW_MS) == 0
    again = await svc.sending.pay("S", order_id)
    assert again.status is Status.REFUNDED and await svc.ports.ledger.balance("S") == 1000
    with pytest.raises(errors.NotMember):  # the undone packet has no audience but its sender
        await svc.opening.open("B", order_id)


async def test_a_retried_pay_completes_a_cut_one(backend: object, clock: ManualClock) -> None:
    """The sender pays again after a pay cut after its debit: the packet is activated, the sender
    debited once, and the reconciler finds nothing left to do."""
    svc: Services = backend.services  # type: ignore[attr-defined]
    order_id = await _cut_pay(svc, "pay_debited")
    packet = await svc.sending.pay("S", order_id)
    assert packet.status is Status.ACTIVE and await svc.ports.ledger.balance("S") == 400
    clock.advance_ms(WINDOW_MS + 1)
    assert await svc.settlement.reconcile(WINDOW_MS) == 0


async def test_a_pay_cut_after_its_insert_is_followed_up(backend: object, clock: ManualClock) -> None:
    """Packet in, follow-ups not done (no push, no list row, pre-order kept): the reconciler does
    them once; so would a repeated pay."""
    svc: Services = backend.services  # type: ignore[attr-defined]
    svc.outbox.notifier = heard = Heard()
    order_id = await _cut_pay(svc, "pay_inserted")
    assert (await svc.ports.packets.get_packet(order_id)) is not None and not heard.named("packet_received")
    assert await svc.ports.queue.depth(LISTS_STREAM) == 0
    clock.advance_ms(WINDOW_MS + 1)
    assert await svc.settlement.reconcile(WINDOW_MS) == 1
    assert [e.data["order_id"] for e in heard.named("packet_received")] == [order_id]
    assert await svc.ports.preorders.get(order_id, clock.now_ms()) is None
    assert await svc.lists.drain() == 1
    assert await svc.settlement.reconcile(WINDOW_MS) == 0
    assert len(heard.named("packet_received")) == 1


async def test_a_repeated_pay_follows_up_a_pay_cut_after_its_insert(backend: object) -> None:
    """The sender pays again after a pay cut after its insert: the push and the list row follow, once."""
    svc: Services = backend.services  # type: ignore[attr-defined]
    svc.outbox.notifier = heard = Heard()
    order_id = await _cut_pay(svc, "pay_inserted")
    assert (await svc.sending.pay("S", order_id)).status is Status.ACTIVE
    assert (await svc.sending.pay("S", order_id)).status is Status.ACTIVE
    assert len(heard.named("packet_received")) == 1 and await svc.ports.queue.depth(LISTS_STREAM) == 1
    assert await svc.ports.ledger.balance("S") == 400


async def test_one_run_settles_more_cut_pays_than_a_page_reading_packets_per_page(
    backend: object, clock: ManualClock
) -> None:
    """Five pays cut after their debits 1 ms apart, pages of three (overlapping by their last ms):
    one reconciliation run activates all five in three pages, reading each page's packets in one
    call, never one packet at a time; the next run finds nothing."""
    svc: Services = backend.services  # type: ignore[attr-defined]
    await _group(svc, "g", ["S", "B"])
    await svc.accounts.topup("S", 5000, "fund-S")
    order_ids = []
    for _ in range(5):
        order_id, _ = await svc.sending.send("S", BODY)
        svc.sending.faults = Faults({"pay_debited": (1.0, raising)})
        with pytest.raises(FaultInjected):
            await svc.sending.pay("S", order_id)
        svc.sending.faults = Faults()
        order_ids.append(order_id)
        clock.advance_ms(1)
    clock.advance_ms(WINDOW_MS)
    counted = Counting(svc.settlement.ports.packets)
    svc.settlement.ports = dataclasses.replace(svc.settlement.ports, packets=counted)
    assert await svc.settlement.reconcile_pays(WINDOW_MS, limit=3) == 5
    assert (counted.calls["get_packets"], counted.calls["get_packet"]) == (3, 0)
    for order_id in order_ids:
        packet = await svc.ports.packets.get_packet(order_id)
        assert packet is not None and packet.status is Status.ACTIVE
    assert await svc.settlement.reconcile_pays(WINDOW_MS, limit=3) == 0
    assert await svc.ports.ledger.balance("S") == 5000 - 5 * 600


async def test_one_run_settles_a_page_of_cut_pays_within_one_millisecond(backend: object, clock: ManualClock) -> None:
    """Five pays cut after their debits in the same millisecond, pages of three: the run reads
    that millisecond whole once a page falls within it, so it activates all five and the cursor
    moves past it (it stalled there, leaving two debited senders without their packets)."""
    svc: Services = backend.services  # type: ignore[attr-defined]
    await _group(svc, "g", ["S", "B"])
    await svc.accounts.topup("S", 5000, "fund-S")
    order_ids = [(await svc.sending.send("S", BODY))[0] for _ in range(5)]
    svc.sending.faults = Faults({"pay_debited": (1.0, raising)})
    for order_id in order_ids:
        with pytest.raises(FaultInjected):
            await svc.sending.pay("S", order_id)
    svc.sending.faults = Faults()
    clock.advance_ms(WINDOW_MS + 1)
    assert await svc.settlement.reconcile_pays(WINDOW_MS, limit=3) == 5
    for order_id in order_ids:
        packet = await svc.ports.packets.get_packet(order_id)
        assert packet is not None and packet.status is Status.ACTIVE
    assert await svc.settlement.reconcile_pays(WINDOW_MS, limit=3) == 0
