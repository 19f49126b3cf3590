"""Red-packet events for the push channel (docs/architecture.md section 7) and the Notifier port.

The services say what happened; a Notifier (the push hub in a server) delivers it. Who gets what
(event -- to: data):

- packet_received -- the group, or the exclusive receiver (on pay): order_id, sender_id, kind,
  count, total_fen, greeting, expires_at
- opened -- the opener: order_id, amount_fen, opened_at
- credited -- the receiver, once the amount is on their balance: order_id, amount_fen
- finished -- the group, or the sender of an exclusive packet (the last share went): order_id,
  best_luck_user_id, best_luck_fen
- expired -- the group, or the exclusive packet's receiver: order_id, remaining_count
- refunded -- the sender, once the refund is on their balance: order_id, refunded_fen

Amounts are integer fen, times RFC 3339 UTC. Pushing never decides a money flow: ``notify``
returns at once and never raises (docs/architecture.md section 10: money goes on whatever push does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from hongbao.core.packet import Packet, Receipt
from hongbao.core.times import rfc3339


@dataclass(frozen=True, slots=True)
class Event:
    """One event ``name`` with its JSON ``data``, for ``user_ids`` and/or every member of ``group_id``."""

    name: str
    data: dict[str, object]
    user_ids: tuple[str, ...] = ()
    group_id: str | None = None


class Notifier(Protocol):
    """Where the services hand their events."""

    def notify(self, event: Event) -> None:
        """Take ``event`` for delivery and return at once; never raises (failures are the
        notifier's to log and count)."""
        ...

    def lost(self) -> None:
        """An event whose audience could not be named was not handed over: every user's stream
        is to start a new epoch, so each client is told ``reset`` and reloads over HTTP
        (docs/architecture.md section 7: a gap is never passed off as complete); never raises."""
        ...


class NullNotifier:
    """The notifier of a service nobody listens to (tools, tests of the money flow)."""

    __slots__ = ()

    def notify(self, event: Event) -> None:
        """Drop ``event``."""

    def lost(self) -> None:
        """Nobody listens: nothing to tell."""


def _audience(packet: Packet) -> tuple[tuple[str, ...], str | None]:
    """The group of a group packet, else the exclusive packet's receiver."""
    if packet.group_id is not None:
        return (), packet.group_id
    return ((packet.receiver_id,) if packet.receiver_id else ()), None


def packet_received(packet: Packet, greeting: str) -> Event:
    """A packet was paid: its audience may open it."""
    users, group = _audience(packet)
    return Event(
        "packet_received",
        {
            "order_id": packet.order_id,
            "sender_id": packet.sender_id,
            "kind": packet.kind.value,
            "count": packet.count,
            "total_fen": packet.total_fen,
            "greeting": greeting,
            "expires_at": rfc3339(packet.expires_at_ms),
        },
        users,
        group,
    )


def opened(receipt: Receipt) -> Event:
    """The opener's share."""
    return Event(
        "opened",
        {"order_id": receipt.order_id, "amount_fen": receipt.amount_fen, "opened_at": rfc3339(receipt.opened_at_ms)},
        (receipt.user_id,),
    )


def credited(order_id: str, user_id: str, amount_fen: int) -> Event:
    """A receipt's amount reached the receiver's balance."""
    return Event("credited", {"order_id": order_id, "amount_fen": amount_fen}, (user_id,))


def finished(packet: Packet, best_luck_user_id: str, best_luck_fen: int) -> Event:
    """The last share went: best luck (the largest share, ties to the earliest open)."""
    users, group = ((), packet.group_id) if packet.group_id is not None else ((packet.sender_id,), None)
    return Event(
        "finished",
        {"order_id": packet.order_id, "best_luck_user_id": best_luck_user_id, "best_luck_fen": best_luck_fen},
        users,
        group,
    )


def expired(packet: Packet) -> Event:
    """The packet expired with shares left."""
    users, group = _audience(packet)
    return Event("expired", {"order_id": packet.order_id, "remaining_count": packet.remaining_count}, users, group)


def refunded(packet: Packet) -> Event:
    """The unopened remainder is back on the sender's balance."""
    return Event("refunded", {"order_id": packet.order_id, "refunded_fen": packet.refunded_fen}, (packet.sender_id,))
