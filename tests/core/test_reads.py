"""The read side's product rules through the services, on the embedded backend (and, through
tests/integration/test_mysql_service.py, on the production one): the caller's groups page by page."""

from __future__ import annotations

from hongbao.core.services import Services
from hongbao.server.composition import Backend


async def _groups(svc: Services, user_id: str, page: int) -> list[tuple[object, object]]:
    """(group id, creator id) of page ``page`` of ``user_id``'s groups."""
    found = await svc.groups.of_member(user_id, page)
    items = found["items"]
    assert found["page"] == page and isinstance(items, list)
    return [(i["group_id"], i["creator_id"]) for i in items]


async def test_my_groups_come_page_by_page(backend: Backend) -> None:
    """A user's groups come 20 a page by group id with their creators; a group they left is gone."""
    svc = backend.services
    made = [(await svc.groups.create(f"c{i % 3}", ["M", "x"]))[0] for i in range(23)]
    await svc.groups.create("c0", ["x"])  # M is not in this one
    pages = [await _groups(svc, "M", page) for page in (1, 2, 3)]
    assert [len(p) for p in pages] == [20, 3, 0]
    everyone = sorted((g, f"c{i % 3}") for i, g in enumerate(made))
    assert [g for p in pages for g in p] == everyone
    await svc.groups.remove_member("M", made[0], "M")
    assert await _groups(svc, "M", 1) == [g for g in everyone if g[0] != made[0]][:20]
    assert await _groups(svc, "nobody", 1) == []
