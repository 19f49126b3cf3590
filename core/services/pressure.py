"""The lists' pressure switch (docs/architecture.md section 6: "Lists cache the first two pages;
under pressure only two pages are served").

An operator turns it on (``POST /v1/admin/lists-pressure``) when the user-dimension databases
struggle: pages past SERVED_PAGES of the received and sent lists and of the bill are then refused
with 503 ``degraded`` and ``Retry-After: PRESSURE_RETRY_AFTER_S`` instead of reaching the
database, while the first pages (the lists' cached ones) are served as before. Off (the default),
every page reads the database. The switch is a flag (hongbao.core.ports.Flags), so every worker
and node follows it within its flag sync interval (one second).
"""

from __future__ import annotations

from hongbao.core import errors
from hongbao.core.ports import Flags

PRESSURE_FLAG = "lists_pressure"
SERVED_PAGES = 2  # the pages served under pressure: the lists' cached ones
PRESSURE_RETRY_AFTER_S = 30


class ListsPressure:
    """The switch over ``flags``; ``on`` is this worker's copy."""

    __slots__ = ("flags", "on")

    def __init__(self, flags: Flags) -> None:
        self.flags = flags
        self.on = False

    async def set(self, on: bool) -> None:
        """Turn it on or off for every worker (they sync within their interval) and here now."""
        await self.flags.set(PRESSURE_FLAG, "on" if on else "off")
        self.on = on

    async def sync(self) -> None:
        """Pick up a switch made by another worker or node."""
        value = await self.flags.get(PRESSURE_FLAG)
        if value is not None:
            self.on = value == "on"

    def check(self, page: int) -> None:
        """Raise Degraded (503, Retry-After PRESSURE_RETRY_AFTER_S) for ``page`` (1 first) past
        SERVED_PAGES while the switch is on."""
        if self.on and page > SERVED_PAGES:
            raise errors.Degraded(
                f"under pressure only the first {SERVED_PAGES} pages are served; try later",
                retry_after=PRESSURE_RETRY_AFTER_S,
            )
