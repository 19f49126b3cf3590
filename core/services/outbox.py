"""What follows a write that the write does not wait on: the events for the notifier (push), the
messages for the queues (credits, list rows) and the read caches' invalidations. None of them
ever fails a money flow: each step is logged and dropped when its target is down (queue messages
are held for another try first), and the reconciler (hongbao.core.services.settlement) repairs
what the queues would have carried.

Queue messages a failed write did not deliver are held in memory (at most ``HELD_MAX``, the newest
kept) and queued again by ``redrive`` (``REDRIVE_BATCH`` a call, oldest first), which the credits
job calls every ``credit_interval_s``: so credits and list rows follow within that interval once
the queue is back, not after the reconciler's window. What a worker held when it died, or what
the bound let go, is the reconciler's. The queue's consumers take a message twice without effect
(a credit is posted once per receipt, a list row kept once), so a write that failed after
reaching the queue may be queued again."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Sequence

from hongbao.core.breaker import BreakerOpen
from hongbao.core.events import Event, Notifier, NullNotifier
from hongbao.core.messages import Outgoing
from hongbao.core.ports import ProfileStore, Queue
from hongbao.core.view_cache import ViewCache

log = logging.getLogger("hongbao.service")
HELD_MAX = 100_000  # queue messages held for redrive (~200 bytes each in memory); older ones are the reconciler's
REDRIVE_BATCH = 5_000  # messages queued again in one write


class Outbox:
    """The follow-ups of the services over ``queue`` (the credit and lists streams), ``views``
    (the read caches; None: none to tell) and ``profiles`` (the greetings); ``notifier`` hears the
    red-packet events (hongbao.core.events; nobody by default: the app sets the push hub)."""

    __slots__ = ("queue", "views", "profiles", "notifier", "_held")

    def __init__(self, queue: Queue, views: ViewCache | None, profiles: ProfileStore) -> None:
        self.queue, self.views, self.profiles = queue, views, profiles
        self.notifier: Notifier = NullNotifier()
        self._held: deque[Outgoing] = deque(maxlen=HELD_MAX)

    def notify(self, event: Event) -> None:
        """Hand ``event`` to the notifier; never raises (push is never a reason for a money flow to fail)."""
        try:
            self.notifier.notify(event)
        except Exception:
            log.exception("the notifier failed on event %s", event.name)

    def lost(self) -> None:
        """Tell the notifier an event was lost before its audience was known (Notifier.lost); never raises."""
        try:
            self.notifier.lost()
        except Exception:
            log.exception("the notifier failed to take a lost event")

    async def publish(self, messages: Sequence[Outgoing]) -> None:
        """Queue ``messages`` in one write; never raises. When the queue is down they are held
        for ``redrive`` (module docstring); money is safe either way (the reconciler credits
        pending receipts from the database and rewrites the list rows)."""
        if not messages:
            return
        try:
            await self.queue.publish(list(messages))
        except BreakerOpen:  # the queue is down: its breaker logged it and counts what is skipped
            self._held.extend(messages)
        except Exception:
            log.exception("could not queue %d follow-up message(s); held to queue again", len(messages))
            self._held.extend(messages)

    async def redrive(self) -> int:
        """Queue again, in one write, the oldest ``REDRIVE_BATCH`` messages ``publish`` could not
        queue: returns how many went (0 when none were held, or the queue is still down: they
        stay held). Never raises."""
        if not self._held:
            return 0
        held = [self._held.popleft() for _ in range(min(REDRIVE_BATCH, len(self._held)))]
        try:
            await self.queue.publish(held)
        except Exception:  # BreakerOpen or a failed write: still down (publish logged the first failure)
            self._held = deque([*held, *self._held], maxlen=HELD_MAX)
            return 0
        log.info("queued %d follow-up message(s) held while the queue was down", len(held))
        return len(held)

    def changed(self, entries: list[str]) -> Awaitable[None]:
        """Tell the read caches that ``entries`` changed in the database: this worker's copies go
        at once, and its reads of them wait for the shared level's bump (ViewCache.changed), which
        the awaitable is (it never raises)."""
        if self.views is not None and entries:
            return self.views.changed(entries)
        return _nothing()

    async def note_greeting(self, order_id: str, greeting: str) -> None:
        """Keep a packet's greeting for its details; never raises (details fall back to the default)."""
        if greeting:
            try:
                await self.profiles.set_greeting(order_id, greeting)
            except BreakerOpen:  # the non-critical store is down: its breaker logged it and counts the skip
                pass
            except Exception:
                log.exception("could not keep the greeting of %s", order_id)


async def _nothing() -> None:
    """No change to tell."""
