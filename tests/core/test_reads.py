"""The read side's product rules through the services, on the embedded backend (and, through
tests/integration/test_mysql_service.py, on the production one): details name the sender and the
openers with their profiles or the defaults, details say ``expired`` from the moment of expiry and
``refunded`` once refunded, the caller's groups page by page, and the lists' pressure switch that
every worker follows."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hongbao.core import errors
from hongbao.core.clock import ManualClock
from hongbao.core.packet import Status
from hongbao.core.services import Services
from hongbao.core.services.pressure import PRESSURE_RETRY_AFTER_S
from hongbao.core.services.profiles import PROFILE_MEMORY_TTL_MS
from hongbao.core.vocabulary import Direction
from hongbao.server.composition import Backend

from tests.core.test_service import _group, _paid


async def _names(svc: Services, reader: str, order_id: str) -> list[tuple[object, object, object]]:
    """(user id, nickname, avatar_url) of the sender, then of each opener, in the details ``reader`` sees."""
    view = await svc.reading.details(reader, order_id)
    sender, receipts = view["sender"], view["receipts"]
    assert isinstance(sender, dict) and isinstance(receipts, list)
    people = [sender, *receipts]
    return [(p["user_id"], p["nickname"], p["avatar_url"]) for p in people]


async def test_details_name_the_sender_and_openers(make_backend: Callable[..., Backend], clock: ManualClock) -> None:
    """Details carry the sender's and each opener's nickname and avatar_url (the user id and "" when
    unset or empty); the worker that changes a profile shows it at once, another within its memory TTL."""
    w1, w2 = make_backend().services, make_backend().services
    await _group(w1, "g", ["S", "A", "B"])
    assert await w1.profiles.set("S", "Sender", "https://x.test/s.png") == {
        "user_id": "S",
        "nickname": "Sender",
        "avatar_url": "https://x.test/s.png",
    }
    await w1.profiles.set("A", "", "https://x.test/a.png")
    order_id = await _paid(w1, "S", {"count": 3, "total_fen": 300, "group_id": "g", "greeting": "恭喜"}, fund=300)
    for user in ("A", "B"):
        await w1.opening.open(user, order_id)
    expected = [("S", "Sender", "https://x.test/s.png"), ("A", "A", "https://x.test/a.png"), ("B", "B", "")]
    assert await _names(w2, "B", order_id) == expected
    assert (await w2.reading.details("A", order_id))["greeting"] == "恭喜"
    assert await w2.profiles.get("B") == {"user_id": "B", "nickname": "B", "avatar_url": ""}

    await w1.profiles.set("B", "Bee", "https://x.test/b.png")
    changed = [*expected[:2], ("B", "Bee", "https://x.test/b.png")]
    assert await _names(w1, "S", order_id) == changed
    assert await _names(w2, "S", order_id) == expected  # w2 keeps what it read for its memory TTL
    clock.advance_ms(PROFILE_MEMORY_TTL_MS)
    assert await _names(w2, "S", order_id) == changed
    with pytest.raises(errors.InvalidRequest, match=r"^nickname is longer than 64 characters$"):
        await w1.profiles.set("A", "n" * 65, "")


@pytest.mark.parametrize("nickname", ["", "Ann", "安妮", "👨\u200d👩\u200d👧 family", "a" * 64, "Ann Lee", "مريم"])
async def test_nicknames_that_show_as_themselves_are_kept(backend: Backend, nickname: str) -> None:
    """Names in any script, emoji joined by zero-width joiners, inner spaces, 64 characters: kept
    and shown as given ("" shows the user id); the same name with a right-to-left override refused."""
    profiles = backend.services.profiles
    shown = {"user_id": "A", "nickname": nickname or "A", "avatar_url": ""}
    assert await profiles.set("A", nickname, "") == shown and await profiles.get("A") == shown
    with pytest.raises(errors.InvalidRequest, match=r"^nickname must have a visible character and no control"):
        await profiles.set("A", nickname[:63] + "\u202e", "")


@pytest.mark.parametrize(
    "url",
    [
        "http://x.test/a.png",
        "HTTPS://X.TEST/A.PNG",
        "https://例え.jp/a.png",
        "https://xn--r8jz45g.jp/a.png",
        "http://[::1]:8080/a",
        "http://127.0.0.1:80/a?size=64#top",
        "https://x.test/" + "a" * 497,  # 512 characters
    ],
)
async def test_avatar_urls_an_image_may_load_are_kept(backend: Backend, url: str) -> None:
    """Absolute http(s) URLs, whatever the scheme's case, with a Unicode or IPv6 host, a port, a
    query, up to 512 characters, are kept and shown as given; one character more is refused by length."""
    profiles = backend.services.profiles
    assert await profiles.set("A", "Ann", url) == {"user_id": "A", "nickname": "Ann", "avatar_url": url}
    assert await profiles.get("A") == {"user_id": "A", "nickname": "Ann", "avatar_url": url}
    with pytest.raises(errors.InvalidRequest, match=r"^avatar_url is longer than 512 characters$"):
        await profiles.set("A", "Ann", url + "a" * (513 - len(url)))


async def test_details_say_expired_from_the_moment_of_expiry(backend: Backend, clock: ManualClock) -> None:
    """Details say ``active`` until expires_at, ``expired`` from then (opens are refused with
    Expired, the row still active) and ``refunded`` once the refund job ran."""
    svc = backend.services
    await _group(svc, "g", ["S", "A", "B"])
    order_id = await _paid(svc, "S", {"count": 2, "total_fen": 200, "group_id": "g"}, fund=200)
    await svc.opening.open("A", order_id)
    packet = await svc.ports.packets.get_packet(order_id)
    assert packet is not None
    clock.set_ms(packet.expires_at_ms - 1)
    assert (await svc.reading.details("B", order_id))["status"] == "active"
    clock.set_ms(packet.expires_at_ms)
    assert (await svc.reading.details("B", order_id))["status"] == "expired"
    with pytest.raises(errors.Expired):
        await svc.opening.open("B", order_id)
    still = await svc.ports.packets.get_packet(order_id)
    assert still is not None and still.status is Status.ACTIVE
    await svc.settlement.refund_due()
    details = await svc.reading.details("B", order_id)
    receipt = await svc.ports.packets.receipt(order_id, "A")
    assert receipt is not None
    assert (details["status"], details["refunded_fen"]) == ("refunded", 200 - receipt.amount_fen)


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


async def test_pressure_sheds_pages_past_the_second_on_every_worker(make_backend: Callable[..., Backend]) -> None:
    """With the switch on, list and bill pages past the second raise Degraded (Retry-After 30 s) on
    the worker that set it, and on another once it synced; pages 1 and 2 are served; off, every page."""
    w1, w2 = make_backend().services, make_backend().services
    await w1.accounts.topup("U", 100, "k")

    async def pages(svc: Services) -> list[bool]:
        """Whether page 3 of the received list, the sent list and the bill is served."""
        served = []
        for read in (
            lambda: svc.reading.user_list("U", Direction.RECEIVED, 2026, 3),
            lambda: svc.reading.user_list("U", Direction.SENT, 2026, 3),
            lambda: svc.accounts.bill("U", 3),
        ):
            try:
                await read()
                served.append(True)
            except errors.Degraded as exc:
                assert exc.headers == [("retry-after", str(PRESSURE_RETRY_AFTER_S))]
                served.append(False)
        return served

    assert await pages(w1) == await pages(w2) == [True] * 3
    await w1.pressure.set(True)
    assert await pages(w1) == [False] * 3
    assert (await w1.reading.user_list("U", Direction.RECEIVED, 2026, 2))["items"] == []
    assert (await w1.accounts.bill("U", 1))["items"] != []
    assert await pages(w2) == [True] * 3  # not synced yet
    await w2.pressure.sync()
    assert await pages(w2) == [False] * 3
    await w2.pressure.set(False)
    await w1.pressure.sync()
    assert await pages(w1) == [True] * 3
