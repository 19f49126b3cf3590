"""The money flow of DESIGN.md section 6 over the ports: send, pay, cancel, grab, open, credit
and refund (details, lists and the bill are read in hongbao.core.views).

The service owns no storage: every state lives behind the ports (hongbao.core.ports), so the
embedded and production backends run the same code. Every step that moves money is idempotent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import hongbao_native
import orjson
from hongbao.core import errors, events
from hongbao.core.batching import OpenBatcher
from hongbao.core.breaker import BreakerOpen
from hongbao.core.clock import Clock
from hongbao.core.events import Event, Notifier, NullNotifier
from hongbao.core.faults import NO_FAULTS, Faults
from hongbao.core.grab_state import Lookup, PacketState, SharedGrabState
from hongbao.core.packet import Kind, Packet, Receipt, Status
from hongbao.core.ports import (
    Draw,
    Flags,
    GroupStore,
    LedgerEntry,
    LedgerStore,
    ListRow,
    ListScans,
    OpenResult,
    PacketStore,
    PreOrderStore,
    ProfileStore,
    Queue,
    SequenceSource,
    UserListStore,
)
from hongbao.core.rules import Limits, validate_send
from hongbao.core.soon import Later, Soon
from hongbao.core.times import business_yymmdd
from hongbao.core.ttl_cache import TtlCache
from hongbao.core.view_cache import ViewCache, details_entry, lists_entry

log = logging.getLogger("hongbao.service")

CREDIT_STREAM = "credit"
LISTS_STREAM = "lists"
GRAB_CACHE_TTL_MS = 1000
OPENED_CACHE_TTL_MS = 600_000
LISTS_CURSOR = "lists_repaired_until"  # the flag: list rows are repaired up to this time (ms)
LISTS_LOOKBACK_MS = 3600_000  # how far back the first (or a long-stalled) list repair looks
PAYS_CURSOR = "pays_reconciled_until"  # the flag: send debits are settled up to this time (ms)
PAYS_LOOKBACK_MS = 24 * 3600_000  # how far back the first (or a long-stalled) pay reconciliation looks
GRAB_OK: dict[str, object] = {"status": "ok"}  # grab's common answer, shared: never mutate it
#: An open's refusal -> (its error, its message about order id {}), worded as grab's.
_REFUSALS: dict[str, tuple[type[errors.HongbaoError], str]] = {
    "finished": (errors.Finished, "packet {} is finished"),
    "expired": (errors.Expired, "packet {} has expired"),
    "not_found": (errors.NotFound, "no packet {}"),
}


class CreditingMode(StrEnum):
    """When a receipt's amount reaches the receiver's balance (DESIGN.md section 6)."""

    REALTIME_LARGE = "realtime_large"  # amounts >= the threshold in the request, the rest queued
    QUEUED = "queued"  # every credit through the queue
    DEFERRED = "deferred"  # none in the request path: the reconciler credits from the receipts


@dataclass(frozen=True, slots=True)
class Ports:
    """The adapters one service instance runs on."""

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


def check_order_id(order_id: str) -> str:
    """Return ``order_id`` if it decodes (region, date, source, Damm check digit); else BadOrderId."""
    try:
        hongbao_native.decode_order_id(order_id)
    except (ValueError, TypeError) as exc:
        raise errors.BadOrderId(f"bad order id: {exc}") from None
    return order_id


class PacketService:
    """send -> pay -> grab -> open -> credit -> refund over ``ports``.

    ``admission`` is the host's shared AdmissionTable and ``max_in_db`` the number of open
    transactions per packet allowed in the database at once (K); concurrent opens in this worker
    are batched (hongbao.core.batching). ``draw`` computes a lucky share (native split_lucky by
    default); ``region`` is 1 (north) or 2 (south); ``realtime_threshold_fen`` splits the
    realtime_large crediting mode. ``notifier`` hears the red-packet events (hongbao.core.events;
    nobody by default): handing an event over never fails or slows a money flow. ``grab_state``:
    the grab filter's shared level (hongbao.core.grab_state; Redis in production), kept up to date
    after every pay, open batch and refund; None: memory, then the database. ``views``: the read
    caches of details and lists (hongbao.core.view_cache; None: every read from the database),
    told after every write they show; ``list_scans``: lets the reconciler write the list rows a
    lost lists queue carried (None: not needed, the queue cannot be lost).
    """

    __slots__ = (
        "ports",
        "limits",
        "batcher",
        "draw",
        "region",
        "crediting_mode",
        "realtime_threshold_fen",
        "notifier",
        "grab_state",
        "views",
        "list_scans",
        "faults",
        "_packets",
        "_members",
        "_opened",
    )

    def __init__(
        self,
        ports: Ports,
        limits: Limits,
        admission: hongbao_native.AdmissionTable,
        *,
        max_in_db: int = 2,
        draw: Draw = hongbao_native.split_lucky,
        region: int = 1,
        crediting_mode: CreditingMode = CreditingMode.REALTIME_LARGE,
        realtime_threshold_fen: int = 2000,
        grab_state: SharedGrabState | None = None,
        views: ViewCache | None = None,
        list_scans: ListScans | None = None,
        faults: Faults = NO_FAULTS,
    ) -> None:
        self.ports, self.limits, self.draw, self.grab_state = ports, limits, draw, grab_state
        self.views, self.list_scans, self.faults = views, list_scans, faults
        self.batcher = OpenBatcher(self.open_batch, admission, max_in_db=max_in_db)
        self.region, self.crediting_mode, self.realtime_threshold_fen = region, crediting_mode, realtime_threshold_fen
        self.notifier: Notifier = NullNotifier()
        # The grab filter's first cache level: packet states and memberships for a second, and the
        # amounts this worker has seen opened (an open's amount never changes).
        self._packets: TtlCache[str, PacketState] = TtlCache(GRAB_CACHE_TTL_MS)
        self._members: TtlCache[tuple[str, str], bool] = TtlCache(GRAB_CACHE_TTL_MS)
        self._opened: TtlCache[tuple[str, str], int] = TtlCache(OPENED_CACHE_TTL_MS)

    async def open_batch(self, order_id: str, user_ids: Sequence[str]) -> list[OpenResult]:
        """The batcher's transaction: open for ``user_ids`` at the clock's current time, then queue
        the batch's follow-ups (list rows, best luck, queued credits) in one queue write, and
        announce the packet finished when this batch took its last share (DESIGN.md section 6:
        the push to the group goes with the open, not after the lists queue)."""
        results = await self.ports.packets.open_batch(order_id, user_ids, self.ports.clock.now_ms(), self.draw)
        self.faults.point("open_committed")
        messages: list[tuple[str, dict[str, object]]] = []
        for result in results:
            receipt = result.receipt
            if receipt is None or result.repeat:
                continue
            messages.append(
                (
                    LISTS_STREAM,
                    {
                        "t": "received",
                        "u": receipt.user_id,
                        "o": order_id,
                        "a": receipt.amount_fen,
                        "c": receipt.opened_at_ms,
                    },
                )
            )
            if result.last:
                messages.append((LISTS_STREAM, {"t": "best", "o": order_id}))
            if not self._credit_in_request(receipt) and self.crediting_mode is not CreditingMode.DEFERRED:
                messages.append((CREDIT_STREAM, {"t": "receipt", "o": order_id, "u": receipt.user_id}))
        await self._publish(messages)
        updates = [self.grab_state.opened(order_id, results)] if self.grab_state is not None else []
        if any(r.refusal is not None or not r.repeat for r in results):  # the details show the batch
            updates.append(self._changed([details_entry(order_id)]))
        await asyncio.gather(*updates)  # one Redis pipeline
        if any(result.last for result in results):
            await self._announce_finished(order_id)
        return results

    def _credit_in_request(self, receipt: Receipt) -> bool:
        return self.crediting_mode is CreditingMode.REALTIME_LARGE and receipt.amount_fen >= self.realtime_threshold_fen

    async def topup(self, user_id: str, amount_fen: int, key: str) -> bool:
        """Add ``amount_fen`` to the balance once per idempotency ``key``; False on a repeat."""
        return await self.ports.ledger.post(LedgerEntry(user_id, "topup", key, amount_fen, self.ports.clock.now_ms()))

    async def send(self, sender_id: str, body: dict[str, object]) -> tuple[str, int]:
        """Validate, assign an order id, store the pre-order; returns (order_id, pay_by_ms).

        Raises InvalidAmount/InvalidCount/InvalidRequest, NotMember for a group the sender is not in."""
        spec = validate_send(body, sender_id, self.limits)
        if spec.group_id is not None and not await self.ports.groups.is_member(spec.group_id, sender_id):
            raise errors.NotMember(f"{sender_id} is not a member of group {spec.group_id}")
        now = self.ports.clock.now_ms()
        yymmdd = business_yymmdd(now)
        source, sequence = await self.ports.sequence.next(self.region, yymmdd)
        order_id = hongbao_native.encode_order_id(self.region, yymmdd, source, sequence)
        pay_by = now + self.limits.pay_ttl_ms
        preorder = {
            "sender_id": sender_id,
            "kind": spec.kind.value,
            "count": spec.count,
            "total_fen": spec.total_fen,
            "group_id": spec.group_id,
            "receiver_id": spec.receiver_id,
            "greeting": spec.greeting,
            "created_at": now,
            "pay_by": pay_by,
        }
        await self.ports.preorders.put(order_id, orjson.dumps(preorder), pay_by, now)
        return order_id, pay_by

    async def pay(self, sender_id: str, order_id: str) -> Packet:
        """Debit the sender and activate the packet; a repeat (or a retry of a half-done pay)
        completes it and changes nothing else: a packet whose pre-order is still there was cut
        before its follow-ups, which the repeat does. Raises NotFound (unknown or lapsed
        pre-order), Forbidden (not the sender), InsufficientBalance."""
        check_order_id(order_id)
        now = self.ports.clock.now_ms()
        packet = await self.ports.packets.get_packet(order_id)
        if packet is not None:
            if packet.sender_id != sender_id:
                raise errors.Forbidden("only the sender can pay for a packet")
            raw = await self.ports.preorders.get(order_id, now)
            if raw is not None and packet.status is Status.ACTIVE:
                await self._follow_up(packet, orjson.loads(raw)["greeting"], now)
            return packet
        raw = await self.ports.preorders.get(order_id, now)
        if raw is not None and orjson.loads(raw)["sender_id"] != sender_id:
            raise errors.Forbidden("only the sender can pay for a packet")
        raw = await self.ports.preorders.claim_for_pay(order_id, now)  # from here on, no cancel
        if raw is None:
            packet = await self.ports.packets.get_packet(order_id)  # a racing pay of the same packet just finished
            if packet is not None and packet.sender_id == sender_id:
                return packet
            raise errors.NotFound(f"no pre-order {order_id} awaiting payment (unknown, cancelled or past pay_by)")
        pre = orjson.loads(raw)
        try:
            await self.ports.ledger.post(LedgerEntry(sender_id, "send", order_id, -pre["total_fen"], now))
        except errors.InsufficientBalance:
            await self.ports.preorders.release(order_id)  # nothing moved: the sender may cancel again
            raise
        self.faults.point("pay_debited")
        packet = _active_packet(order_id, pre, now + self.limits.expiry_ms)
        if await self.ports.packets.insert_packet(packet):
            self.faults.point("pay_inserted")
            await self._follow_up(packet, pre["greeting"], now)
        stored = await self.ports.packets.get_packet(order_id)  # a racing pay's (or the reconciler's) packet
        return stored if stored is not None else packet

    async def _follow_up(self, packet: Packet, greeting: str, now_ms: int) -> None:
        """What follows a packet's activation (by a pay, a repeated pay or the reconciler): the grab
        state, the greeting, the push to its audience, the sender's list row; then the pre-order
        goes, which marks these done (a pay cut before that point is followed up again)."""
        if self.grab_state is not None:
            await self.grab_state.put(packet, now_ms)
        await self._note(greeting, packet.order_id)
        self._notify(events.packet_received(packet, greeting))
        paid_at = packet.expires_at_ms - self.limits.expiry_ms
        await self._publish(
            [
                (
                    LISTS_STREAM,
                    {"t": "sent", "u": packet.sender_id, "o": packet.order_id, "a": packet.total_fen, "c": paid_at},
                )
            ]
        )
        await self.ports.preorders.delete(packet.order_id)

    async def cancel(self, sender_id: str, order_id: str) -> None:
        """The sender drops an unpaid pre-order. Raises NotFound, Forbidden, or Conflict (409)
        once a pay has claimed it (a pay and a cancel never both succeed)."""
        check_order_id(order_id)
        if await self.ports.packets.get_packet(order_id) is not None:
            raise errors.Conflict("the packet is already paid and cannot be cancelled")
        now = self.ports.clock.now_ms()
        raw = await self.ports.preorders.get(order_id, now)
        if raw is None:
            if await self.ports.packets.get_packet(order_id) is not None:  # a pay completed since the first look
                raise errors.Conflict("the packet is already paid and cannot be cancelled")
            raise errors.NotFound(f"no pre-order {order_id}")
        if orjson.loads(raw)["sender_id"] != sender_id:
            raise errors.Forbidden("only the sender can cancel a pre-order")
        if not await self.ports.preorders.cancel(order_id, now):
            raise errors.Conflict("the packet is being paid and cannot be cancelled")

    async def visible_packet(self, user_id: str, order_id: str, *, reading: bool = False) -> Packet:
        """The packet if ``user_id`` may see it (a member of its group, or the sender or receiver
        of an exclusive packet; when ``reading`` its details, also whoever ``took_part`` and has
        left the group since). A pre-order answers NotPaid to the same audience only. Raises
        BadOrderId, NotFound, NotPaid, NotMember."""
        check_order_id(order_id)
        packet = await self.ports.packets.get_packet(order_id)
        if packet is not None:
            await self._audience(user_id, order_id, packet.sender_id, packet.receiver_id, packet.group_id, reading)
            return packet
        raw = await self.ports.preorders.get(order_id, self.ports.clock.now_ms())
        if raw is None:
            raise errors.NotFound(f"no packet {order_id}")
        pre = orjson.loads(raw)  # a non-member learns no more of a pre-order than of a packet
        await self._audience(user_id, order_id, pre["sender_id"], pre["receiver_id"], pre["group_id"], reading)
        raise errors.NotPaid(f"packet {order_id} is awaiting payment")

    async def _audience(
        self, user_id: str, order_id: str, sender_id: str, receiver_id: str | None, group_id: str | None, reading: bool
    ) -> None:
        """Raise NotMember unless ``user_id`` may see packet ``order_id``: its sender or receiver
        when it has no group, else a member of ``group_id`` (or, ``reading``, one who took part)."""
        if group_id is None:
            if user_id not in (sender_id, receiver_id):
                raise errors.NotMember(f"packet {order_id} is for someone else")
        elif not await self.ports.groups.is_member(group_id, user_id):
            if not (reading and await self.took_part(order_id, sender_id, user_id)):
                raise errors.NotMember(f"{user_id} is not a member of the packet's group")

    async def took_part(self, order_id: str, sender_id: str, user_id: str) -> bool:
        """Whether ``user_id`` sent packet ``order_id`` (of ``sender_id``) or opened a share of it:
        they keep reading its details after leaving its group (their own money is in it)."""
        return user_id == sender_id or await self.ports.packets.receipt(order_id, user_id) is not None

    def grab_cached(self, user_id: str, order_id: str) -> dict[str, object] | None:
        """grab's answer from this worker's caches alone, with no I/O; None when the answer needs
        the database (then await ``grab``). Raises as ``grab`` does."""
        now_ms = self.ports.clock.now_ms()  # one reading for every cache (a request takes microseconds)
        amount = self._opened.get((order_id, user_id), now_ms)
        if amount is not None:
            return {"status": "opened", "amount_fen": amount}
        packet = self._packets.get(order_id, now_ms)
        if packet is None:  # the caches hold checked order ids only: check this one before the database
            check_order_id(order_id)
            return None
        if packet.group_id is not None:
            member = self._members.get((packet.group_id, user_id), now_ms)
            if member is None:
                return None
            if not member:
                raise errors.NotMember(f"{user_id} is not a member of the packet's group")
        if packet.remaining_count < packet.count:  # someone opened: maybe this user, in another worker
            return None
        return self._grab_verdict(packet, user_id, now_ms)

    async def grab(self, user_id: str, order_id: str) -> dict[str, object]:
        """Advisory admission check from the caches: {"status": "ok"}, or {"status": "opened",
        "amount_fen"} for a user who already opened. Raises Finished/Expired (410), NotFound,
        NotPaid, NotMember, Degraded (503: the shared level is down and the database checks are at
        their limit). A packet's state may lag here; open re-checks everything in its transaction
        (DESIGN.md section 6: grab is advisory)."""
        cached = self.grab_cached(user_id, order_id)
        if cached is not None:
            return cached
        now_ms = self.ports.clock.now_ms()
        state, amount, complete = await self._grab_state(user_id, order_id, now_ms)
        answer = self._grab_decided(user_id, state, amount, complete, now_ms)
        if answer is not None:
            return answer
        if state.group_id is not None and self._members.get((state.group_id, user_id), now_ms) is None:
            member = await self.ports.groups.is_member(state.group_id, user_id)
            self._members.put((state.group_id, user_id), member, now_ms)
            if not member:
                raise errors.NotMember(f"{user_id} is not a member of the packet's group")
        if amount is None and not complete:
            receipt = await self.ports.packets.receipt(order_id, user_id)
            amount = None if receipt is None else receipt.amount_fen
        answer = self._grab_decided(user_id, state, amount, True, now_ms, member=True)
        assert answer is not None  # membership known and the amount certain: always decided
        return answer

    def grab_soon(self, user_id: str, order_id: str) -> Soon[dict[str, object]] | None:
        """``grab`` for a packet not in this worker's caches, without a coroutine, when the shared
        level can answer at once (hongbao.core.soon); None when only ``grab`` can. Call it after
        ``grab_cached`` answered None (which checked the order id). Its result raises as ``grab``
        does, and Later where ``grab`` would have gone to the database."""
        shared = self.grab_state
        soon = None if shared is None else shared.lookup_soon(order_id, user_id)
        if soon is None:
            return None
        now_ms = self.ports.clock.now_ms()
        return soon.then(lambda found: self._grab_found(user_id, order_id, found, now_ms))

    def _grab_found(self, user_id: str, order_id: str, found: Lookup | None, now_ms: int) -> dict[str, object]:
        if found is None:
            raise Later(f"packet {order_id} is not in the shared level")
        self._packets.put(order_id, found.state, now_ms)
        answer = self._grab_decided(user_id, found.state, found.amount_fen, found.complete, now_ms)
        if answer is None:
            raise Later(f"grab of {order_id} by {user_id} needs the database")
        return answer

    def _grab_decided(
        self, user_id: str, state: PacketState, amount: int | None, complete: bool, now_ms: int, *, member: bool = False
    ) -> dict[str, object] | None:
        """grab's answer from ``state`` and what ``user_id`` opened (``amount``, certain when
        ``complete``), with membership from this worker's cache unless ``member`` (known); None
        when the database must be asked (membership not cached, or an amount not certain)."""
        if state.group_id is not None and not member:
            cached = self._members.get((state.group_id, user_id), now_ms)
            if cached is None:
                return None
            if not cached:
                raise errors.NotMember(f"{user_id} is not a member of the packet's group")
        if amount is not None:
            self._opened.put((state.order_id, user_id), amount, now_ms)
            return {"status": "opened", "amount_fen": amount}
        if not complete:
            return None
        return self._grab_verdict(state, user_id, now_ms)

    async def _grab_state(self, user_id: str, order_id: str, now_ms: int) -> tuple[PacketState, int | None, bool]:
        """(state, the fen ``user_id`` opened or None, whether that None is certain): from the
        shared level; while it is down from this worker's memory; else from the database (which
        refills the shared level after a miss). Raises as ``visible_packet``, and Degraded."""
        shared = self.grab_state
        if shared is not None:
            try:
                found = await shared.lookup(order_id, user_id)
            except BreakerOpen:  # down, and a database check is allowed
                shared = None
            else:
                if found is not None:
                    self._packets.put(order_id, found.state, now_ms)
                    return found.state, found.amount_fen, found.complete
        state = self._packets.get(order_id, now_ms) if shared is None else None
        if state is None:
            packet = await self.visible_packet(user_id, order_id)
            if shared is not None:
                await shared.put(packet, now_ms)
            state = PacketState.of(packet)
            self._packets.put(order_id, state, now_ms)
            if packet.group_id is not None:
                self._members.put((packet.group_id, user_id), True, now_ms)
        return state, None, state.remaining_count == state.count

    def _grab_verdict(self, packet: PacketState, user_id: str, now_ms: int) -> dict[str, object]:
        """GRAB_OK for a packet ``user_id`` may open now (and has not opened); raises NotMember
        (an exclusive packet for someone else), Finished or Expired."""
        order_id = packet.order_id
        if packet.kind is Kind.EXCLUSIVE and user_id != packet.receiver_id:
            raise errors.NotMember(f"packet {order_id} is for someone else")
        if packet.status is Status.FINISHED or packet.remaining_count == 0:
            raise errors.Finished(f"packet {order_id} is finished")
        if packet.status is not Status.ACTIVE or now_ms >= packet.expires_at_ms:
            raise errors.Expired(f"packet {order_id} has expired")
        return GRAB_OK

    async def open(self, user_id: str, order_id: str) -> tuple[Receipt, bool]:
        """Open the packet for ``user_id``: (receipt, repeat). A repeat returns the first amount.
        Raises Finished/Expired (410), NotFound, NotPaid, NotMember, Busy (429)."""
        packet = await self.visible_packet(user_id, order_id)
        if packet.kind is Kind.EXCLUSIVE and user_id != packet.receiver_id:
            raise errors.NotMember(f"packet {order_id} is for someone else")
        result = await self.batcher.open(order_id, user_id)
        if result.receipt is None:
            self._packets.drop(order_id)
            error, message = _REFUSALS.get(
                result.refusal or "", (errors.HongbaoError, f"packet {{}}: {result.refusal}")
            )
            raise error(message.format(order_id))
        self._opened.put((order_id, user_id), result.receipt.amount_fen, self.ports.clock.now_ms())
        self._packets.drop(order_id)
        if not result.repeat:
            self._notify(events.opened(result.receipt))
        if not result.repeat and self._credit_in_request(result.receipt):
            try:
                await self.credit(order_id, user_id)
            except Exception:  # the receipt is committed: the reconciler credits it later
                log.exception("realtime credit of %s/%s failed; left to the reconciler", order_id, user_id)
        return result.receipt, result.repeat

    async def set_crediting_mode(self, mode: CreditingMode) -> None:
        """Switch the crediting mode for every worker (they sync within their interval) and here now."""
        await self.ports.flags.set("crediting_mode", mode.value)
        self.crediting_mode = mode

    async def sync_flags(self) -> None:
        """Pick up run-time switches made by other workers or nodes."""
        mode = await self.ports.flags.get("crediting_mode")
        if mode is not None:
            self.crediting_mode = CreditingMode(mode)

    async def _note(self, greeting: str, order_id: str) -> None:
        if greeting:
            try:
                await self.ports.profiles.set_greeting(order_id, greeting)
            except Exception:  # non-critical: details fall back to the default greeting
                log.exception("could not keep the greeting of %s", order_id)

    def _notify(self, event: Event) -> None:
        try:
            self.notifier.notify(event)
        except Exception:  # push is never a reason for a money flow to fail
            log.exception("the notifier failed on event %s", event.name)

    async def _announce_finished(self, order_id: str) -> None:
        """Notify ``finished`` with best luck (user and fen) for a packet whose last share went."""
        try:
            best = await self.ports.packets.best_luck(order_id)
            packet = await self.ports.packets.get_packet(order_id)
            receipt = None if best is None else await self.ports.packets.receipt(order_id, best)
        except Exception:  # the packet is finished all the same; only its push is lost
            log.exception("could not read packet %s for its finished event", order_id)
            return
        if packet is not None and receipt is not None:
            self._notify(events.finished(packet, receipt.user_id, receipt.amount_fen))

    async def _publish(self, messages: list[tuple[str, dict[str, object]]]) -> None:
        if not messages:
            return
        try:
            await self.ports.queue.publish([(stream, orjson.dumps(m)) for stream, m in messages])
        except BreakerOpen:  # the queue is down: its breaker logged it and counts what is skipped
            pass  # money is safe: the reconciler credits pending receipts from the DB (list rows are lost)
        except Exception:  # money is safe: the reconciler credits pending receipts from the DB
            log.exception(
                "could not queue %d follow-up message(s); credits fall to the reconciler, list rows are lost",
                len(messages),
            )

    async def credit(self, order_id: str, user_id: str) -> bool:
        """Credit one receipt to its receiver, once (the receipt is the ledger ref); False if
        there is no such receipt. Safe to repeat at any point."""
        receipt = await self.ports.packets.receipt(order_id, user_id)
        if receipt is None:
            return False
        await self._credit([receipt])
        return True

    async def _credit(self, receipts: Sequence[Receipt]) -> None:
        """Credit each receipt not marked credited: every ledger entry in one write (ref
        ``order_id:user_id``, so an entry already there is not applied again), then every mark in
        one. Ledger before mark: a stop between the two leaves a pending receipt whose next credit
        finds its entry and only marks it (M-23)."""
        due = [r for r in receipts if not r.credited]
        if not due:
            return
        now = self.ports.clock.now_ms()
        applied = await self.ports.ledger.post_many(
            [LedgerEntry(r.user_id, "credit", f"{r.order_id}:{r.user_id}", r.amount_fen, now) for r in due]
        )
        for receipt, new in zip(due, applied, strict=True):
            if new:
                self._notify(events.credited(receipt.order_id, receipt.user_id, receipt.amount_fen))
        await self.ports.packets.mark_credited([(r.order_id, r.user_id) for r in due])

    async def refund_due(self, limit: int = 500) -> int:
        """Record and pay the refund of every packet past expiry; returns how many were refunded
        now. Exactly once per packet however many workers run it at the same time."""
        now = self.ports.clock.now_ms()
        done = 0
        for order_id in await self.ports.packets.due_refunds(now, limit):
            packet = await self.ports.packets.refund(order_id, now)
            if packet is not None:
                if self.grab_state is not None:
                    await self.grab_state.ended(order_id, packet.status)
                await self._changed([details_entry(order_id)])
                self._notify(events.expired(packet))
                await self.pay_refund(packet)
                done += 1
        return done

    async def pay_refund(self, packet: Packet) -> None:
        """Credit an expired packet's refunded fen to its sender (ref = order id), then mark it refunded."""
        entry = LedgerEntry(packet.sender_id, "refund", packet.order_id, packet.refunded_fen, self.ports.clock.now_ms())
        if await self.ports.ledger.post(entry):
            self._notify(events.refunded(packet))
        await self.ports.packets.mark_refunded(packet.order_id)
        await self._changed([details_entry(packet.order_id)])

    async def drain_credits(self, max_messages: int = 100, lease_ms: int = 30_000) -> int:
        """Credit what the queue holds: one claim of up to ``max_messages``, their receipts
        credited together (see ``_credit``), then one ack of them all; returns how many messages."""
        messages = await self.ports.queue.claim(CREDIT_STREAM, max_messages, lease_ms, self.ports.clock.now_ms())
        if not messages:
            return 0
        keys = dict.fromkeys((m["o"], m["u"]) for m in (orjson.loads(body) for _, body in messages))
        found = await asyncio.gather(*(self.ports.packets.receipt(order_id, user_id) for order_id, user_id in keys))
        await self._credit([r for r in found if r is not None])
        await self.ports.queue.ack(CREDIT_STREAM, *(message_id for message_id, _ in messages))
        return len(messages)

    async def drain_lists(self, max_messages: int = 100, lease_ms: int = 30_000) -> int:
        """Write queued sent/received rows and best-luck flags to the user lists: one claim of up
        to ``max_messages``, one write of them all (a second only in the race below), one ack;
        returns how many messages."""
        messages = await self.ports.queue.claim(LISTS_STREAM, max_messages, lease_ms, self.ports.clock.now_ms())
        if not messages:
            return 0
        bodies = [orjson.loads(body) for _, body in messages]
        rows = [ListRow(m["u"], m["t"], m["o"], m["a"], m["c"]) for m in bodies if m["t"] != "best"]
        bests = await self._best_lucks({m["o"] for m in bodies})
        flags = [(best, m["o"]) for m in bodies if m["t"] == "best" and (best := bests[m["o"]]) is not None]
        await self.ports.lists.write(rows, [*flags, *_best_rows(rows, bests)])
        # Batches publish after their own transaction, so a packet still open when read above may
        # have finished since and its "best" been drained elsewhere before these rows existed (the
        # flag found nothing): read those packets again now that the rows are in (M-19).
        late = _best_rows(rows, await self._best_lucks({r.order_id for r in rows if bests[r.order_id] is None}))
        if late:
            await self.ports.lists.write([], late)
        await self._changed([lists_entry(u) for u in {*(r.user_id for r in rows), *(u for u, _ in flags)}])
        await self.ports.queue.ack(LISTS_STREAM, *(message_id for message_id, _ in messages))
        return len(messages)

    async def _best_lucks(self, order_ids: set[str]) -> dict[str, str | None]:
        """Each packet's best-luck user (None: not finished)."""
        ordered = sorted(order_ids)
        return dict(
            zip(ordered, await asyncio.gather(*(self.ports.packets.best_luck(o) for o in ordered)), strict=True)
        )

    async def reconcile(self, window_ms: int, limit: int = 500) -> int:
        """Complete every money movement that spans two shards and was cut between its steps (a
        crash, a restart, a dependency down), once it is ``window_ms`` old; returns how many
        movements it completed. Each step is idempotent, so any number of workers may run it at once:

        - pay: the sender's debit (their shard), then the packet row (the packet's shard), then the
          follow-ups (``reconcile_pays``: a debit with no packet is activated from its claimed
          pre-order, or undone when the pre-order is gone; a packet whose pre-order is still there
          is followed up);
        - open: the receipts (the packet's shard), then each credit: the receiver's ledger entry
          (their shard), then the receipt's mark (receipts still pending are credited here);
        - refund: the refund recorded on the packet (its shard), then the sender's ledger entry,
          then the mark refunded (recorded refunds not yet paid are paid here);
        - the user lists, written from a queue (``repair_lists``)."""
        done = await self.reconcile_pays(window_ms, limit)
        receipts = await self.ports.packets.uncredited(self.ports.clock.now_ms() - window_ms, limit)
        await self._credit(receipts)
        done += len(receipts)
        for packet in await self.ports.packets.unpaid_refunds(limit):
            await self.pay_refund(packet)
            done += 1
        await self.repair_lists(window_ms, 4 * limit)
        return done

    async def reconcile_pays(self, window_ms: int, limit: int = 500) -> int:
        """Settle the pays cut between their steps, for the send debits made since the last run
        (the PAYS_CURSOR flag; at most PAYS_LOOKBACK_MS back) until ``window_ms`` ago, at most
        ``limit``; returns how many it settled. A debit with no packet is activated from its
        pre-order (claimed for that pay) with the expiry counted from the debit; with the pre-order
        gone (a cache that lost it), the pay is undone: the packet is recorded expired with its
        whole total refunded, and the refund is paid at once (ledger entry ``refund`` keyed by the
        order id, exactly once). The packet row's key decides a race with a retried pay: whichever
        inserts first stands, so a pay is never both undone and activated. A packet whose
        pre-order is still there gets the follow-ups its pay did not reach."""
        now = self.ports.clock.now_ms()
        start, end = await self._scan_window(PAYS_CURSOR, window_ms, PAYS_LOOKBACK_MS)
        if start >= end:
            return 0
        debits = await self.ports.ledger.entries_between("send", start, end, limit)
        found = await asyncio.gather(
            *(
                asyncio.gather(self.ports.packets.get_packet(d.ref), self.ports.preorders.get(d.ref, now))
                for d in debits
            )
        )
        settled = 0
        for debit, (packet, raw) in zip(debits, found, strict=True):
            if packet is None:
                settled += await self._settle_pay(debit, raw, now)
            elif raw is not None and packet.status is Status.ACTIVE:
                await self._follow_up(packet, orjson.loads(raw)["greeting"], now)
                settled += 1
        if len(debits) == limit:  # more to do: the next run goes on from the last debit seen
            end = debits[-1].created_at_ms
        await self.ports.flags.set(PAYS_CURSOR, str(end))
        return settled

    async def _settle_pay(self, debit: LedgerEntry, raw: bytes | None, now_ms: int) -> int:
        """Activate (pre-order ``raw``) or undo (None) the pay of send ``debit`` whose packet is
        missing; 1 when this call did it, 0 when a racing pay inserted the packet first."""
        order_id = debit.ref
        if raw is not None:
            pre = orjson.loads(raw)
            packet = _active_packet(order_id, pre, debit.created_at_ms + self.limits.expiry_ms)
        else:
            packet = _undone_packet(order_id, debit)
        if not await self.ports.packets.insert_packet(packet):
            return 0
        if raw is not None:
            log.warning("reconciler: pay of %s was cut after its debit; packet activated", order_id)
            await self._follow_up(packet, pre["greeting"], now_ms)
        else:
            log.warning(
                "reconciler: pay of %s was cut after its debit and its pre-order is gone; %d fen refunded",
                order_id,
                packet.total_fen,
            )
            await self.pay_refund(packet)
        return 1

    async def _scan_window(self, cursor_flag: str, window_ms: int, lookback_ms: int) -> tuple[int, int]:
        """[start, end) of a reconciler scan: from the time in flag ``cursor_flag`` (at most
        ``lookback_ms`` back, and from there when the clock moved back past it) to ``window_ms`` ago."""
        end = self.ports.clock.now_ms() - window_ms
        cursor = int(await self.ports.flags.get(cursor_flag) or 0)
        return (cursor if end - lookback_ms <= cursor <= end else end - lookback_ms), end

    async def repair_lists(self, window_ms: int, limit: int = 2000) -> int:
        """Write the list rows and best-luck flags the lists queue lost (it was down at a pay or an
        open, DESIGN.md section 10) for the receipts opened and packets paid since the last repair
        (the LISTS_CURSOR flag; at most LISTS_LOOKBACK_MS back) until ``window_ms`` ago, at most
        ``limit`` of each; returns how many rows and flags it wrote. Idempotent, on any number of
        workers at once; nothing to do without ``list_scans``."""
        scans = self.list_scans
        if scans is None:
            return 0
        start, end = await self._scan_window(LISTS_CURSOR, window_ms, LISTS_LOOKBACK_MS)
        if start >= end:
            return 0
        opened = await scans.opened_between(start, end, limit)
        paid = await scans.paid_between(start, end, self.limits.expiry_ms, limit)
        rows = [ListRow(r.user_id, "received", r.order_id, r.amount_fen, r.opened_at_ms) for r in opened]
        rows += [
            ListRow(p.sender_id, "sent", p.order_id, p.total_fen, p.expires_at_ms - self.limits.expiry_ms) for p in paid
        ]
        bests = {o: b for o, b in (await self._best_lucks({r.order_id for r in opened})).items() if b is not None}
        keys = [(r.user_id, r.direction, r.order_id) for r in rows]
        recorded = await self.ports.lists.recorded([*keys, *((b, "received", o) for o, b in bests.items())])
        missing = [r for r, k in zip(rows, keys, strict=True) if k not in recorded]
        flags = [(b, o) for o, b in bests.items() if not recorded.get((b, "received", o), False)]
        if missing or flags:
            await self.ports.lists.write(missing, flags)
            await self._changed([lists_entry(u) for u in {*(r.user_id for r in missing), *(u for u, _ in flags)}])
        if len(opened) == limit:  # more to do: the next run goes on from the oldest point left
            end = min(end, opened[-1].opened_at_ms)
        if len(paid) == limit:
            end = min(end, paid[-1].expires_at_ms - self.limits.expiry_ms)
        await self.ports.flags.set(LISTS_CURSOR, str(end))
        return len(missing) + len(flags)

    async def _changed(self, entries: list[str]) -> None:
        """Tell the read caches that ``entries`` changed in the database (never raises)."""
        if self.views is not None and entries:
            await self.views.changed(entries)


def _best_rows(rows: Sequence[ListRow], bests: dict[str, str | None]) -> list[tuple[str, str]]:
    """(user_id, order_id) of each received row whose user is its packet's best luck in ``bests``."""
    return [(r.user_id, r.order_id) for r in rows if r.direction == "received" and bests.get(r.order_id) == r.user_id]


def _active_packet(order_id: str, pre: dict[str, Any], expires_at_ms: int) -> Packet:
    """The active packet of pre-order ``pre`` (its JSON fields), nothing opened yet."""
    total, count = pre["total_fen"], pre["count"]
    return Packet(
        order_id,
        pre["sender_id"],
        Kind(pre["kind"]),
        count,
        total,
        pre["group_id"],
        pre["receiver_id"],
        total,
        count,
        Status.ACTIVE,
        pre["created_at"],
        pre["pay_by"],
        expires_at_ms,
    )


def _undone_packet(order_id: str, debit: LedgerEntry) -> Packet:
    """The record of a pay undone after send ``debit``: a packet of the debit's total for its
    sender, expired at the debit's time with the whole total to refund and nothing opened (its
    pre-order is gone: kind lucky, one share, no audience)."""
    total, at = -debit.amount_fen, debit.created_at_ms
    return Packet(order_id, debit.user_id, Kind.LUCKY, 1, total, None, None, 0, 1, Status.EXPIRED, at, at, at, total)
