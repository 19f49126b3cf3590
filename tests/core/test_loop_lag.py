"""LoopLag on a real event loop: quiet, it reads a few ms at most; a stall of the loop shows in
``behind_ms`` at once and in ``stalled_ms`` since a moment before it, not since a moment after."""

from __future__ import annotations

import asyncio
import time

from hongbao.core.loop_lag import INTERVAL_S, LoopLag

STALL_S = 0.4


async def test_a_stall_shows_as_lag_and_a_quiet_loop_does_not() -> None:
    lag = LoopLag()
    assert lag.behind_ms() == 0 and lag.stalled_ms(0.0) == 0  # not started: nothing known
    lag.start()
    loop = asyncio.get_running_loop()
    try:
        await asyncio.sleep(4 * INTERVAL_S)
        assert lag.behind_ms() < 100  # generous: a loaded CI machine
        before = loop.time()
        await asyncio.sleep(INTERVAL_S / 2)
        time.sleep(STALL_S)  # the loop stalls
        assert lag.behind_ms() >= 0.9 * STALL_S * 1000
        await asyncio.sleep(0)  # the late tick fires
        assert lag.stalled_ms(before) >= 0.9 * STALL_S * 1000
        after = loop.time()
        await asyncio.sleep(4 * INTERVAL_S)
        assert lag.stalled_ms(after) < 100 and lag.behind_ms() < 100
    finally:
        lag.stop()
    assert lag.behind_ms() == 0
