"""``POST /v1/admin/push`` (docs/architecture.md section 12): an admin pushes an event to a user, a group or
a topic, and hears what became of it.

Body: exactly one of ``user_id``, ``group_id``, ``topic``; ``event`` (1..64 of
[A-Za-z0-9_.:-]); ``data`` (any JSON value, default ``{}``). Answers (200):

- user: ``{"user_id", "result": "delivered_to_socket" | "queued", "offset", "epoch"}`` (delivered
  to the socket is not yet delivered: the client acks);
- group: ``{"group_id", "result": "queued"}`` (members get it from the group job within ms);
- topic: ``{"topic", "result": "published", "offset", "epoch"}`` (every node's subscribers).

400 for a bad body, 404 for an unknown group, 503 (degraded) when the push store is unreachable.
"""

from __future__ import annotations

import re
from typing import Any

from hongbao.core import errors
from hongbao.core.rules import valid_user_id
from hongbao.server.context import Context
from hongbao.server.push_hub import PushHub
from hongbao.server.responses import Response, json_response
from hongbao.server.router import Route

_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


class AdminPush:
    """The route's handler over one worker's ``hub``."""

    __slots__ = ("hub",)

    def __init__(self, hub: PushHub) -> None:
        self.hub = hub

    def route(self) -> Route:
        """``POST /v1/admin/push``, admin tokens only."""
        return Route("POST", "/v1/admin/push", self.push, auth="admin")

    async def push(self, ctx: Context) -> Response:
        """Push the body's event to its one target; see the module docstring."""
        body = ctx.json()
        targets = [key for key in ("user_id", "group_id", "topic") if key in body]
        event, data = body.get("event"), body.get("data", {})
        if len(targets) != 1:
            raise errors.InvalidRequest("give exactly one of user_id, group_id, topic")
        if not isinstance(event, str) or not _NAME.fullmatch(event):
            raise errors.InvalidRequest("event must be 1..64 of [A-Za-z0-9_.:-]")
        target = body[targets[0]]
        try:
            answer = await self._push(targets[0], target, event, data)
        except errors.HongbaoError:
            raise
        except Exception as exc:
            raise errors.Degraded(f"the push store is unreachable: {exc}") from None
        return json_response(200, answer)

    async def _push(self, kind: str, target: Any, event: str, data: Any) -> dict[str, Any]:
        if kind == "user_id":
            if not valid_user_id(target):
                raise errors.InvalidRequest("user_id must be 1..64 of [A-Za-z0-9_-]")
            pushed = await self.hub.push_to_user(target, event, data)
            return {"user_id": target, "result": pushed.result, "offset": pushed.offset, "epoch": pushed.epoch}
        if not isinstance(target, str) or not _NAME.fullmatch(target):
            raise errors.InvalidRequest(f"{kind} must be 1..64 of [A-Za-z0-9_.:-]")
        if kind == "group_id":
            await self.hub.push_to_group(target, event, data)
            return {"group_id": target, "result": "queued"}
        stored = await self.hub.broadcast(target, event, data)
        return {"topic": target, "result": "published", "offset": stored.offset, "epoch": stored.epoch}
