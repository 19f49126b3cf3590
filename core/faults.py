"""Crash points for tests: the money flows call ``faults.point(name)`` at the moments a crash
hurts most, and an armed point runs its action there; unarmed (always, outside tests) a point is
one dictionary lookup.

Points (the step before has committed, the step after has not started):

- ``pay_debited``: the sender's debit is in the ledger, the packet row is not inserted yet;
- ``pay_inserted``: the packet row is in, its follow-ups (grab state, push, lists row, the
  pre-order's removal) are not done;
- ``open_committed``: an open batch's receipts are committed, their credits and list rows are not
  queued yet.

``hongbao serve`` arms them from the ``test_faults`` setting (``"pay_debited=0.02,open_committed=0.05"``:
the probability that passing the point SIGKILLs the worker), refused unless ``test_clock`` is on too
(a test server); unit tests arm a point with an action that raises.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Callable

POINTS = ("pay_debited", "pay_inserted", "open_committed")


class FaultInjected(Exception):
    """Raised by a point armed with :func:`raising`: the flow stopped there, as a crash would stop it."""


def crash() -> None:
    """The default action: SIGKILL this process at once (no cleanup, no finally blocks)."""
    os.kill(os.getpid(), signal.SIGKILL)


def raising() -> None:
    """An action for unit tests: raise :class:`FaultInjected`."""
    raise FaultInjected("fault injected")


class Faults:
    """The armed points: name -> (probability in [0, 1], action). Raises ValueError for an unknown
    point or a probability outside [0, 1]."""

    __slots__ = ("_armed", "_rng")

    def __init__(
        self, armed: dict[str, tuple[float, Callable[[], None]]] | None = None, *, seed: int | None = None
    ) -> None:
        self._armed: dict[str, tuple[float, Callable[[], None]]] = {}
        self._rng = random.Random(seed)
        for name, (probability, action) in (armed or {}).items():
            self.arm(name, probability, action)

    def arm(self, name: str, probability: float = 1.0, action: Callable[[], None] = crash) -> None:
        """Arm point ``name``: passing it runs ``action`` with ``probability``."""
        if name not in POINTS:
            raise ValueError(f"unknown fault point {name!r} (known: {', '.join(POINTS)})")
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"fault point {name}: probability must be in [0, 1], got {probability}")
        self._armed[name] = (probability, action)

    def disarm(self, name: str) -> None:
        """Disarm point ``name`` (a no-op when it is not armed)."""
        self._armed.pop(name, None)

    def point(self, name: str) -> None:
        """Pass point ``name``: its action runs when it is armed and the draw says so."""
        armed = self._armed.get(name)
        if armed is not None and self._rng.random() < armed[0]:
            armed[1]()


def parse_faults(spec: str) -> Faults:
    """Faults armed from ``"point=probability,..."`` with the crash action; "" arms none. Raises
    ValueError naming what is malformed."""
    faults = Faults()
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        try:
            probability = float(value) if sep else 1.0
        except ValueError:
            raise ValueError(f"test_faults: {item!r} is not point=probability") from None
        faults.arm(name.strip(), probability)
    return faults


#: The faults of a process that arms none: every point is a lookup that finds nothing.
NO_FAULTS = Faults()
