"""The money flow on the embedded backend (real SQLite, real shared-memory admission), driven
through the service layer with a manual clock: the money cases that need no HTTP."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from itertools import count

import hongbao_native
import pytest
from hongbao.core import errors, events
from hongbao.core.clock import ManualClock
from hongbao.core.messages import CREDIT_STREAM
from hongbao.core.packet import Packet, Receipt, Status
from hongbao.core.ports import LedgerEntry, ListRow
from hongbao.core.services import Services
from hongbao.core.services import opening as opening_module
from hongbao.core.services.audience import Audience
from hongbao.core.services.crediting import CreditingMode
from hongbao.core.vocabulary import EntryKind
from hongbao.server.composition import Backend

from tests.core.counting import Counting
from tests.server.crowd import eventually_async

DAY_MS = 24 * 3600 * 1000
_FUNDINGS = count()  # each funding its own Idempotency-Key


async def _group(svc: Services, gid: str, members: list[str]) -> None:
    await svc.ports.groups.create(gid, members[0], members, svc.ports.clock.now_ms())


async def _paid(svc: Services, sender: str, body: dict[str, object], fund: int | None = None) -> str:
    await svc.accounts.topup(sender, fund or 20000, f"fund-{sender}-{next(_FUNDINGS)}")
    order_id, _ = await svc.sending.send(sender, body)
    await svc.sending.pay(sender, order_id)
    return order_id


async def _drain(svc: Services) -> None:
    while await svc.settlement.drain_credits():
        pass


async def _balances(svc: Services, users: list[str]) -> dict[str, int]:
    return {u: await svc.ports.ledger.balance(u) for u in users}


def _scripted(values: list[int]) -> Callable[[int, int], int]:
    """A draw that returns ``values`` in order (and, as the rule says, everything left to the last share)."""
    it: Iterator[int] = iter(values)
    return lambda m, n: m if n == 1 else next(it)


async def test_full_story(backend: Backend) -> None:
    """Top up, group, send, pay, every member opens: shares sum to T, best luck is the largest, balances add up."""
    svc = backend.services
    users = ["A", "B", "C", "D"]
    await _group(svc, "g1", users)
    await svc.accounts.topup("A", 10000, "k1")
    order_id, pay_by = await svc.sending.send(
        "A", {"count": 4, "total_fen": 1000, "group_id": "g1", "greeting": "新年快乐"}
    )
    assert len(order_id) == 20 and pay_by == svc.ports.clock.now_ms() + svc.limits.pay_ttl_ms
    packet = await svc.sending.pay("A", order_id)
    assert (packet.status, packet.remaining_fen, packet.remaining_count) == (Status.ACTIVE, 1000, 4)
    assert await svc.ports.ledger.balance("A") == 9000
    amounts = {}
    for user in users:
        assert await svc.grabbing.grab(user, order_id) == {"status": "ok"}
        receipt, repeat = await svc.opening.open(user, order_id)
        amounts[user] = receipt.amount_fen
        assert not repeat and receipt.amount_fen >= 1
    assert sum(amounts.values()) == 1000
    packet = await svc.ports.packets.get_packet(order_id)
    assert packet is not None and (packet.status, packet.remaining_fen, packet.remaining_count) == (
        Status.FINISHED,
        0,
        0,
    )
    best = max(amounts.values())
    assert await svc.ports.packets.best_luck(order_id) == next(u for u in users if amounts[u] == best)
    await _drain(svc)
    balances = await _balances(svc, users)
    assert balances == {u: amounts[u] + (9000 if u == "A" else 0) for u in users}
    assert sum(balances.values()) == 10000
    await svc.ports.groups.add_members("g1", ["E"])
    with pytest.raises(errors.Finished):
        await svc.opening.open("E", order_id)
    with pytest.raises(errors.Finished):
        await svc.grabbing.grab("E", order_id)
    assert await svc.grabbing.grab("B", order_id) == {"status": "opened", "amount_fen": amounts["B"]}
    assert (await svc.opening.open("B", order_id)) == ((await svc.ports.packets.receipt(order_id, "B")), True)


async def test_equal_packet_debit_equals_shares_plus_refund(backend: Backend, clock: ManualClock) -> None:
    """M-07: an equal packet's debited total equals the shares paid plus the refund."""
    svc = backend.services
    await _group(svc, "g", ["A", "B", "C"])
    order_id = await _paid(svc, "A", {"kind": "equal", "count": 3, "per_share_fen": 7, "group_id": "g"}, fund=100)
    assert (await svc.opening.open("B", order_id))[0].amount_fen == 7
    assert (await svc.opening.open("C", order_id))[0].amount_fen == 7
    clock.advance_ms(DAY_MS)
    assert await svc.settlement.refund_due() == 1
    await _drain(svc)
    assert await _balances(svc, ["A", "B", "C"]) == {"A": 100 - 21 + 7, "B": 7, "C": 7}


async def test_one_user_opens_fifty_times_at_once(backend: Backend) -> None:
    """M-08: 50 concurrent opens and 3 retries by one user give one receipt and one amount."""
    svc = backend.services
    await _group(svc, "g", ["A", "U"])
    order_id = await _paid(svc, "A", {"count": 10, "total_fen": 1000, "group_id": "g"})
    results = await asyncio.gather(*(svc.opening.open("U", order_id) for _ in range(50)))
    results += [await svc.opening.open("U", order_id) for _ in range(3)]
    assert len({r.amount_fen for r, _ in results}) == 1
    assert sum(not repeat for _, repeat in results) == 1
    assert len(await svc.ports.packets.receipts(order_id)) == 1
    packet = await svc.ports.packets.get_packet(order_id)
    assert packet is not None and packet.remaining_count == 9


async def test_no_oversell_with_1000_openers(backend: Backend) -> None:
    """M-09: 1000 users open N=10, T=1000 at once: exactly 10 receipts summing to 1000, 990 finished."""
    svc = backend.services
    users = [f"u{i}" for i in range(1000)]
    await _group(svc, "g", ["S", *users])
    order_id = await _paid(svc, "S", {"count": 10, "total_fen": 1000, "group_id": "g"}, fund=1000)
    outcomes = await asyncio.gather(*(svc.opening.open(u, order_id) for u in users), return_exceptions=True)
    winners = {u: o[0].amount_fen for u, o in zip(users, outcomes, strict=True) if isinstance(o, tuple)}
    assert len(winners) == 10 and sum(winners.values()) == 1000
    assert sum(isinstance(o, errors.Finished) for o in outcomes) == 990
    packet = await svc.ports.packets.get_packet(order_id)
    assert packet is not None and (packet.remaining_fen, packet.remaining_count) == (0, 0)
    await _drain(svc)
    balances = await _balances(svc, users)
    assert {u: b for u, b in balances.items() if b} == winners


async def test_refund_runs_once_on_three_workers(make_backend: Callable[..., Backend], clock: ManualClock) -> None:
    """M-11/M-14: an expired packet with 70 fen left, refund job on 3 workers twice: one refund of 70 to its sender."""
    workers = [make_backend() for _ in range(3)]
    svc = workers[0].services
    await _group(svc, "g", ["A", "B", "C"])
    order_id = await _paid(svc, "A", {"count": 5, "total_fen": 100, "group_id": "g"}, fund=100)
    svc.opening.draw = _scripted([20, 10])
    await svc.opening.open("B", order_id)
    await svc.opening.open("C", order_id)
    clock.advance_ms(DAY_MS)
    await _paid(workers[1].services, "B", {"count": 1, "total_fen": 5, "group_id": "g"}, fund=5)
    for _ in range(2):
        counts = await asyncio.gather(*(w.services.settlement.refund_due() for w in workers))
        assert sum(counts) == (1 if _ == 0 else 0)
    await _drain(svc)
    ledger = await svc.ports.ledger.entries("A", 0, 10)
    assert [(e.kind, e.amount_fen) for e in ledger if e.kind == "refund"] == [("refund", 70)]
    assert await svc.ports.ledger.balance("A") == 70
    assert await svc.ports.ledger.balance("B") == 20
    packet = await svc.ports.packets.get_packet(order_id)
    assert packet is not None and (packet.status, packet.refunded_fen, packet.opened_fen) == (Status.REFUNDED, 70, 30)


async def test_expiry_edge(backend: Backend, clock: ManualClock) -> None:
    """M-13: open at t0-1 ms succeeds, open at t0 is expired; refund at t0-1 ms refused, at t0 done."""
    svc = backend.services
    await _group(svc, "g", ["A", "B", "C"])
    order_id = await _paid(svc, "A", {"count": 3, "total_fen": 300, "group_id": "g"}, fund=300)
    packet = await svc.ports.packets.get_packet(order_id)
    assert packet is not None
    clock.set_ms(packet.expires_at_ms - 1)
    assert (await svc.opening.open("B", order_id))[0].amount_fen >= 1
    assert await svc.settlement.refund_due() == 0
    clock.set_ms(packet.expires_at_ms)
    with pytest.raises(errors.Expired):
        await svc.opening.open("C", order_id)
    assert await svc.settlement.refund_due() == 1
    refunded = await svc.ports.packets.get_packet(order_id)
    opened = sum(r.amount_fen for r in await svc.ports.packets.receipts(order_id))
    assert refunded is not None and refunded.refunded_fen + opened == 300


@pytest.mark.parametrize(("shares", "best"), [([30, 30, 20, 20], "u0"), ([20, 30, 30, 20], "u1")])
async def test_best_luck_ties_go_to_the_earliest(backend: Backend, shares: list[int], best: str) -> None:
    """M-19: best luck is the largest share; a tie goes to the earliest opener."""
    svc = backend.services
    users = ["u0", "u1", "u2", "u3"]
    await _group(svc, "g", ["S", *users])
    order_id = await _paid(svc, "S", {"count": 4, "total_fen": 100, "group_id": "g"}, fund=100)
    svc.opening.draw = _scripted(shares[:3])
    for user in users:
        await svc.opening.open(user, order_id)
    assert [r.amount_fen for r in await svc.ports.packets.receipts(order_id)] == shares
    assert await svc.ports.packets.best_luck(order_id) == best


async def test_grab_is_advisory(backend: Backend) -> None:
    """M-22: 15 users pass grab on N=10; 10 opens succeed, 5 get finished; grab-only users leave no receipt."""
    svc = backend.services
    users = [f"u{i}" for i in range(15)]
    await _group(svc, "g", ["S", *users])
    order_id = await _paid(svc, "S", {"count": 10, "total_fen": 100, "group_id": "g"}, fund=100)
    assert [await svc.grabbing.grab(u, order_id) for u in users] == [{"status": "ok"}] * 15
    outcomes = [await svc.opening.open(u, order_id) if i < 10 else None for i, u in enumerate(users)]
    for user in users[10:]:
        with pytest.raises(errors.Finished):
            await svc.opening.open(user, order_id)
    assert {r.user_id for r in await svc.ports.packets.receipts(order_id)} == set(users[:10])
    assert all(o is not None for o in outcomes[:10])


async def test_exclusive_packets(backend: Backend) -> None:
    """M-25: an exclusive packet for B refuses A's open; B gets all 500; two such packets open independently."""
    svc = backend.services
    first = await _paid(svc, "A", {"kind": "exclusive", "total_fen": 500, "receiver_id": "B"}, fund=1000)
    second = await _paid(svc, "A", {"kind": "exclusive", "total_fen": 300, "receiver_id": "B"}, fund=1)
    with pytest.raises(errors.NotMember):
        await svc.opening.open("A", first)
    with pytest.raises(errors.NotMember):
        await svc.opening.open("C", first)
    assert (await svc.opening.open("B", first))[0].amount_fen == 500
    assert (await svc.opening.open("B", second))[0].amount_fen == 300
    assert len(await svc.ports.packets.receipts(first)) == 1


async def test_ledger_amount_is_the_applied_entry(backend: Backend) -> None:
    """ledger.amount reads the signed fen of a user's (kind, ref) entry as first applied; None for
    another user, kind or ref."""
    svc = backend.services
    ledger, now = svc.ports.ledger, svc.ports.clock.now_ms()
    assert await ledger.post(LedgerEntry("A", EntryKind.TOPUP, "A:k", 500, now))
    assert not await ledger.post(LedgerEntry("A", EntryKind.TOPUP, "A:k", 700, now))
    order_id = await _paid(svc, "A", {"count": 1, "total_fen": 120, "kind": "exclusive", "receiver_id": "B"}, fund=1)
    assert await svc.ports.ledger.amount("A", "topup", "A:k") == 500
    assert await svc.ports.ledger.amount("A", "send", order_id) == -120
    assert [
        await svc.ports.ledger.amount(*key)
        for key in [("B", "topup", "A:k"), ("A", "send", "A:k"), ("A", "topup", "A:x")]
    ] == [None] * 3


async def test_pay_is_idempotent_and_checks_balance(backend: Backend) -> None:
    """A repeated pay debits once; a pay without funds moves nothing; only the sender may pay."""
    svc = backend.services
    await _group(svc, "g", ["A", "B"])
    await svc.accounts.topup("A", 500, "k")
    assert await svc.accounts.topup("A", 500, "k") is False
    order_id, _ = await svc.sending.send("A", {"count": 2, "total_fen": 400, "group_id": "g"})
    with pytest.raises(errors.Forbidden):
        await svc.sending.pay("B", order_id)
    first = await svc.sending.pay("A", order_id)
    again = await svc.sending.pay("A", order_id)
    assert first == again and await svc.ports.ledger.balance("A") == 100
    big, _ = await svc.sending.send("A", {"count": 2, "total_fen": 400, "group_id": "g"})
    with pytest.raises(errors.InsufficientBalance):
        await svc.sending.pay("A", big)
    assert await svc.ports.ledger.balance("A") == 100
    assert await svc.ports.packets.get_packet(big) is None
    with pytest.raises(errors.NotPaid):
        await svc.opening.open("B", big)
    await svc.sending.cancel("A", big)  # a pay that moved no money gave its claim back
    with pytest.raises(errors.NotFound):
        await svc.sending.pay("A", big)


async def test_concurrent_repeats_of_a_pay_all_answer_the_packet(make_backend: Callable[..., Backend]) -> None:
    """Pays of one pre-order racing in two workers each answer the active packet (none 404s), and debit once."""
    a, b = make_backend(), make_backend()
    await _group(a.services, "g", ["A", "B"])
    await a.services.accounts.topup("A", 100 * 300, "k")
    for _ in range(30):
        order_id, _ = await a.services.sending.send("A", {"count": 2, "total_fen": 300, "group_id": "g"})
        paid = await asyncio.gather(*(svc.sending.pay("A", order_id) for svc in (a.services, b.services) * 3))
        assert {(p.order_id, p.status) for p in paid} == {(order_id, Status.ACTIVE)}
    assert await a.services.ports.ledger.balance("A") == 100 * 300 - 30 * 300


async def test_credit_is_idempotent_in_every_mode(
    backend: Backend, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Repeated credits credit once; deferred crediting is completed by the reconciler, which says so."""
    svc = backend.services
    svc.crediting.mode = CreditingMode.DEFERRED
    await _group(svc, "g", ["A", "B"])
    order_id = await _paid(svc, "A", {"count": 1, "total_fen": 50, "group_id": "g"}, fund=50)
    await svc.opening.open("B", order_id)
    assert await svc.ports.ledger.balance("B") == 0
    assert await svc.settlement.reconcile(window_ms=60_000) == 0
    clock.advance_ms(60_001)
    with caplog.at_level(logging.INFO, "hongbao.service"):
        assert await svc.settlement.reconcile(window_ms=60_000) == 1
    assert [r.getMessage() for r in caplog.records if r.name == "hongbao.service"] == [
        "reconciler completed 0 pays, 1 credits and 0 refunds cut between their steps"
    ]
    for _ in range(3):
        assert await svc.crediting.credit(order_id, "B") is True
    assert await svc.ports.ledger.balance("B") == 50
    assert [e.kind for e in await svc.ports.ledger.entries("B", 0, 10)] == ["credit"]


async def test_validation_moves_nothing(backend: Backend) -> None:
    """M-04: T=10, N=15 is refused: nothing debited, no pre-order; non-members and bad ids are refused."""
    svc = backend.services
    await _group(svc, "g", ["A", "B"])
    await svc.accounts.topup("A", 100, "k")
    with pytest.raises(errors.InvalidCount):
        await svc.sending.send("A", {"count": 15, "total_fen": 10, "group_id": "g"})
    with pytest.raises(errors.NotMember):
        await svc.sending.send("Z", {"count": 1, "total_fen": 10, "group_id": "g"})
    order_id = await _paid(svc, "A", {"count": 1, "total_fen": 10, "group_id": "g"}, fund=1)
    with pytest.raises(errors.NotMember):
        await svc.opening.open("Z", order_id)
    broken = order_id[:-1] + str((int(order_id[-1]) + 1) % 10)
    with pytest.raises(errors.BadOrderId):
        await svc.opening.open("B", broken)
    assert await svc.ports.ledger.balance("A") == 91


async def test_pre_orders_are_read_together_as_one_by_one(backend: Backend, clock: ManualClock) -> None:
    """``get_many`` answers what ``get`` does for each pre-order, in the order asked (repeats
    included): pending, paying past its pay_by, lapsed, paid (gone); nothing asked, nothing read."""
    svc = backend.services
    await _group(svc, "g", ["A", "B"])
    await svc.accounts.topup("A", 100, "k")
    sent = [await svc.sending.send("A", {"count": 1, "total_fen": 10, "group_id": "g"}) for _ in range(4)]
    (pending, _), (paying, _), (lapsed, pay_by), (paid, _) = sent
    await svc.sending.pay("A", paid)
    assert await svc.ports.preorders.claim_for_pay(paying, clock.now_ms()) is not None
    asked = [lapsed, pending, paid, paying, pending]
    for now in (clock.now_ms(), pay_by):
        many = await svc.ports.preorders.get_many(asked, now)
        assert many == [await svc.ports.preorders.get(order_id, now) for order_id in asked]
        if now < pay_by:  # before pay_by: every pre-order but the paid one, a body each
            assert [body is None for body in many] == [False, False, True, False, False] and many[1] == many[4]
    assert many == [None, None, None, many[3], None] and many[3] is not None  # at pay_by: only the paying one
    assert await svc.ports.preorders.get_many([], pay_by) == []


async def test_lapsed_pre_orders_are_dropped(backend: Backend, clock: ManualClock) -> None:
    """A pre-order past pay_by cannot be paid (404) and its row is gone after the next send."""
    svc = backend.services
    await _group(svc, "g", ["A", "B"])
    await svc.accounts.topup("A", 100, "k")
    lapsed, pay_by = await svc.sending.send("A", {"count": 1, "total_fen": 10, "group_id": "g"})
    clock.set_ms(pay_by)
    with pytest.raises(errors.NotFound):
        await svc.sending.pay("A", lapsed)
    fresh, _ = await svc.sending.send("A", {"count": 1, "total_fen": 10, "group_id": "g"})
    assert await svc.ports.preorders.get(lapsed, pay_by - 1) is None  # the row is gone, not only lapsed
    assert await svc.ports.preorders.get(fresh, pay_by) is not None
    assert await svc.ports.ledger.balance("A") == 100


async def test_pay_and_cancel_race_has_one_winner(backend: Backend) -> None:
    """A pay and a cancel of one pre-order sent together: exactly one succeeds, and the money follows it."""
    svc = backend.services
    await _group(svc, "g", ["A", "B"])
    await svc.accounts.topup("A", 10_000, "k")
    paid = 0
    for _ in range(30):
        order_id, _ = await svc.sending.send("A", {"count": 1, "total_fen": 10, "group_id": "g"})
        pay, cancel = await asyncio.gather(
            svc.sending.pay("A", order_id), svc.sending.cancel("A", order_id), return_exceptions=True
        )
        assert isinstance(pay, Exception) != isinstance(cancel, Exception), (pay, cancel)
        packet = await svc.ports.packets.get_packet(order_id)
        if isinstance(cancel, Exception):
            assert isinstance(cancel, errors.Conflict) and packet is not None
            paid += 1
        else:
            assert isinstance(pay, errors.NotFound) and packet is None
    assert await svc.ports.ledger.balance("A") == 10_000 - 10 * paid


class _Heard:
    """A Notifier that keeps every event it is handed, in order, and counts the events lost."""

    def __init__(self) -> None:
        self.events: list[events.Event] = []
        self.lost_count = 0

    def notify(self, event: events.Event) -> None:
        self.events.append(event)

    def lost(self) -> None:
        self.lost_count += 1

    def named(self, name: str) -> list[events.Event]:
        return [e for e in self.events if e.name == name]


async def _open_followed(svc: Services, user_id: str, order_id: str) -> tuple[Receipt, bool]:
    """``opening.open``, then wait for its follow-ups, which the answer does not wait for: for the
    tests that look at what the follow-ups write (the queue, the grab filter's shared level, the
    expiry index)."""
    opened = await svc.opening.open(user_id, order_id)
    await svc.opening.settle()
    return opened


async def test_finished_is_announced_by_the_last_open(backend: Backend) -> None:
    """The open that takes the last share announces finished with best luck at once (docs/architecture.md
    section 6), not after the lists queue; draining the lists announces nothing more."""
    svc = backend.services
    heard = _Heard()
    svc.outbox.notifier = heard
    await _group(svc, "g", ["S", "A", "B", "C"])
    order_id = await _paid(svc, "S", {"count": 3, "total_fen": 100, "group_id": "g"}, fund=100)
    svc.opening.draw = _scripted([10, 50])
    for user in ("A", "B"):
        await svc.opening.open(user, order_id)
    assert heard.named("finished") == []
    await _open_followed(svc, "C", order_id)  # finished is announced by the follow-ups
    packet = await svc.ports.packets.get_packet(order_id)
    assert packet is not None and heard.named("finished") == [events.finished(packet, "B", 50)]
    assert heard.named("finished")[0].group_id == "g"
    while await svc.lists.drain():
        pass
    assert len(heard.named("finished")) == 1


async def test_a_follow_up_that_fails_is_logged_and_finished_is_announced_all_the_same(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The last open's follow-ups run after its answer: one of them failing (the expiry index here)
    is one error line, and the packet is announced finished all the same."""
    svc = backend.services
    heard = _Heard()
    svc.outbox.notifier = heard
    await _group(svc, "g", ["S", "A"])
    order_id = await _paid(svc, "S", {"count": 1, "total_fen": 100, "group_id": "g"}, fund=100)

    async def failing(self: object, order_ids: list[str]) -> None:
        raise RuntimeError("the index went away")

    monkeypatch.setattr(type(svc.opening.expiries), "remove", failing)
    receipt, _ = await _open_followed(svc, "A", order_id)
    [record] = [r for r in caplog.records if r.getMessage() == f"a follow-up of the opens of {order_id} failed"]
    assert record.levelname == "ERROR" and record.exc_info is not None and "went away" in str(record.exc_info[1])
    packet = await svc.ports.packets.get_packet(order_id)
    assert packet is not None and heard.named("finished") == [events.finished(packet, "A", receipt.amount_fen)]


async def test_a_finished_event_whose_audience_cannot_be_read_is_told_lost(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last open commits, but the packet's fixed fields cannot be read for its finished event
    (the caches and the database failed since the open read them): the event is not passed off as
    sent, the notifier is told it was lost (every stream renewed: clients reload)."""
    svc = backend.services
    heard = _Heard()
    svc.outbox.notifier = heard
    await _group(svc, "g", ["S", "A"])
    order_id = await _paid(svc, "S", {"count": 1, "total_fen": 100, "group_id": "g"}, fund=100)
    reads = 0
    read = Audience.fixed_packet

    async def failing_after_the_open(self: Audience, order: str) -> Packet | None:
        nonlocal reads
        reads += 1
        if reads > 1:  # the open's own read went through; the announcement's fails
            raise errors.Degraded("the database is restarting")
        return await read(self, order)

    monkeypatch.setattr(Audience, "fixed_packet", failing_after_the_open)
    receipt, repeat = await _open_followed(svc, "A", order_id)  # finished is announced by the follow-ups
    assert (receipt.amount_fen, repeat, reads) == (100, False, 2)
    assert heard.named("finished") == [] and heard.lost_count == 1


async def test_a_claimed_batch_of_credits_is_applied_once(backend: Backend) -> None:
    """M-23 in one batch: receipts already credited, one with only its ledger entry, one user twice:
    one drain credits each receipt exactly once and acks all."""
    svc = backend.services
    svc.crediting.mode = CreditingMode.QUEUED
    heard = _Heard()
    svc.outbox.notifier = heard
    users = [f"u{i}" for i in range(6)]
    await _group(svc, "g", ["S", *users])
    first = await _paid(svc, "S", {"count": 6, "total_fen": 600, "group_id": "g"}, fund=600)
    second = await _paid(svc, "S", {"count": 2, "total_fen": 30, "group_id": "g", "greeting": "2"}, fund=30)
    amounts = {(first, u): (await svc.opening.open(u, first))[0].amount_fen for u in users}
    amounts |= {(second, u): (await svc.opening.open(u, second))[0].amount_fen for u in users[:2]}
    assert await svc.crediting.credit(first, "u0") and await svc.crediting.credit(
        first, "u1"
    )  # credited, their messages still queued
    await svc.ports.ledger.post(LedgerEntry("u2", "credit", f"{first}:u2", amounts[(first, "u2")], 0))  # ledger only
    heard.events.clear()
    assert await svc.settlement.drain_credits() == 8
    assert await svc.settlement.drain_credits() == 0
    assert await svc.ports.queue.depth(CREDIT_STREAM) == 0
    for user in users:
        credits = sorted(
            (e.ref, e.amount_fen) for e in await svc.ports.ledger.entries(user, 0, 10) if e.kind == "credit"
        )
        mine = sorted((f"{o}:{u}", a) for (o, u), a in amounts.items() if u == user)
        assert credits == mine and await svc.ports.ledger.balance(user) == sum(a for _, a in mine)
    assert all(
        r.credited for r in [*await svc.ports.packets.receipts(first), *await svc.ports.packets.receipts(second)]
    )
    assert sorted((e.data["order_id"], e.user_ids) for e in heard.named("credited")) == sorted(
        (o, (u,)) for (o, u) in amounts if u not in ("u0", "u1", "u2") or o == second
    )
    assert await svc.settlement.reconcile(window_ms=0) == 0


async def test_list_rows_of_a_batch(backend: Backend) -> None:
    """One drain writes the sent and received rows of two packets, flags best luck on the finished
    one only, and a repeat of the rows changes nothing."""
    svc = backend.services
    await _group(svc, "g", ["S", "A", "B", "C"])
    done = await _paid(svc, "S", {"count": 2, "total_fen": 100, "group_id": "g"}, fund=100)
    half = await _paid(svc, "S", {"count": 2, "total_fen": 100, "group_id": "g", "greeting": "2"}, fund=100)
    svc.opening.draw = _scripted([70, 60])
    await svc.opening.open("A", done)
    await svc.opening.open("B", done)
    await svc.opening.open("C", half)
    assert await svc.lists.drain() == 6  # 2 sent, 3 received, 1 best luck
    assert await svc.lists.drain() == 0
    now = svc.ports.clock.now_ms()

    async def rows(user: str, direction: str) -> list[tuple[str, int, bool]]:
        return [
            (i.order_id, i.amount_fen, i.best_luck)
            for i in await svc.ports.lists.page(user, direction, 0, now + 1, 0, 20)
        ]

    assert sorted(await rows("S", "sent")) == sorted([(done, 100, False), (half, 100, False)])
    assert await rows("A", "received") == [(done, 70, True)]
    assert await rows("B", "received") == [(done, 30, False)]
    assert await rows("C", "received") == [(half, 60, False)]
    await svc.ports.lists.write([ListRow("A", "received", done, 70, now)], [("A", done)])
    assert await rows("A", "received") == [(done, 70, True)]
    assert await svc.ports.lists.summary("A", "received", 0, now + 1) == (1, 70, 1)


async def test_batch_reads_of_best_luck_and_receipts(backend: Backend) -> None:
    """best_lucks and receipts_of read many packets at once (over every shard in production) and
    answer as best_luck and receipt do one by one: None for an unfinished or unknown packet, only
    the receipts that exist."""
    svc = backend.services
    await _group(svc, "g", ["A", "B", "C"])
    order_ids = [await _paid(svc, "A", {"count": 2, "total_fen": 20, "group_id": "g"}, fund=20) for _ in range(6)]
    for order_id in order_ids[:4]:
        await svc.opening.open("B", order_id)
    for order_id in order_ids[:3]:
        await svc.opening.open("C", order_id)
    packets = svc.ports.packets
    unknown = hongbao_native.encode_order_id(1, 261130, 0, 999_999)
    bests = await packets.best_lucks([*order_ids, unknown])
    assert bests == {o: await packets.best_luck(o) for o in [*order_ids, unknown]}
    assert all(bests[o] in ("B", "C") for o in order_ids[:3]) and bests[order_ids[3]] is None
    keys = [(o, u) for o in [*order_ids, unknown] for u in ("B", "C", "Z")]
    found = await packets.receipts_of(keys)
    expected = [r for o, u in keys if (r := await packets.receipt(o, u)) is not None]

    def key(r: Receipt) -> tuple[str, str]:
        return r.order_id, r.user_id

    assert sorted(found, key=key) == sorted(expected, key=key)
    assert len(found) == 4 + 3


async def test_a_finished_packet_is_answered_without_a_transaction(make_backend: Callable[..., Backend]) -> None:
    """Once a worker has seen a packet's last share go (or an open refused as finished), its next
    opens read the opener's receipt instead of locking the row: a repeat gets the first amount, a
    latecomer Finished, as the transaction would have answered."""
    first, second = make_backend().services, make_backend().services
    await _group(first, "g", ["S", "A", "B", "C"])
    order_id = await _paid(first, "S", {"count": 2, "total_fen": 100, "group_id": "g"}, fund=100)
    counted = [Counting(svc.opening.packets) for svc in (first, second)]
    for svc, store in zip((first, second), counted, strict=True):
        svc.opening.packets = store  # type: ignore[assignment]
    amounts = {user: (await first.opening.open(user, order_id))[0].amount_fen for user in ("A", "B")}
    assert counted[0].calls["open_batches"] == 2
    with pytest.raises(errors.Finished):
        await first.opening.open("C", order_id)
    assert await first.opening.open("A", order_id) == (await first.ports.packets.receipt(order_id, "A"), True)
    assert counted[0].calls["open_batches"] == 2
    with pytest.raises(errors.Finished):  # the other worker learns it from its transaction's refusal
        await second.opening.open("C", order_id)
    assert [(await second.opening.open(u, order_id))[0].amount_fen for u in ("A", "B")] == [amounts["A"], amounts["B"]]
    with pytest.raises(errors.Finished):
        await second.opening.open("C", order_id)
    assert counted[1].calls["open_batches"] == 1


async def test_opens_of_a_finished_packet_share_one_receipts_read(
    make_backend: Callable[..., Backend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that knows a packet finished reads its receipts once, then answers every later open
    from them, however many come at once: a repeat its first receipt, a latecomer Finished (not one
    point read per open). A packet with more than FINISHED_RECEIPTS_MAX_COUNT shares is not held."""
    svc = make_backend().services
    late = [f"L{i}" for i in range(20)]
    await _group(svc, "g", ["S", "A", "B", *late])
    order_id = await _paid(svc, "S", {"count": 2, "total_fen": 100, "group_id": "g"}, fund=100)
    first = {user: (await svc.opening.open(user, order_id))[0] for user in ("A", "B")}
    store = Counting(svc.opening.packets)
    svc.opening.packets = store  # type: ignore[assignment]
    outcomes = await asyncio.gather(
        *(svc.opening.open(user, order_id) for user in [*late, "A", "B"]), return_exceptions=True
    )
    assert all(isinstance(o, errors.Finished) for o in outcomes[:20])
    assert outcomes[20:] == [(first["A"], True), (first["B"], True)]
    assert await svc.opening.open("A", order_id) == (first["A"], True)
    assert (store.calls["receipts"], store.calls["receipt"], store.calls["open_batches"]) == (1, 0, 0)

    monkeypatch.setattr(opening_module, "FINISHED_RECEIPTS_MAX_COUNT", 3)
    big = 4
    members = [f"M{i}" for i in range(big)]
    await _group(svc, "h", ["S", "X", *members])
    order_id = await _paid(svc, "S", {"count": big, "total_fen": big, "group_id": "h"}, fund=big)
    await asyncio.gather(*(svc.opening.open(user, order_id) for user in members))
    with pytest.raises(errors.Finished):
        await svc.opening.open("X", order_id)
    assert (await svc.opening.open("M0", order_id))[1] is True
    assert (store.calls["receipts"], store.calls["receipt"]) == (1, 2)


async def test_a_failed_read_of_a_finished_packets_receipts_is_read_again(make_backend: Callable[..., Backend]) -> None:
    """Every open waiting on a finished packet's receipts gets the read's error (503 Degraded);
    the next open reads them again and is answered."""
    svc = make_backend().services
    await _group(svc, "g", ["S", "A", "B"])
    order_id = await _paid(svc, "S", {"count": 1, "total_fen": 10, "group_id": "g"}, fund=10)
    receipt, _ = await svc.opening.open("A", order_id)
    store = Counting(svc.opening.packets)
    svc.opening.packets = store  # type: ignore[assignment]

    async def down(order_id: str) -> list[Receipt]:
        raise errors.Degraded("database down")

    store.receipts = down  # type: ignore[method-assign]
    outcomes = await asyncio.gather(*(svc.opening.open(u, order_id) for u in ("A", "B")), return_exceptions=True)
    assert all(isinstance(o, errors.Degraded) for o in outcomes)
    del store.receipts
    assert await svc.opening.open("A", order_id) == (receipt, True)
    with pytest.raises(errors.Finished):
        await svc.opening.open("B", order_id)


def _credits_after_the_open(svc: Services) -> None:
    """Have the opens' stores credit nothing in their transactions (an embedded store, or a
    receiver's account on another server): the realtime credit is then a ledger write of its own."""
    store = Counting(svc.opening.packets)
    open_batches = svc.opening.packets.open_batches

    async def without_credits(
        batches: list[tuple[str, list[str]]], now_ms: int, draw: object, credit_from: int | None = None
    ) -> object:
        return await open_batches(batches, now_ms, draw)  # type: ignore[arg-type]

    store.open_batches = without_credits
    svc.opening.packets = store  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("failure", "level", "traceback"),
    [(errors.Degraded("ledger pool busy"), "WARNING", False), (RuntimeError("a bug"), "ERROR", True)],
)
async def test_a_failed_realtime_credit_leaves_the_open_answered(
    backend: Backend, caplog: pytest.LogCaptureFixture, failure: Exception, level: str, traceback: bool
) -> None:
    """A realtime credit that fails after the receipt committed answers the open all the same and
    leaves the credit to the reconciler; an expected refusal (Degraded: a busy pool, a dependency
    down) is one warning line, anything else an error with its traceback."""
    svc = backend.services
    await _group(svc, "g", ["S", "A"])
    order_id = await _paid(svc, "S", {"count": 1, "total_fen": 5_000, "group_id": "g"}, fund=5_000)

    async def failing(entries: list[LedgerEntry]) -> list[bool]:
        raise failure

    ledger = Counting(svc.crediting.ledger)
    ledger.post_many = failing
    svc.crediting.ledger = ledger  # type: ignore[assignment]
    _credits_after_the_open(svc)
    with caplog.at_level("WARNING", logger="hongbao"):
        receipt, repeat = await svc.opening.open("A", order_id)
    assert (receipt.amount_fen, repeat) == (5_000, False)
    assert await svc.ports.ledger.balance("A") == 0
    [record] = [r for r in caplog.records if "realtime credit" in r.getMessage()]
    assert (record.levelname, record.exc_info is not None) == (level, traceback)


async def test_the_realtime_credits_of_one_open_batch_share_one_ledger_write(backend: Backend) -> None:
    """Eight openers of one packet at once, every share credited in the request: the openers the
    batcher put in one transaction hand their credits to one ledger write (fewer writes than
    openers; before, one each), and every receiver holds exactly their share, credited once."""
    svc = backend.services
    users = [f"R{i}" for i in range(8)]
    await _group(svc, "g", ["S", *users])
    order_id = await _paid(svc, "S", {"count": 8, "total_fen": 16_000, "group_id": "g"}, fund=16_000)
    svc.crediting.realtime_threshold_fen = 1
    ledger = Counting(svc.crediting.ledger)
    svc.crediting.ledger = ledger  # type: ignore[assignment]
    _credits_after_the_open(svc)
    opened = await asyncio.gather(*(svc.opening.open(u, order_id) for u in users))
    assert ledger.calls["post_many"] < len(users), ledger.calls
    for user, (receipt, repeat) in zip(users, opened, strict=True):
        assert not repeat and await svc.ports.ledger.balance(user) == receipt.amount_fen
        assert await svc.ports.ledger.amount(user, EntryKind.CREDIT, f"{order_id}:{user}") == receipt.amount_fen
    assert sum(receipt.amount_fen for receipt, _ in opened) == 16_000
    await _marked_credited(svc, order_id)


async def test_a_realtime_credit_answers_the_open_once_its_ledger_entry_is_written(backend: Backend) -> None:
    """The opener of a share credited in the request is answered once the credit is in the ledger
    (its balance holds the share), not after the receipt's mark: a mark that hangs does not hold
    the answer, and once it goes through the receipt is marked credited."""
    svc = backend.services
    await _group(svc, "g", ["S", "A"])
    order_id = await _paid(svc, "S", {"count": 1, "total_fen": 5_000, "group_id": "g"}, fund=5_000)
    release = asyncio.Event()
    packets = Counting(svc.crediting.packets)
    mark_credited = svc.crediting.packets.mark_credited

    async def held(receipts: list[tuple[str, str]]) -> None:
        await release.wait()
        await mark_credited(receipts)

    packets.mark_credited = held
    svc.crediting.packets = packets  # type: ignore[assignment]
    _credits_after_the_open(svc)
    receipt, repeat = await asyncio.wait_for(svc.opening.open("A", order_id), 5)
    assert (receipt.amount_fen, repeat) == (5_000, False)
    assert await svc.ports.ledger.balance("A") == 5_000
    assert not (await svc.ports.packets.receipt(order_id, "A")).credited  # type: ignore[union-attr]
    release.set()
    await _marked_credited(svc, order_id)


async def _marked_credited(svc: Services, order_id: str) -> None:
    """Wait until every receipt of ``order_id`` is marked credited (the realtime credits mark them
    after their openers are answered); fails after 5 s."""

    async def marked() -> None:
        assert all(r.credited for r in await svc.ports.packets.receipts(order_id))

    await eventually_async(marked, 5.0)


async def test_a_realtime_share_is_in_the_balance_at_the_answer_and_credited_once(backend: Backend) -> None:
    """Two equal shares of 3 000 fen: the first opened at a threshold of 3 000 is in its receiver's
    balance at the answer (credited in the open's transaction where the store can, else by a
    ledger write the answer waits for), with one ``credited`` event and nothing queued; the second,
    opened at a threshold of 3 001, is queued. Each ends credited exactly once, marked."""
    svc = backend.services
    await _group(svc, "g", ["S", "A", "B"])
    order_id = await _paid(svc, "S", {"kind": "equal", "count": 2, "total_fen": 6_000, "group_id": "g"}, fund=6_000)
    heard = _Heard()
    svc.outbox.notifier = heard
    svc.crediting.realtime_threshold_fen = 3_000
    await _open_followed(svc, "A", order_id)
    assert await svc.ports.ledger.balance("A") == 3_000
    assert heard.named("credited") == [events.credited(order_id, "A", 3_000)]
    assert await svc.ports.queue.depth(CREDIT_STREAM) == 0
    svc.crediting.realtime_threshold_fen = 3_001
    await _open_followed(svc, "B", order_id)
    assert await svc.ports.ledger.balance("B") == 0 and await svc.ports.queue.depth(CREDIT_STREAM) == 1
    await _drain(svc)
    for user in ("A", "B"):
        credits = [e for e in await svc.ports.ledger.entries(user, 0, 10) if e.kind == EntryKind.CREDIT]
        assert [(e.ref, e.amount_fen) for e in credits] == [(f"{order_id}:{user}", 3_000)]
        assert await svc.ports.ledger.balance(user) == 3_000
    assert len(heard.named("credited")) == 2
    await _marked_credited(svc, order_id)
