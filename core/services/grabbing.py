"""The grab filter: the advisory check before an open, answered from caches in front of the
database. Its levels, first to last: this worker's memory (packet states and memberships for
GRAB_CACHE_TTL_MS, the groups' members the group store holds (GroupStore.held_member), the
amounts it has seen opened for OPENED_CACHE_TTL_MS: an open's amount never changes), the shared
level (hongbao.core.grab_state; Redis in production), then the database. A state may lag here (a
stale entry says "ok" for a finished packet, never the reverse); open re-checks everything in
its transaction."""

from __future__ import annotations

from hongbao.core import errors
from hongbao.core.breaker import BreakerOpen
from hongbao.core.clock import Clock
from hongbao.core.grab_state import Lookup, PacketState, SharedGrabState
from hongbao.core.packet import Kind, Status
from hongbao.core.ports import GroupStore, PacketStore
from hongbao.core.services.audience import Audience, check_order_id
from hongbao.core.soon import Later, Soon
from hongbao.core.ttl_cache import TtlCache

GRAB_CACHE_TTL_MS = 1000
OPENED_CACHE_TTL_MS = 600_000
GRAB_OK: dict[str, object] = {"status": "ok"}  # grab's common answer, shared: never mutate it
GRAB_OK_PER_SHARE = 0.0  # grabs answered ok a second per share left, per worker (flow control); 0: no limit
GRANTED_MAX_ENTRIES = 50_000  # packets whose grabs of this second are counted (then forgotten at once)


class GrabFilter:
    """grab over ``audience`` (the database's answer), ``groups`` and ``packets`` (membership and
    the opener's receipt when no cache knows), with the shared level ``shared`` (None: memory, then
    the database). Flow control (docs/architecture.md section 9): with ``ok_per_share`` set (0,
    the default: no limit), in any one second this worker answers ok for a packet at most that
    many times its remaining shares; the grabs beyond could not all open, and get Busy."""

    __slots__ = (
        "audience",
        "groups",
        "packets",
        "clock",
        "shared",
        "ok_per_share",
        "_packets",
        "_members",
        "_opened",
        "_granted",
    )

    def __init__(
        self,
        audience: Audience,
        groups: GroupStore,
        packets: PacketStore,
        clock: Clock,
        shared: SharedGrabState | None,
    ) -> None:
        self.audience, self.groups, self.packets, self.clock, self.shared = audience, groups, packets, clock, shared
        self._packets: TtlCache[str, PacketState] = TtlCache(GRAB_CACHE_TTL_MS)
        self._members: TtlCache[tuple[str, str], bool] = TtlCache(GRAB_CACHE_TTL_MS)
        self._opened: TtlCache[tuple[str, str], int] = TtlCache(OPENED_CACHE_TTL_MS)
        self.ok_per_share = GRAB_OK_PER_SHARE
        self._granted: dict[str, tuple[int, int]] = {}  # order id -> (second, grabs answered ok in it)

    def opened(self, order_id: str, user_id: str, amount_fen: int) -> None:
        """Remember that ``user_id`` opened ``amount_fen`` of ``order_id`` and forget the packet's
        state (it changed)."""
        self._opened.put((order_id, user_id), amount_fen, self.clock.now_ms())
        self._packets.drop(order_id)

    def forget(self, order_id: str) -> None:
        """Forget the packet's state (an open was refused: it is not what the cache says)."""
        self._packets.drop(order_id)

    def cached(self, user_id: str, order_id: str) -> dict[str, object] | None:
        """grab's answer from this worker's caches alone, with no I/O; None when the answer needs
        the database (then await ``grab``). Raises as ``grab`` does."""
        now_ms = self.clock.now_ms()  # one reading for every cache (a request takes microseconds)
        amount = self._opened.get((order_id, user_id), now_ms)
        if amount is not None:
            return {"status": "opened", "amount_fen": amount}
        packet = self._packets.get(order_id, now_ms)
        if packet is None:  # the caches hold checked order ids only: check this one before the database
            check_order_id(order_id)
            return None
        if packet.group_id is not None:
            member = self._member(packet.group_id, user_id, now_ms)
            if member is None:
                return None
            if not member:
                raise errors.NotMember(f"{user_id} is not a member of the packet's group")
        if packet.remaining_count < packet.count:  # someone opened: maybe this user, in another worker
            return None
        return self._admitted(packet, user_id, now_ms)

    async def grab(self, user_id: str, order_id: str) -> dict[str, object]:
        """Advisory admission check: GRAB_OK ({"status": "ok"}), or {"status": "opened",
        "amount_fen"} for a user who already opened. Raises Finished/Expired (410), NotFound,
        NotPaid, NotMember, Degraded (503: the shared level is down and the database checks are at
        their limit)."""
        cached = self.cached(user_id, order_id)
        if cached is not None:
            return cached
        now_ms = self.clock.now_ms()
        state, amount, complete = await self._state(user_id, order_id, now_ms)
        answer = self._decided(user_id, state, amount, complete, now_ms)
        if answer is not None:
            return answer
        if state.group_id is not None and self._member(state.group_id, user_id, now_ms) is None:
            member = await self.groups.is_member(state.group_id, user_id)
            self._members.put((state.group_id, user_id), member, now_ms)
            if not member:
                raise errors.NotMember(f"{user_id} is not a member of the packet's group")
        if amount is None and not complete:
            receipt = await self.packets.receipt(order_id, user_id)
            amount = None if receipt is None else receipt.amount_fen
        answer = self._decided(user_id, state, amount, True, now_ms, member=True)
        assert answer is not None  # membership known and the amount certain: always decided
        return answer

    def soon(self, user_id: str, order_id: str) -> Soon[dict[str, object]] | None:
        """``grab`` for a packet not in this worker's caches, without a coroutine, when the shared
        level can answer at once (hongbao.core.soon); None when only ``grab`` can. Call it after
        ``cached`` answered None (which checked the order id). Its result raises as ``grab``
        does, and Later where ``grab`` would have gone to the database."""
        shared = self.shared
        soon = None if shared is None else shared.lookup_soon(order_id, user_id)
        if soon is None:
            return None
        now_ms = self.clock.now_ms()
        return soon.then(lambda found: self._found(user_id, order_id, found, now_ms))

    def _found(self, user_id: str, order_id: str, found: Lookup | None, now_ms: int) -> dict[str, object]:
        if found is None:
            raise Later(f"packet {order_id} is not in the shared level")
        self._packets.put(order_id, found.state, now_ms)
        answer = self._decided(user_id, found.state, found.amount_fen, found.complete, now_ms)
        if answer is None:
            raise Later(f"grab of {order_id} by {user_id} needs the database")
        return answer

    def _decided(
        self, user_id: str, state: PacketState, amount: int | None, complete: bool, now_ms: int, *, member: bool = False
    ) -> dict[str, object] | None:
        """grab's answer from ``state`` and what ``user_id`` opened (``amount``, certain when
        ``complete``), with membership from this worker's cache unless ``member`` (known); None
        when the database must be asked (membership not cached, or an amount not certain)."""
        if state.group_id is not None and not member:
            cached = self._member(state.group_id, user_id, now_ms)
            if cached is None:
                return None
            if not cached:
                raise errors.NotMember(f"{user_id} is not a member of the packet's group")
        if amount is not None:
            self._opened.put((state.order_id, user_id), amount, now_ms)
            return {"status": "opened", "amount_fen": amount}
        if not complete:
            return None
        return self._admitted(state, user_id, now_ms)

    def _member(self, group_id: str, user_id: str, now_ms: int) -> bool | None:
        """Whether ``user_id`` is a member of ``group_id`` from memory alone: the group store's
        copy of the group (every member, dropped on every change) first, then this filter's own
        answers of the last GRAB_CACHE_TTL_MS; None when neither knows."""
        held = self.groups.held_member(group_id, user_id)
        return held if held is not None else self._members.get((group_id, user_id), now_ms)

    def _admitted(self, packet: PacketState, user_id: str, now_ms: int) -> dict[str, object]:
        """``_verdict``, counted against this second's grabs of the packet answered ok; Busy
        (429, ``grab_rejections``) once they reach ``ok_per_share`` times its remaining shares."""
        answer = _verdict(packet, user_id, now_ms)
        if not self.ok_per_share:
            return answer
        second, order_id = now_ms // 1000, packet.order_id
        window = self._granted.get(order_id)
        granted = window[1] if window is not None and window[0] == second else 0
        if granted >= packet.remaining_count * self.ok_per_share:
            raise errors.Busy(f"packet {order_id} has more grabbers than shares, retry shortly", 1.0, "grab_rejections")
        if len(self._granted) >= GRANTED_MAX_ENTRIES:
            self._granted.clear()
        self._granted[order_id] = (second, granted + 1)
        return answer

    async def _state(self, user_id: str, order_id: str, now_ms: int) -> tuple[PacketState, int | None, bool]:
        """(state, the fen ``user_id`` opened or None, whether that None is certain): from the
        shared level; while it is down from this worker's memory; else from the database (which
        refills the shared level after a miss). Raises as ``visible_packet``, and Degraded."""
        shared = self.shared
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
            packet = await self.audience.visible_packet(user_id, order_id)
            if shared is not None:
                await shared.put(packet, now_ms)
            state = PacketState.of(packet)
            self._packets.put(order_id, state, now_ms)
            if packet.group_id is not None:
                self._members.put((packet.group_id, user_id), True, now_ms)
        return state, None, state.remaining_count == state.count


def _verdict(packet: PacketState, user_id: str, now_ms: int) -> dict[str, object]:
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
