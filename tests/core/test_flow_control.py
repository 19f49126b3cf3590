"""Flow control in the services (docs/architecture.md section 9): the host's send rate (the native
shared-memory token bucket every worker takes from) and the grabs a packet's remaining shares
can use; the excess is Busy (429 with Retry-After) and moves nothing."""

from __future__ import annotations

import os
from collections.abc import Iterator

import hongbao_native
import pytest
from hongbao.core import errors
from hongbao.core.clock import ManualClock
from hongbao.server.composition import Backend

from tests.core.test_service import _group, _paid

_names = iter(range(10**6))


@pytest.fixture
def send_limiter() -> Iterator[hongbao_native.RateLimiter]:
    """A host send rate of 3 at once, then one a thousand seconds."""
    limiter = hongbao_native.RateLimiter.create(f"send-test-{os.getpid()}-{next(_names)}", 0.001, 3)
    yield limiter
    limiter.unlink()


async def test_sends_over_the_hosts_rate_are_busy_and_store_nothing(
    backend: Backend, send_limiter: hongbao_native.RateLimiter
) -> None:
    """Three sends take the bucket (shared by another worker's attachment of it); the fourth is
    Busy with a Retry-After of about 1000 s, counted as a send rejection, and leaves no pre-order
    and no money moved; a bad send is still a 400, not a 429."""
    svc = backend.services
    svc.sending.node_rate = send_limiter
    other_worker = hongbao_native.RateLimiter.attach(send_limiter.name)
    await _group(svc, "g", ["S", "X"])
    await svc.accounts.topup("S", 1000, "fund-S")
    body = {"count": 2, "total_fen": 10, "group_id": "g"}
    sent = [await svc.sending.send("S", body) for _ in range(2)]
    assert other_worker.try_acquire()
    with pytest.raises(errors.Busy) as refused:
        await svc.sending.send("S", body)
    assert refused.value.counter == "send_rejections" and 900 < refused.value.retry_after <= 1000
    assert refused.value.headers == [("retry-after", str(round(refused.value.retry_after)))]
    assert len({order_id for order_id, _ in sent}) == 2
    assert await svc.accounts.balance("S") == 1000
    with pytest.raises(errors.InvalidAmount):
        await svc.sending.send("S", {**body, "total_fen": 0})


async def test_grabs_beyond_what_the_shares_left_can_use_are_busy_for_the_second(
    backend: Backend, clock: ManualClock
) -> None:
    """Off by default; ok_per_share 1.5 on a 2-share packet: three grabs answered ok in a second, the fourth Busy
    (grab_rejections); the next second three more; once a share is opened, the bound follows the
    one share left (two, then Busy); an opener who already opened is told the amount, never Busy."""
    svc = backend.services
    users = [f"u{i}" for i in range(12)]
    await _group(svc, "g", ["S", *users])
    order_id = await _paid(svc, "S", {"count": 2, "total_fen": 100, "group_id": "g"}, fund=100)
    assert [await svc.grabbing.grab(u, order_id) for u in users] == [{"status": "ok"}] * 12  # 0 (default): off
    clock.advance_ms(1000)
    svc.grabbing.ok_per_share = 1.5
    assert [await svc.grabbing.grab(u, order_id) for u in users[:3]] == [{"status": "ok"}] * 3
    with pytest.raises(errors.Busy) as refused:
        await svc.grabbing.grab(users[3], order_id)
    assert refused.value.counter == "grab_rejections" and refused.value.headers == [("retry-after", "1")]
    clock.advance_ms(1000)
    assert [await svc.grabbing.grab(u, order_id) for u in users[3:6]] == [{"status": "ok"}] * 3
    receipt, _ = await svc.opening.open(users[0], order_id)
    clock.advance_ms(1000)
    assert [await svc.grabbing.grab(u, order_id) for u in users[6:8]] == [{"status": "ok"}] * 2
    with pytest.raises(errors.Busy):
        await svc.grabbing.grab(users[8], order_id)  # 2 reached 1.5 x 1 share left
    assert await svc.grabbing.grab(users[0], order_id) == {"status": "opened", "amount_fen": receipt.amount_fen}
