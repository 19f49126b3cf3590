"""hongbao.core.soon: a future's value through plain steps, run by one callback."""

from __future__ import annotations

import asyncio

import pytest
from hongbao.core.soon import Later, Soon


async def test_steps_run_in_order_once_in_the_callback() -> None:
    """then() steps see the previous value; the callback reads the last one with result()."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    calls: list[str] = []
    soon = (
        Soon[int](future).then(lambda v: calls.append(f"a{v}") or v + 1).then(lambda v: calls.append(f"b{v}") or v * 10)
    )
    seen: list[int] = []
    soon.add_done_callback(lambda s: seen.append(s.result()))
    with pytest.raises(asyncio.InvalidStateError):
        soon.result()
    future.set_result(4)
    await asyncio.sleep(0)
    assert (calls, seen, soon.result()) == (["a4", "b5"], [50], 50)


async def test_an_error_skips_then_steps_and_reaches_outcome() -> None:
    """A failed reply or a raising step skips the then() steps up to the next outcome(), which sees
    the error and may turn it into a value (or raise another)."""
    loop = asyncio.get_running_loop()
    for fail in ("reply", "step"):
        future: asyncio.Future[int] = loop.create_future()
        skipped: list[int] = []
        soon = (
            Soon[int](future)
            .then(lambda v, fail=fail: 1 // 0 if fail == "step" else v)
            .then(lambda v, skipped=skipped: skipped.append(v) or v)
            .outcome(lambda v, e: f"{type(e).__name__} {v}")
        )
        if fail == "reply":
            future.set_exception(ConnectionError("gone"))
        else:
            future.set_result(7)
        assert await soon == ("ConnectionError None" if fail == "reply" else "ZeroDivisionError None")
        assert skipped == []
    future = loop.create_future()
    later = Soon[int](future).outcome(lambda v, e: (_ for _ in ()).throw(Later("miss")))
    future.set_result(1)
    with pytest.raises(Later, match="miss"):
        await later


async def test_awaiting_task_cancelled_is_cancelled() -> None:
    """A Task awaiting a Soon is cancelled like one awaiting a future (not turned into a value)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    soon = Soon[int](future).outcome(lambda v, e: "settled")
    task = loop.create_task(_await(soon))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _await(soon: Soon[str]) -> str:
    return await soon
