"""HTTP handlers of the routes (docs/openapi.yaml): each turns a Context into a call of a service
and its result into a Response; the rules live in the services (hongbao.core.services).

The user id always comes from the verified token (``ctx.user_id``), never from the body.
"""

from __future__ import annotations

from collections.abc import Awaitable
from functools import partial

from hongbao.core import errors
from hongbao.core.services import Services
from hongbao.core.services.accounts import MAX_TOPUP_FEN
from hongbao.core.services.crediting import CreditingMode
from hongbao.core.services.grabbing import GRAB_OK
from hongbao.core.services.traffic import Traffic
from hongbao.core.soon import Later, Soon
from hongbao.core.times import business_year, rfc3339
from hongbao.core.vocabulary import Direction
from hongbao.server.context import Context
from hongbao.server.responses import Response, json_response, prebuilt

__all__ = ["MAX_PAGE", "MAX_TOPUP_FEN", "Handlers"]
MAX_PAGE = 10_000
_GRAB_OK = prebuilt(json_response(200, GRAB_OK))


def _grab_answer(result: dict[str, object]) -> Response:
    return _GRAB_OK if result is GRAB_OK else json_response(200, result)


class Handlers:
    """The route handlers over one worker's services (``svc``)."""

    __slots__ = ("svc",)

    def __init__(self, svc: Services) -> None:
        self.svc = svc

    async def topup(self, ctx: Context) -> Response:
        """POST /v1/admin/accounts/{user_id}/topup {amount_fen}; Idempotency-Key makes repeats no-ops,
        and the key again with another amount is IdempotencyKeyReused (422; nothing moves)."""
        user_id, accounts = ctx.params["user_id"], self.svc.accounts
        applied = await accounts.topup(user_id, ctx.json().get("amount_fen"), ctx.header("idempotency-key"))
        balance = await accounts.balance(user_id)
        return json_response(200, {"user_id": user_id, "balance_fen": balance, "applied": applied})

    async def balance(self, ctx: Context) -> Response:
        """GET /v1/balance -> {user_id, balance_fen}."""
        return json_response(200, {"user_id": ctx.user_id, "balance_fen": await self.svc.accounts.balance(ctx.user_id)})

    async def create_group(self, ctx: Context) -> Response:
        """POST /v1/groups {members} -> {group_id}; the caller is a member and the creator."""
        group_id, members = await self.svc.groups.create(ctx.user_id, ctx.json().get("members"))
        return json_response(201, {"group_id": group_id, "members": members})

    async def my_groups(self, ctx: Context) -> Response:
        """GET /v1/groups?page= -> {page, items: [{group_id, creator_id}]}: the caller's groups, 20 a page."""
        page = ctx.query_int("page", 1, 1, MAX_PAGE)
        return json_response(200, await self.svc.groups.of_member(ctx.user_id, page))

    async def get_group(self, ctx: Context) -> Response:
        """GET /v1/groups/{group_id} -> {group_id, creator_id, members} (members only)."""
        group_id = ctx.params["group_id"]
        creator, members = await self.svc.groups.get(ctx.user_id, group_id)
        return json_response(200, {"group_id": group_id, "creator_id": creator, "members": members})

    async def add_members(self, ctx: Context) -> Response:
        """POST /v1/groups/{group_id}/members {members}: a member adds others."""
        group_id = ctx.params["group_id"]
        added, members = await self.svc.groups.add_members(ctx.user_id, group_id, ctx.json().get("members"))
        return json_response(200, {"group_id": group_id, "added": added, "members": members})

    async def remove_member(self, ctx: Context) -> Response:
        """DELETE /v1/groups/{group_id}/members/{user_id}: a member leaves, or the creator removes."""
        group_id, target = ctx.params["group_id"], ctx.params["user_id"]
        await self.svc.groups.remove_member(ctx.user_id, group_id, target)
        return json_response(200, {"group_id": group_id, "removed": target})

    async def send(self, ctx: Context) -> Response:
        """POST /v1/packets -> {order_id, status: "pending_payment", pay_by}."""
        order_id, pay_by = await self.svc.sending.send(ctx.user_id, ctx.json())
        return json_response(201, {"order_id": order_id, "status": "pending_payment", "pay_by": rfc3339(pay_by)})

    async def pay(self, ctx: Context) -> Response:
        """POST /v1/packets/{order_id}/pay -> {order_id, status, expires_at}; a repeat changes nothing."""
        packet = await self.svc.sending.pay(ctx.user_id, ctx.params["order_id"])
        return json_response(
            200,
            {"order_id": packet.order_id, "status": packet.status.value, "expires_at": rfc3339(packet.expires_at_ms)},
        )

    async def cancel(self, ctx: Context) -> Response:
        """DELETE /v1/packets/{order_id}: the sender drops an unpaid pre-order."""
        await self.svc.sending.cancel(ctx.user_id, ctx.params["order_id"])
        return json_response(200, {"order_id": ctx.params["order_id"], "status": "cancelled"})

    def grab(self, ctx: Context) -> Response | Soon[Response | Awaitable[Response]] | Awaitable[Response]:
        """POST /v1/packets/{order_id}/grab -> {status: "ok"} or {status: "opened", amount_fen};
        answered at once from the worker's caches when they hold the packet, else from the shared
        level's reply without a coroutine (a Soon, whose Later becomes the coroutine), else a coroutine."""
        user_id, order_id = ctx.user_id, ctx.params["order_id"]
        grabbing = self.svc.grabbing
        result = grabbing.cached(user_id, order_id)
        if result is GRAB_OK:  # the hot answer, without the call below
            return _GRAB_OK
        if result is not None:
            return _grab_answer(result)
        soon = grabbing.soon(user_id, order_id)
        if soon is None:
            return self._grab(ctx)
        return soon.outcome(partial(self._grab_settled, ctx))  # no closure: no cells for every grab

    def _grab_settled(
        self, ctx: Context, answer: dict[str, object] | None, error: BaseException | None
    ) -> Response | Awaitable[Response]:
        """The answer of grab's Soon: its Response, its error raised again, or after a Later the coroutine."""
        if isinstance(error, Later):
            return self._grab(ctx)
        if error is not None:
            raise error
        assert answer is not None
        return _grab_answer(answer)

    async def _grab(self, ctx: Context) -> Response:
        return _grab_answer(await self.svc.grabbing.grab(ctx.user_id, ctx.params["order_id"]))

    async def open(self, ctx: Context) -> Response:
        """POST /v1/packets/{order_id}/open -> {order_id, amount_fen, opened_at, repeat}."""
        receipt, repeat = await self.svc.opening.open(ctx.user_id, ctx.params["order_id"])
        return json_response(
            200,
            {
                "order_id": receipt.order_id,
                "amount_fen": receipt.amount_fen,
                "opened_at": rfc3339(receipt.opened_at_ms),
                "repeat": repeat,
            },
        )

    async def details(self, ctx: Context) -> Response:
        """GET /v1/packets/{order_id} -> details with receipts and best luck."""
        return json_response(200, await self.svc.reading.details(ctx.user_id, ctx.params["order_id"]))

    async def _list(self, ctx: Context, direction: Direction) -> Response:
        year_now = business_year(self.svc.ports.clock.now_ms())
        year = ctx.query_int("year", year_now, 2000, 2099)
        page = ctx.query_int("page", 1, 1, MAX_PAGE)
        return json_response(200, await self.svc.reading.user_list(ctx.user_id, direction, year, page))

    async def received(self, ctx: Context) -> Response:
        """GET /v1/me/received?year=&page= -> a page of 20 and the yearly summary."""
        return await self._list(ctx, Direction.RECEIVED)

    async def sent(self, ctx: Context) -> Response:
        """GET /v1/me/sent?year=&page= -> a page of 20 and the yearly summary."""
        return await self._list(ctx, Direction.SENT)

    async def ledger(self, ctx: Context) -> Response:
        """GET /v1/me/ledger?page= -> the caller's bill, newest first."""
        return json_response(200, await self.svc.accounts.bill(ctx.user_id, ctx.query_int("page", 1, 1, MAX_PAGE)))

    async def profile(self, ctx: Context) -> Response:
        """PUT /v1/me/profile {nickname, avatar_url}: non-critical profile fields -> the profile as shown."""
        body = ctx.json()
        nickname, avatar = body.get("nickname", ""), body.get("avatar_url", "")
        return json_response(200, await self.svc.profiles.set(ctx.user_id, nickname, avatar))

    async def my_profile(self, ctx: Context) -> Response:
        """GET /v1/me/profile -> {user_id, nickname, avatar_url} (the defaults when unset or unreadable)."""
        return json_response(200, await self.svc.profiles.get(ctx.user_id))

    async def crediting_mode(self, ctx: Context) -> Response:
        """POST /v1/admin/crediting-mode {mode}: realtime_large | queued | deferred, at run time."""
        body = ctx.json()  # its InvalidRequest is a ValueError too: outside the try
        try:
            mode = CreditingMode(str(body.get("mode")))
        except ValueError:
            raise errors.InvalidRequest("mode must be one of realtime_large, queued, deferred") from None
        await self.svc.crediting.set_mode(mode)
        return json_response(200, {"mode": mode.value})

    def traffic(self, _ctx: Context) -> Response:
        """GET /v1/admin/traffic -> {new_packets, weights?}: where new packets go (this worker's copy)."""
        return json_response(200, self.svc.traffic.traffic.to_json())

    async def set_traffic(self, ctx: Context) -> Response:
        """POST /v1/admin/traffic {new_packets: auto | north | south | weighted, weights?}: every
        node follows within a second."""
        traffic = Traffic.parse(ctx.json())
        await self.svc.traffic.set(traffic)  # logged as every admin action is (access_log.audit)
        return json_response(200, traffic.to_json())

    async def lists_pressure(self, ctx: Context) -> Response:
        """POST /v1/admin/lists-pressure {on}: shed list and bill pages past the cached ones, or not."""
        on = ctx.json().get("on")
        if type(on) is not bool:
            raise errors.InvalidRequest("on must be true or false")
        await self.svc.pressure.set(on)
        return json_response(200, {"on": on})
