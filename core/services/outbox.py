"""What follows a write that the write does not wait on: the events for the notifier (push), the
messages for the queues (credits, list rows) and the read caches' invalidations. None of them
ever fails a money flow: each step is logged and dropped when its target is down, and the
reconciler (hongbao.core.services.settlement) repairs what the queues would have carried."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from hongbao.core.breaker import BreakerOpen
from hongbao.core.events import Event, Notifier, NullNotifier
from hongbao.core.messages import Outgoing
from hongbao.core.ports import ProfileStore, Queue
from hongbao.core.view_cache import ViewCache

log = logging.getLogger("hongbao.service")


class Outbox:
    """The follow-ups of the services over ``queue`` (the credit and lists streams), ``views``
    (the read caches; None: none to tell) and ``profiles`` (the greetings); ``notifier`` hears the
    red-packet events (hongbao.core.events; nobody by default: the app sets the push hub)."""

    __slots__ = ("queue", "views", "profiles", "notifier")

    def __init__(self, queue: Queue, views: ViewCache | None, profiles: ProfileStore) -> None:
        self.queue, self.views, self.profiles = queue, views, profiles
        self.notifier: Notifier = NullNotifier()

    def notify(self, event: Event) -> None:
        """Hand ``event`` to the notifier; never raises (push is never a reason for a money flow to fail)."""
        try:
            self.notifier.notify(event)
        except Exception:
            log.exception("the notifier failed on event %s", event.name)

    async def publish(self, messages: Sequence[Outgoing]) -> None:
        """Queue ``messages`` in one write; never raises. Lost when the queue is down: money is
        safe (the reconciler credits pending receipts from the database and rewrites the list rows)."""
        if not messages:
            return
        try:
            await self.queue.publish(list(messages))
        except BreakerOpen:  # the queue is down: its breaker logged it and counts what is skipped
            pass
        except Exception:
            log.exception(
                "could not queue %d follow-up message(s); credits and list rows fall to the reconciler",
                len(messages),
            )

    async def changed(self, entries: list[str]) -> None:
        """Tell the read caches that ``entries`` changed in the database (never raises)."""
        if self.views is not None and entries:
            await self.views.changed(entries)

    async def note_greeting(self, order_id: str, greeting: str) -> None:
        """Keep a packet's greeting for its details; never raises (details fall back to the default)."""
        if greeting:
            try:
                await self.profiles.set_greeting(order_id, greeting)
            except BreakerOpen:  # the non-critical store is down: its breaker logged it and counts the skip
                pass
            except Exception:
                log.exception("could not keep the greeting of %s", order_id)
