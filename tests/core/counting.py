"""A port wrapped to count its calls: how a test shows that a cache level answered, not the store."""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any


class Counting:
    """``inner`` with every attribute passed on; each call of one of its coroutine methods is
    counted in ``calls`` (method name -> number of calls)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await attr(*args, **kwargs)

        return counted
