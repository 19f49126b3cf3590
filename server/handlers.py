"""HTTP handlers of DESIGN.md section 12: each turns a Context into a Response through the service.

The user id always comes from the verified token (``ctx.user_id``), never from the body.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Awaitable
from functools import partial
from typing import Any

from hongbao.core import errors
from hongbao.core.money import parse_fen
from hongbao.core.rules import valid_user_id
from hongbao.core.service import GRAB_OK, CreditingMode, PacketService
from hongbao.core.soon import Later, Soon
from hongbao.core.times import business_year, rfc3339
from hongbao.core.views import bill, details, user_list
from hongbao.server.context import Context
from hongbao.server.responses import Response, json_response, prebuilt

MAX_PAGE = 10_000
_IDEMPOTENCY_KEY = re.compile(r"[!-~]{1,128}")
_GRAB_OK = prebuilt(json_response(200, GRAB_OK))
MAX_TOPUP_FEN = 100_000_000_000  # 1e9 yuan a top-up: keeps every balance far from the int64 limit of its column


def _grab_answer(result: dict[str, object]) -> Response:
    return _GRAB_OK if result is GRAB_OK else json_response(200, result)


def _members(body: dict[str, Any], limit: int) -> list[str]:
    members = body.get("members")
    if not isinstance(members, list) or not all(valid_user_id(m) for m in members):
        raise errors.InvalidRequest("members must be a list of user ids (1..64 of [A-Za-z0-9_-])")
    unique = list(dict.fromkeys(members))  # repeats are ignored, so they do not count
    if len(unique) > limit:
        raise errors.InvalidRequest(
            f"at most {limit} members can be given here (a group has at most {limit + 1} with its creator)"
        )
    return unique


class Handlers:
    """The route handlers over one PacketService (``svc``)."""

    __slots__ = ("svc",)

    def __init__(self, svc: PacketService) -> None:
        self.svc = svc

    async def topup(self, ctx: Context) -> Response:
        """POST /v1/admin/accounts/{user_id}/topup {amount_fen}; Idempotency-Key makes repeats no-ops,
        and the key again with another amount is IdempotencyKeyReused (422; nothing moves)."""
        user_id = ctx.params["user_id"]
        if not valid_user_id(user_id):
            raise errors.InvalidRequest("user_id must be 1..64 of [A-Za-z0-9_-]")
        amount = parse_fen(ctx.json().get("amount_fen"))
        if amount > MAX_TOPUP_FEN:
            raise errors.InvalidAmount(f"amount_fen is at most {MAX_TOPUP_FEN} fen a top-up")
        key = ctx.header("idempotency-key")
        if key is None:
            key = secrets.token_hex(16)
        elif not _IDEMPOTENCY_KEY.fullmatch(key):
            raise errors.InvalidRequest("Idempotency-Key must be 1..128 visible ASCII characters")
        ref = f"{user_id}:{key}"
        applied = await self.svc.topup(user_id, amount, ref)
        if not applied and (first := await self.svc.ports.ledger.amount(user_id, "topup", ref)) != amount:
            raise errors.IdempotencyKeyReused(
                f"Idempotency-Key {key} was used for a top-up of {first} fen, not {amount} fen"
            )
        balance = await self.svc.ports.ledger.balance(user_id)
        return json_response(200, {"user_id": user_id, "balance_fen": balance, "applied": applied})

    async def balance(self, ctx: Context) -> Response:
        """GET /v1/balance -> {user_id, balance_fen}."""
        return json_response(
            200, {"user_id": ctx.user_id, "balance_fen": await self.svc.ports.ledger.balance(ctx.user_id)}
        )

    async def create_group(self, ctx: Context) -> Response:
        """POST /v1/groups {members} -> {group_id}; the caller is a member and the creator."""
        members = _members(ctx.json(), self.svc.limits.max_group_size - 1)
        group_id = "g" + secrets.token_hex(8)
        await self.svc.ports.groups.create(group_id, ctx.user_id, members, self.svc.ports.clock.now_ms())
        return json_response(201, {"group_id": group_id, "members": sorted({ctx.user_id, *members})})

    async def _group_member(self, ctx: Context) -> str:
        group_id = ctx.params["group_id"]
        if await self.svc.ports.groups.creator(group_id) is None:
            raise errors.NotFound(f"no group {group_id}")
        if not await self.svc.ports.groups.is_member(group_id, ctx.user_id):
            raise errors.NotMember(f"{ctx.user_id} is not a member of {group_id}")
        return group_id

    async def get_group(self, ctx: Context) -> Response:
        """GET /v1/groups/{group_id} -> {group_id, creator_id, members} (members only)."""
        group_id = await self._group_member(ctx)
        groups = self.svc.ports.groups
        return json_response(
            200,
            {
                "group_id": group_id,
                "creator_id": await groups.creator(group_id),
                "members": await groups.members(group_id),
            },
        )

    async def add_members(self, ctx: Context) -> Response:
        """POST /v1/groups/{group_id}/members {members}: a member adds others."""
        group_id = await self._group_member(ctx)
        groups = self.svc.ports.groups
        members = _members(ctx.json(), self.svc.limits.max_group_size)
        if len(set(await groups.members(group_id)) | set(members)) > self.svc.limits.max_group_size:
            raise errors.InvalidRequest(f"a group has at most {self.svc.limits.max_group_size} members")
        added = await groups.add_members(group_id, members)
        return json_response(200, {"group_id": group_id, "added": added, "members": await groups.members(group_id)})

    async def remove_member(self, ctx: Context) -> Response:
        """DELETE /v1/groups/{group_id}/members/{user_id}: a member leaves, or the creator removes."""
        group_id = await self._group_member(ctx)
        target = ctx.params["user_id"]
        if target != ctx.user_id and await self.svc.ports.groups.creator(group_id) != ctx.user_id:
            raise errors.Forbidden("only the creator removes other members")
        if not await self.svc.ports.groups.remove_member(group_id, target):
            raise errors.NotFound(f"{target} is not a member of {group_id}")
        return json_response(200, {"group_id": group_id, "removed": target})

    async def send(self, ctx: Context) -> Response:
        """POST /v1/packets -> {order_id, status: "pending_payment", pay_by}."""
        order_id, pay_by = await self.svc.send(ctx.user_id, ctx.json())
        return json_response(201, {"order_id": order_id, "status": "pending_payment", "pay_by": rfc3339(pay_by)})

    async def pay(self, ctx: Context) -> Response:
        """POST /v1/packets/{order_id}/pay -> {order_id, status, expires_at}; a repeat changes nothing."""
        packet = await self.svc.pay(ctx.user_id, ctx.params["order_id"])
        return json_response(
            200,
            {"order_id": packet.order_id, "status": packet.status.value, "expires_at": rfc3339(packet.expires_at_ms)},
        )

    async def cancel(self, ctx: Context) -> Response:
        """DELETE /v1/packets/{order_id}: the sender drops an unpaid pre-order."""
        await self.svc.cancel(ctx.user_id, ctx.params["order_id"])
        return json_response(200, {"order_id": ctx.params["order_id"], "status": "cancelled"})

    def grab(self, ctx: Context) -> Response | Soon[Response | Awaitable[Response]] | Awaitable[Response]:
        """POST /v1/packets/{order_id}/grab -> {status: "ok"} or {status: "opened", amount_fen};
        answered at once from the worker's caches when they hold the packet, else from the shared
        level's reply without a coroutine (a Soon, whose Later becomes the coroutine), else a coroutine."""
        user_id, order_id = ctx.user_id, ctx.params["order_id"]
        result = self.svc.grab_cached(user_id, order_id)
        if result is GRAB_OK:  # the hot answer, without the call below
            return _GRAB_OK
        if result is not None:
            return _grab_answer(result)
        soon = self.svc.grab_soon(user_id, order_id)
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
        return _grab_answer(await self.svc.grab(ctx.user_id, ctx.params["order_id"]))

    async def open(self, ctx: Context) -> Response:
        """POST /v1/packets/{order_id}/open -> {order_id, amount_fen, opened_at, repeat}."""
        receipt, repeat = await self.svc.open(ctx.user_id, ctx.params["order_id"])
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
        return json_response(200, await details(self.svc, ctx.user_id, ctx.params["order_id"]))

    async def _list(self, ctx: Context, direction: str) -> Response:
        year_now = business_year(self.svc.ports.clock.now_ms())
        year = ctx.query_int("year", year_now, 2000, 2099)
        page = ctx.query_int("page", 1, 1, MAX_PAGE)
        return json_response(200, await user_list(self.svc, ctx.user_id, direction, year, page))

    async def received(self, ctx: Context) -> Response:
        """GET /v1/me/received?year=&page= -> a page of 20 and the yearly summary."""
        return await self._list(ctx, "received")

    async def sent(self, ctx: Context) -> Response:
        """GET /v1/me/sent?year=&page= -> a page of 20 and the yearly summary."""
        return await self._list(ctx, "sent")

    async def ledger(self, ctx: Context) -> Response:
        """GET /v1/me/ledger?page= -> the caller's bill, newest first."""
        return json_response(200, await bill(self.svc, ctx.user_id, ctx.query_int("page", 1, 1, MAX_PAGE)))

    async def profile(self, ctx: Context) -> Response:
        """PUT /v1/me/profile {nickname, avatar_url}: non-critical profile fields."""
        body = ctx.json()
        nickname, avatar = body.get("nickname", ""), body.get("avatar_url", "")
        if not isinstance(nickname, str) or not isinstance(avatar, str) or len(nickname) > 64 or len(avatar) > 512:
            raise errors.InvalidRequest("nickname (<= 64 chars) and avatar_url (<= 512 chars) must be strings")
        await self.svc.ports.profiles.set_profile(ctx.user_id, nickname, avatar)
        return json_response(200, {"user_id": ctx.user_id, "nickname": nickname, "avatar_url": avatar})

    async def crediting_mode(self, ctx: Context) -> Response:
        """POST /v1/admin/crediting-mode {mode}: realtime_large | queued | deferred, at run time."""
        body = ctx.json()  # its InvalidRequest is a ValueError too: outside the try
        try:
            mode = CreditingMode(str(body.get("mode")))
        except ValueError:
            raise errors.InvalidRequest("mode must be one of realtime_large, queued, deferred") from None
        await self.svc.set_crediting_mode(mode)
        return json_response(200, {"mode": mode.value})
