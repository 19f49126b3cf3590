"""core/breaker.py: opening after consecutive down errors, skipping while open, one trial per
cooldown, closing on a success; other errors pass through uncounted."""

from __future__ import annotations

import pytest
from hongbao.core.breaker import Breaker, BreakerOpen


class _Dependency:
    """A dependency that is down (ConnectionError) until ``up`` is set; counts its calls."""

    def __init__(self) -> None:
        self.up, self.calls = False, 0

    async def __call__(self) -> str:
        self.calls += 1
        if not self.up:
            raise ConnectionError("refused")
        return "ok"


async def test_opens_skips_and_recovers() -> None:
    """Two failures open it, calls are skipped for the cooldown, a failed trial re-opens, a good trial closes it."""
    now = [0.0]
    counts: dict[str, int] = {}
    breaker = Breaker("dep", (ConnectionError,), counts, threshold=2, cooldown_s=1.0, now=lambda: now[0])
    dep = _Dependency()
    for _ in range(2):
        with pytest.raises(BreakerOpen) as raised:
            await breaker.call(dep)
        assert isinstance(raised.value.__cause__, ConnectionError)
    assert breaker.is_open and counts == {"dep_breaker_opens": 1} and dep.calls == 2
    for _ in range(100):
        with pytest.raises(BreakerOpen):
            await breaker.call(dep)
    assert dep.calls == 2  # skipped: the dependency was not called
    now[0] = 1.5
    with pytest.raises(BreakerOpen):
        await breaker.call(dep)  # the trial, still down
    with pytest.raises(BreakerOpen):
        await breaker.call(dep)  # skipped again for a new cooldown
    assert dep.calls == 3 and counts == {"dep_breaker_opens": 1}
    now[0], dep.up = 3.0, True
    assert await breaker.call(dep) == "ok" and not breaker.is_open
    assert await breaker.call(dep) == "ok" and dep.calls == 5


async def test_other_errors_pass_through() -> None:
    """An error that does not mean "down" propagates as itself and never opens the breaker."""
    breaker = Breaker("dep", (ConnectionError,), {}, threshold=1)

    async def buggy() -> None:
        raise ValueError("bad script")

    for _ in range(3):
        with pytest.raises(ValueError):
            await breaker.call(buggy)
    assert not breaker.is_open
