"""Groups: created by a user with its first members, read and changed by its members only; a
member leaves, the creator removes others; at most ``Limits.max_group_size`` members, the
creator included."""

from __future__ import annotations

import secrets

from hongbao.core import errors
from hongbao.core.clock import Clock
from hongbao.core.ports import GroupStore
from hongbao.core.rules import GROUP_ID_MAX, Limits, valid_user_id

PAGE_SIZE = 20


class Groups:
    """The group rules over ``groups`` under ``limits``."""

    __slots__ = ("groups", "limits", "clock")

    def __init__(self, groups: GroupStore, limits: Limits, clock: Clock) -> None:
        self.groups, self.limits, self.clock = groups, limits, clock

    async def create(self, creator_id: str, members: object) -> tuple[str, list[str]]:
        """A new group of ``creator_id`` and ``members`` (a list of user ids; repeats ignored):
        (its id, its members sorted). Raises InvalidRequest (not user ids, too many)."""
        given = self._given(members, self.limits.max_group_size - 1)
        group_id = "g" + secrets.token_hex(8)
        await self.groups.create(group_id, creator_id, given, self.clock.now_ms())
        return group_id, sorted({creator_id, *given})

    async def get(self, user_id: str, group_id: str) -> tuple[str | None, list[str]]:
        """(creator, members sorted) of ``group_id`` for its member ``user_id``. Raises NotFound, NotMember."""
        await self.check_member(user_id, group_id)
        return await self.groups.creator(group_id), await self.groups.members(group_id)

    async def of_member(self, user_id: str, page: int) -> dict[str, object]:
        """Page ``page`` (1 first, PAGE_SIZE a page, by group id) of the groups ``user_id`` is a
        member of: ``{page, items: [{group_id, creator_id}]}``."""
        found = await self.groups.of_member(user_id, (page - 1) * PAGE_SIZE, PAGE_SIZE)
        return {"page": page, "items": [{"group_id": g, "creator_id": c} for g, c in found]}

    async def add_members(self, user_id: str, group_id: str, members: object) -> tuple[int, list[str]]:
        """A member adds others: (how many were new, the members sorted). Raises NotFound,
        NotMember, InvalidRequest (not user ids, or beyond the group's size)."""
        await self.check_member(user_id, group_id)
        given = self._given(members, self.limits.max_group_size)
        if len(set(await self.groups.members(group_id)) | set(given)) > self.limits.max_group_size:
            raise errors.InvalidRequest(f"a group has at most {self.limits.max_group_size} members")
        added = await self.groups.add_members(group_id, given)
        return added, await self.groups.members(group_id)

    async def remove_member(self, user_id: str, group_id: str, target: str) -> None:
        """``user_id`` leaves (``target`` is themselves) or, as the creator, removes ``target``.
        Raises InvalidRequest (``target`` is no user id), NotFound (no group, or ``target`` not in
        it), NotMember, Forbidden."""
        if not valid_user_id(target):
            raise errors.InvalidRequest("the member to remove must be a user id (1..64 of [A-Za-z0-9_-])")
        await self.check_member(user_id, group_id)
        if target != user_id and await self.groups.creator(group_id) != user_id:
            raise errors.Forbidden("only the creator removes other members")
        if not await self.groups.remove_member(group_id, target):
            raise errors.NotFound(f"{target} is not a member of {group_id}")

    async def exists(self, group_id: str) -> bool:
        """Whether ``group_id`` is a group: one with members is (the membership's cache levels
        answer, the push of every packet to a group asks), one without is asked of its creator."""
        return bool(await self.groups.members(group_id)) or await self.groups.creator(group_id) is not None

    async def members(self, group_id: str) -> list[str]:
        """Every member of ``group_id``, sorted (none for an unknown group)."""
        return await self.groups.members(group_id)

    async def check_member(self, user_id: str, group_id: str) -> None:
        """Raise NotFound for an unknown group (an id longer than any group's is not echoed),
        NotMember unless ``user_id`` is in it."""
        if len(group_id) > GROUP_ID_MAX:
            raise errors.NotFound(f"no such group: group ids are at most {GROUP_ID_MAX} characters")
        if await self.groups.creator(group_id) is None:
            raise errors.NotFound(f"no group {group_id}")
        if not await self.groups.is_member(group_id, user_id):
            raise errors.NotMember(f"{user_id} is not a member of {group_id}")

    def _given(self, members: object, limit: int) -> list[str]:
        """The distinct user ids of ``members`` in their order; InvalidRequest unless it is a list
        of user ids with at most ``limit`` distinct ones (the message names the group's size)."""
        if not isinstance(members, list) or not all(valid_user_id(m) for m in members):
            raise errors.InvalidRequest("members must be a list of user ids (1..64 of [A-Za-z0-9_-])")
        unique = list(dict.fromkeys(members))  # repeats are ignored, so they do not count
        if len(unique) > limit:
            raise errors.InvalidRequest(
                f"at most {limit} distinct members can be given here "
                f"(a group has at most {self.limits.max_group_size}, its creator included)"
            )
        return unique
