"""The ports the services depend on, as small ``typing.Protocol`` classes.

Adapters: the embedded default (SQLite + in-process) in ``hongbao.core.adapters``; MySQL/MariaDB
and Redis with the production backend. Every method that moves money is idempotent, keyed as
docs/architecture.md section 5 says, so a retry after any failure never moves money twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from hongbao.core.clock import Clock
from hongbao.core.packet import Packet, Receipt
from hongbao.core.vocabulary import Direction, EntryKind, Refusal

#: draw(remaining_fen, remaining_count) -> the next share in fen (docs/architecture.md section 3).
Draw = Callable[[int, int], int]


@dataclass(frozen=True, slots=True)
class OpenResult:
    """The outcome of one opener in a batch: a receipt, or the error code that refused it.

    ``refusal`` says why there is no receipt (None on success);
    ``repeat`` is True when the receipt already existed (an idempotent repeat of an open);
    ``last`` is True for the open that took the packet's last share (it finished the packet);
    ``best`` is then the packet's best-luck receipt (largest share, earliest open on ties).
    """

    receipt: Receipt | None
    refusal: Refusal | None = None
    repeat: bool = False
    last: bool = False
    best: Receipt | None = None


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """A movement of ``amount_fen`` (signed: debits are negative) on ``user_id``'s balance.

    ``kind`` is what it records; ``ref`` is unique per kind (the order id for send
    and refund, ``order_id:user_id`` for a credit, the Idempotency-Key for a top-up).
    """

    user_id: str
    kind: EntryKind
    ref: str
    amount_fen: int
    created_at_ms: int


def credit_entry(receipt: Receipt, at_ms: int) -> LedgerEntry:
    """The ledger entry that credits ``receipt`` to its receiver at ``at_ms`` (ref ``order_id:user_id``)."""
    ref = f"{receipt.order_id}:{receipt.user_id}"
    return LedgerEntry(receipt.user_id, EntryKind.CREDIT, ref, receipt.amount_fen, at_ms)


class PacketStore(Protocol):
    """Packets and receipts, on the packet's shard (docs/architecture.md section 5)."""

    async def insert_packet(self, packet: Packet) -> bool:
        """Insert an active packet; False (and no change) if the order id already exists."""
        ...

    async def get_packet(self, order_id: str) -> Packet | None:
        """The packet row, or None."""
        ...

    async def get_packets(self, order_ids: Sequence[str]) -> dict[str, Packet]:
        """The packet rows of ``order_ids`` that exist, by order id, read together (one query per
        database); a background read, bounded as a scan (the reconciler's)."""
        ...

    def database(self, order_id: str) -> int:
        """The database holding the packet ``order_id`` (0 when there is one): the packets of one
        ``open_batches`` call must share it. Raises ValueError for an order id that does not parse."""
        ...

    async def open_batches(
        self, batches: Sequence[tuple[str, Sequence[str]]], now_ms: int, draw: Draw, credit_from: int | None = None
    ) -> list[list[OpenResult]]:
        """For each (order id, user ids) of ``batches`` (distinct packets of ONE database): open for
        each user, in order, all in ONE transaction. Each packet row is locked once, the rows in
        order id order (so two of these transactions never wait on each other in a cycle); a
        repeat opener gets the existing receipt, each new one a drawn share inserted while shares
        remain; each remainder is updated once, and a packet is marked finished (with best luck:
        the largest share, ties to the earliest open) when its last share goes. The results come
        per batch, in the order given. Refusals: "not_found", "expired" (now_ms >= expires_at),
        "finished". ``credit_from``: a new receipt of at least this many fen may be credited in
        the same transaction (its ledger entry, ``credit_entry``, and its balance), where the store
        can; such a receipt comes back ``credited``. Raises ValueError when the packets are not all
        on one database."""
        ...

    async def best_luck(self, order_id: str) -> str | None:
        """The best-luck user id once the packet is finished (largest share, earliest on ties)."""
        ...

    async def best_lucks(self, order_ids: Sequence[str]) -> dict[str, str | None]:
        """``best_luck`` of each of ``order_ids`` (None: unfinished or unknown), read together."""
        ...

    async def receipts(self, order_id: str) -> list[Receipt]:
        """Every receipt of the packet, in open order."""
        ...

    async def receipt(self, order_id: str, user_id: str) -> Receipt | None:
        """The user's receipt for the packet, or None."""
        ...

    async def receipts_of(self, keys: Sequence[tuple[str, str]]) -> list[Receipt]:
        """The receipts of the (order id, user id) ``keys`` that exist, read together (any order)."""
        ...

    async def refund(self, order_id: str, now_ms: int) -> Packet | None:
        """Lock the packet; if it is active and ``now_ms >= expires_at``, move its remainder to
        refunded_fen and mark it expired (refund recorded, not yet credited). Returns that packet,
        or None when there is nothing to refund (not expired yet, finished, already done: exactly
        once). A packet that expires with nothing left is marked finished."""
        ...

    async def mark_refunded(self, order_id: str) -> None:
        """Expired -> refunded, once the sender's refund entry is in the ledger."""
        ...

    async def unpaid_refunds(self, limit: int) -> list[Packet]:
        """Expired packets whose refund has not reached the sender yet (the reconciler's scan)."""
        ...

    async def due_refunds(self, now_ms: int, limit: int) -> list[str]:
        """Order ids of active packets whose expiry has passed, oldest first, at most ``limit``."""
        ...

    async def mark_credited(self, receipts: Sequence[tuple[str, str]]) -> None:
        """Record that each (order_id, user_id) receipt's amount reached the receiver's balance,
        in one write per database (a repeat changes nothing)."""
        ...

    async def uncredited(self, opened_before_ms: int, limit: int) -> list[Receipt]:
        """Receipts still pending that were opened before ``opened_before_ms`` (the reconciler)."""
        ...


class LedgerStore(Protocol):
    """Accounts and ledger entries, on the user's shard."""

    async def post(self, entry: LedgerEntry) -> bool:
        """Apply the entry once: False if (kind, ref) was already applied (nothing changes).
        Raises InsufficientBalance when a debit would take the balance below 0 fen."""
        ...

    async def post_many(self, entries: Sequence[LedgerEntry]) -> list[bool]:
        """Apply each entry once, as ``post`` does, in one transaction per database; returns, per
        entry, True if it was applied now. Raises InsufficientBalance when a debit would overdraw
        (then nothing of that database's transaction changes)."""
        ...

    async def balance(self, user_id: str) -> int:
        """The balance in fen (0 for an unknown user)."""
        ...

    async def amount(self, user_id: str, kind: EntryKind, ref: str) -> int | None:
        """The signed amount in fen of ``user_id``'s entry (kind, ref), None if there is none: what
        a repeated ``post`` of that entry finds already applied."""
        ...

    async def entries(self, user_id: str, offset: int, limit: int) -> list[LedgerEntry]:
        """The user's entries, newest first."""
        ...

    async def entries_between(self, kind: EntryKind, start_ms: int, end_ms: int, limit: int) -> list[LedgerEntry]:
        """Every user's entries of ``kind`` created in [start_ms, end_ms) (ms since the epoch, UTC),
        oldest first, at most ``limit``: the reconciler's scan of the send debits."""
        ...


class PreOrderStore(Protocol):
    """Pre-orders awaiting payment, with a TTL (the cache; the DB while the cache is down).

    A pre-order is pending until a pay claims it (paying) or the sender cancels it; the two
    claims are atomic, so a pay and a cancel racing each other never both succeed."""

    async def put(self, order_id: str, body: bytes, expires_at_ms: int, now_ms: int) -> None:
        """Store the pre-order's serialised body, pending until ``expires_at_ms`` (``now_ms``: the
        current time, so the store may drop what has expired)."""
        ...

    async def get(self, order_id: str, now_ms: int) -> bytes | None:
        """The body of a pending pre-order before its expiry, or of one being paid; else None.
        Raises Degraded when the part of the store that may hold it is down."""
        ...

    async def get_many(self, order_ids: Sequence[str], now_ms: int) -> list[bytes | None]:
        """What ``get`` answers for each of ``order_ids``, in their order, read together (one round
        trip per part of the store, not one per pre-order). Raises Degraded when the part of the
        store that may hold one of them is down."""
        ...

    async def claim_for_pay(self, order_id: str, now_ms: int) -> bytes | None:
        """Mark the pre-order paying (from pending before its expiry, or already paying: a
        retried pay) and return its body; None if it is unknown, lapsed or cancelled. Raises
        Degraded when the part of the store that may hold it is down."""
        ...

    async def release(self, order_id: str) -> None:
        """paying -> pending: a pay that moved no money (insufficient balance) gives its claim back."""
        ...

    async def cancel(self, order_id: str, now_ms: int) -> bool:
        """Remove the pre-order if it is still pending and not lapsed; False otherwise (a pay
        has claimed it, or it is gone)."""
        ...

    async def delete(self, order_id: str) -> bool:
        """Remove the pre-order once its packet is active; False if it was not there."""
        ...


class GroupStore(Protocol):
    """Groups and their members."""

    async def create(self, group_id: str, creator_id: str, members: Sequence[str], now_ms: int) -> None:
        """Create the group with ``members`` (the creator included)."""
        ...

    async def add_members(self, group_id: str, members: Sequence[str]) -> int:
        """Add members (idempotent); returns how many were new."""
        ...

    async def remove_member(self, group_id: str, user_id: str) -> bool:
        """Remove one member; False if they were not in the group."""
        ...

    async def creator(self, group_id: str) -> str | None:
        """The creator's user id, or None for an unknown group."""
        ...

    async def is_member(self, group_id: str, user_id: str) -> bool:
        """Whether ``user_id`` is a member of ``group_id`` now."""
        ...

    def held_member(self, group_id: str, user_id: str) -> bool | None:
        """Whether ``user_id`` is a member of ``group_id``, from this process's memory alone (no
        I/O, never raises); None when the store holds no copy of the group's members (then
        ``is_member``)."""
        ...

    async def members(self, group_id: str) -> list[str]:
        """Every member, sorted."""
        ...

    async def of_member(self, user_id: str, offset: int, limit: int) -> list[tuple[str, str]]:
        """(group_id, creator_id) of the groups ``user_id`` is a member of, by group id, skipping
        the first ``offset``, at most ``limit``."""
        ...


class SequenceSource(Protocol):
    """Order-id sequence numbers: (source, sequence) unique per region and day (docs/architecture.md section 4)."""

    async def next(self, region: int, yymmdd: int) -> tuple[int, int]:
        """The next (source, sequence) for ``region`` on the business day ``yymmdd``."""
        ...


class Queue(Protocol):
    """A reliable queue: messages stay until acked; unacked ones come back after a lease."""

    async def publish(self, messages: Sequence[tuple[str, bytes]]) -> None:
        """Append each (stream, body) message, all or none."""
        ...

    async def claim(self, stream: str, count: int, lease_ms: int, now_ms: int) -> list[tuple[int, bytes]]:
        """Up to ``count`` (id, body) messages nobody holds, leased for ``lease_ms``."""
        ...

    async def ack(self, stream: str, *message_ids: int) -> None:
        """Remove handled messages (any number, in one write; an unknown id is ignored)."""
        ...

    async def depth(self, stream: str) -> int:
        """Messages in ``stream`` not acked yet (held or not)."""
        ...


@dataclass(frozen=True, slots=True)
class ListItem:
    """A row of a user's sent or received list: amounts in fen, time in ms (UTC)."""

    order_id: str
    amount_fen: int
    created_at_ms: int
    best_luck: bool


@dataclass(frozen=True, slots=True)
class ListRow:
    """A row to record in ``user_id``'s list: ``direction`` "sent" or "received", fen, ms (UTC)."""

    user_id: str
    direction: Direction
    order_id: str
    amount_fen: int
    created_at_ms: int


class UserListStore(Protocol):
    """Sent and received lists on the user's shard, written from the lists queue."""

    async def write(self, rows: Sequence[ListRow], best_luck: Sequence[tuple[str, str]]) -> None:
        """Record each row once (a repeat changes nothing), then flag each (user_id, order_id)
        received row as best luck (one not recorded yet stays unflagged); one write per database."""
        ...

    async def page(
        self, user_id: str, direction: Direction, start_ms: int, end_ms: int, offset: int, limit: int
    ) -> list[ListItem]:
        """Rows created in [start_ms, end_ms), newest first."""
        ...

    async def summary(self, user_id: str, direction: Direction, start_ms: int, end_ms: int) -> tuple[int, int, int]:
        """(count, total fen, best-luck count) of the rows in [start_ms, end_ms)."""
        ...

    async def recorded(self, keys: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str, str], bool]:
        """Of the (user_id, direction, order_id) ``keys``, those recorded, each with its best-luck
        flag (the reconciler's check of what the lists queue lost)."""
        ...


class ListScans(Protocol):
    """The reconciler's scans for the list rows a lost lists queue would have carried (docs/architecture.md
    section 10: queue down at open); times in ms since the epoch (UTC), oldest first."""

    async def opened_between(self, start_ms: int, end_ms: int, limit: int) -> list[Receipt]:
        """Receipts opened in [start_ms, end_ms), at most ``limit``."""
        ...

    async def paid_between(self, start_ms: int, end_ms: int, expiry_ms: int, limit: int) -> list[Packet]:
        """Packets paid in [start_ms, end_ms) (paid at expires_at - ``expiry_ms``), at most ``limit``."""
        ...


class ProfileStore(Protocol):
    """The non-critical store (docs/architecture.md section 5): packets' greetings and users'
    nicknames and avatar URLs; Redis in production, a SQLite side table embedded. Every method
    raises ``hongbao.core.breaker.BreakerOpen`` while the store is down: callers fall back to
    defaults (hongbao.core.services.profiles)."""

    async def set_greeting(self, order_id: str, greeting: str) -> None:
        """Keep the packet's greeting (at least as long as the packet can be opened)."""
        ...

    async def greeting(self, order_id: str) -> str | None:
        """The packet's greeting, or None."""
        ...

    async def set_profile(self, user_id: str, nickname: str, avatar_url: str) -> None:
        """Keep the user's nickname and avatar URL."""
        ...

    async def profiles(self, user_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """(nickname, avatar_url) of each of ``user_ids`` that set a profile (the others are
        left out), in one round trip."""
        ...


class Flags(Protocol):
    """Run-time switches shared by every worker and node (e.g. the crediting mode)."""

    async def get(self, name: str) -> str | None:
        """The flag's value, or None when unset."""
        ...

    async def set(self, name: str, value: str) -> None:
        """Set the flag for everyone; workers pick it up within their sync interval."""
        ...


class Leases(Protocol):
    """Leases on the periodic jobs, so that one worker of every node sharing them runs each job at
    a time and the idle load on the databases does not grow with workers or nodes."""

    async def hold(self, name: str, ttl_ms: int) -> bool:
        """True when this worker holds lease ``name`` for the next ``ttl_ms``: taken when free or
        lapsed, renewed when already its own. True as well when the lease cannot be looked at
        (its store is down): every job is safe on any number of workers, and must go on."""
        ...


class ExpiryIndex(Protocol):
    """The active packets by expiry, so that the refund job finds the expired ones without
    scanning every day table of every database (docs/architecture.md section 6: "delay index")."""

    async def add(self, order_id: str, expires_at_ms: int) -> None:
        """Index an activated packet. Never raises: one the index missed is found by the
        database scan the refund job still runs now and then."""
        ...

    async def due(self, now_ms: int, limit: int) -> list[str] | None:
        """At most ``limit`` indexed order ids expired at ``now_ms`` (ms, UTC), earliest first; None
        when the index cannot answer (not kept, or its store is down): scan the database."""
        ...

    async def remove(self, order_ids: Sequence[str]) -> None:
        """Drop settled packets from the index. Never raises."""
        ...


@dataclass(frozen=True, slots=True)
class Ports:
    """The adapters one backend's services run on."""

    packets: PacketStore
    ledger: LedgerStore
    preorders: PreOrderStore
    groups: GroupStore
    sequence: SequenceSource
    queue: Queue
    clock: Clock
    lists: UserListStore
    profiles: ProfileStore
    flags: Flags
    expiries: ExpiryIndex


class NodeRegistry(Protocol):
    """The live nodes of one region (docs/architecture.md section 9): each node's URL with the
    moment its liveness lapses, renewed by a beat every second."""

    async def beat(self, node_url: str, ttl_ms: int, now_ms: int) -> list[str]:
        """Mark ``node_url`` alive until ``now_ms + ttl_ms`` (ms, UTC), forget nodes lapsed at
        ``now_ms``, and return the URLs of the nodes alive at ``now_ms``, sorted. Raises when the
        registry's store does not answer (BreakerOpen while it is known down)."""
        ...

    async def leave(self, node_url: str) -> None:
        """Remove ``node_url`` at once (a graceful stop): the others stop forwarding to it."""
        ...


class SendRate(Protocol):
    """A region's send rate (docs/architecture.md section 9: flow control), shared by its nodes."""

    async def take(self) -> float:
        """0.0 when one more send may go now (its token taken), else the seconds until one may
        (nothing taken). Never raises: while its store is down every send may go (each node's
        own rate still holds)."""
        ...
