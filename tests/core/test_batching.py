"""OpenBatcher: openers of different packets of one database that queue while its transaction
runs share the next transaction; databases never share one; one transaction per packet per worker."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Awaitable, Sequence

import hongbao_native
import pytest
from hongbao.core.batching import FollowUp, OpenBatcher
from hongbao.core.packet import Receipt
from hongbao.core.ports import OpenResult


class SlowDatabase:
    """A run function whose transactions each wait for ``release``; ``calls`` records each one's
    batches as (order id, user ids); every opener gets a receipt of 1 fen."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[str, list[str]]]] = []
        self.release = asyncio.Event()

    async def run(self, batches: Sequence[tuple[str, Sequence[str]]]) -> list[list[OpenResult]]:
        """One transaction: recorded, then held until ``release`` is set."""
        self.calls.append([(order_id, list(users)) for order_id, users in batches])
        await self.release.wait()
        return [[OpenResult(Receipt(order_id, user, 1, 0)) for user in users] for order_id, users in batches]


def batcher(
    database: SlowDatabase, flushers: int, max_in_db: int = 2, follow_up: FollowUp | None = None
) -> OpenBatcher:
    """An OpenBatcher over ``database``: packets "x..." on database 1, the others on 0."""
    admission = hongbao_native.AdmissionTable.create(f"batching-{os.getpid()}-{secrets.token_hex(4)}", 64)
    return OpenBatcher(
        database.run,
        lambda order_id: int(order_id.startswith("x")),
        admission,
        flushers=flushers,
        max_in_db=max_in_db,
        follow_up=follow_up,
    )


async def settle() -> None:
    """Let every task that can run, run."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_packets_queued_behind_a_transaction_share_the_next_one() -> None:
    db = SlowDatabase()
    opens = batcher(db, flushers=1)
    first = asyncio.ensure_future(opens.open("A", "a1"))
    await settle()
    assert db.calls == [[("A", ["a1"])]]
    later = [asyncio.ensure_future(opens.open(p, u)) for p, u in [("B", "b1"), ("C", "c1"), ("A", "a2"), ("B", "b2")]]
    await settle()
    assert len(db.calls) == 1 and opens.in_flight() == 5
    db.release.set()
    results = await asyncio.gather(first, *later)
    assert db.calls[1] == [("B", ["b1", "b2"]), ("C", ["c1"]), ("A", ["a2"])]
    assert [(r.receipt.order_id, r.receipt.user_id) for r in results if r.receipt] == [
        ("A", "a1"),
        ("B", "b1"),
        ("C", "c1"),
        ("A", "a2"),
        ("B", "b2"),
    ]
    assert len(db.calls) == 2 and opens.in_flight() == 0


async def test_databases_do_not_share_a_transaction_and_a_packet_runs_once_per_worker() -> None:
    db = SlowDatabase()
    opens = batcher(db, flushers=2)
    tasks = [asyncio.ensure_future(opens.open(p, u)) for p, u in [("A", "a1"), ("x1", "u1"), ("B", "b1")]]
    await settle()
    assert db.calls == [[("A", ["a1"]), ("B", ["b1"])], [("x1", ["u1"])]]  # queued in one tick: one transaction
    tasks.append(asyncio.ensure_future(opens.open("A", "a2")))  # A is in a transaction here: a2 waits for it
    tasks.append(asyncio.ensure_future(opens.open("C", "c1")))  # a free flusher takes C at once
    await settle()
    assert db.calls[2:] == [[("C", ["c1"])]]
    db.release.set()
    await asyncio.gather(*tasks)
    assert db.calls[3:] == [[("A", ["a2"])]] and opens.in_flight() == 0


async def test_a_failed_transaction_fails_its_openers_only() -> None:
    class Failing(SlowDatabase):
        async def run(self, batches: Sequence[tuple[str, Sequence[str]]]) -> list[list[OpenResult]]:
            if any(order_id == "bad" for order_id, _ in batches):
                raise RuntimeError("the database went away")
            return await super().run(batches)

    db = Failing()
    db.release.set()
    opens = batcher(db, flushers=1)
    outcomes = await asyncio.gather(opens.open("bad", "u"), opens.open("x1", "v"), return_exceptions=True)
    assert isinstance(outcomes[0], RuntimeError)
    assert isinstance(outcomes[1], OpenResult) and outcomes[1].receipt is not None
    assert (await opens.open("bad-not", "w")).receipt is not None and opens.in_flight() == 0


async def test_a_packet_next_transaction_runs_while_the_last_ones_follow_ups_do() -> None:
    """A committed transaction's slot is free during its follow-ups: a second flusher runs the
    packet's next transaction meanwhile (two flushers); with every flusher in follow-ups (one), the
    openers queued meanwhile wait for the next transaction. Openers are answered once their
    follow-ups started, without waiting for them to end."""
    for flushers in (2, 1):
        db = SlowDatabase()
        db.release.set()
        following = asyncio.Event()
        followed: list[list[tuple[str, list[str]]]] = []

        def follow_up(
            batches: Sequence[tuple[str, Sequence[str]]], _results: list[list[OpenResult]]
        ) -> Awaitable[None]:
            followed.append([(order_id, list(users)) for order_id, users in batches])  # noqa: B023
            return asyncio.ensure_future(following.wait())  # noqa: B023

        opens = batcher(db, flushers=flushers, max_in_db=1, follow_up=follow_up)
        first = asyncio.ensure_future(opens.open("A", "a1"))
        await settle()
        later = [asyncio.ensure_future(opens.open("A", user)) for user in ("a2", "a3")]
        await settle()
        assert len(db.calls) == flushers  # each flusher ran one transaction and waits in its follow-ups
        assert first.done() and followed == db.calls
        assert all(task.done() for task in later) == (flushers == 2) and opens.in_flight() == (
            0 if flushers == 2 else 2
        )
        following.set()
        results = await asyncio.gather(first, *later)
        assert [users for [(_, users)] in db.calls] == [["a1"], ["a2", "a3"]] and followed == db.calls
        assert [r.receipt.user_id for r in results if r.receipt] == ["a1", "a2", "a3"] and opens.in_flight() == 0


async def test_a_follow_up_that_fails_to_start_fails_its_openers_and_one_that_fails_later_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A follow-up that raises when called fails its openers (their receipts stand: a retried open
    finds them); one that fails once under way leaves them answered, in one log line."""
    db = SlowDatabase()
    db.release.set()

    def broken(batches: Sequence[tuple[str, Sequence[str]]], _results: list[list[OpenResult]]) -> Awaitable[None]:
        raise RuntimeError("the cache went away")

    opens = batcher(db, flushers=1, follow_up=broken)
    outcome = await asyncio.gather(opens.open("A", "a1"), return_exceptions=True)
    assert isinstance(outcome[0], RuntimeError) and opens.in_flight() == 0

    async def failing() -> None:
        raise RuntimeError("the queue went away")

    def later(batches: Sequence[tuple[str, Sequence[str]]], _results: list[list[OpenResult]]) -> Awaitable[None]:
        return asyncio.ensure_future(failing())

    opens = batcher(db, flushers=1, follow_up=later)
    result = await opens.open("B", "b1")
    await settle()
    assert result.receipt is not None and opens.in_flight() == 0
    assert [r.getMessage() for r in caplog.records] == ["the follow-ups of the opens of B failed"]
