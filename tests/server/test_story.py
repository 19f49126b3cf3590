"""The whole money flow through HTTP against a real server: top up, group, send, pay, every member
grabs and opens, details with best luck, sent/received lists with yearly summaries, the ledger, and
balances that add up to the top-ups (docs/architecture.md sections 6, 11 and 12)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import TypeVar
from zoneinfo import ZoneInfo

import hongbao_native

from tests.server.conftest import Server
from tests.server.flows import balance, best_luck, eventually, group, ledger, ms, ok, topup, user_list

T = TypeVar("T")
DAY_MS = 24 * 3600 * 1000
PAY_TTL_MS = 15 * 60 * 1000


def test_full_story(server: Server) -> None:
    """Top-ups, a group, a paid packet opened by every member: details, best luck, lists, ledger and balances agree."""
    # Top-ups: a repeat with the same Idempotency-Key changes nothing.
    assert topup(server, "alice", 10_000, key="story-alice-1") == 10_000
    assert topup(server, "alice", 10_000, key="story-alice-1") == 10_000
    assert topup(server, "bob", 2_000, key="story-bob-1") == 2_000
    topups = {"alice": 10_000, "bob": 2_000}

    # A group: the caller is a member and the creator; a member adds another later.
    gid = group(server, "alice", ["bob", "carol", "dave"])
    with server.client("carol") as carol:
        info = ok(carol.get(f"/v1/groups/{gid}"))
    assert info == {"group_id": gid, "creator_id": "alice", "members": ["alice", "bob", "carol", "dave"]}

    # Send: a pre-order, not yet a packet; nothing is debited until pay.
    with server.client("alice") as alice:
        sent = ok(
            alice.post(
                "/v1/packets",
                json={"kind": "lucky", "count": 4, "total_yuan": "10.00", "group_id": gid, "greeting": "恭喜发财"},
            ),
            201,
        )
    order1 = sent["order_id"]
    assert isinstance(order1, str) and len(order1) == 20 and order1.isdigit()
    assert hongbao_native.decode_order_id(order1) is not None
    assert sent["status"] == "pending_payment"
    assert set(sent) == {"order_id", "status", "pay_by"}
    assert balance(server, "alice") == 10_000
    with server.client("bob") as bob:
        assert ok(bob.get(f"/v1/packets/{order1}"), 409)["error"]["code"] == "not_paid"
        assert ok(bob.post(f"/v1/packets/{order1}/open"), 409)["error"]["code"] == "not_paid"

    # Pay: debit once, activate; a repeat changes nothing.
    with server.client("alice") as alice:
        paid = ok(alice.post(f"/v1/packets/{order1}/pay"))
        assert paid["status"] == "active" and paid["order_id"] == order1
        assert ok(alice.post(f"/v1/packets/{order1}/pay")) == paid
    assert balance(server, "alice") == 9_000
    expires1 = ms(paid["expires_at"])
    assert 0 < ms(sent["pay_by"]) - PAY_TTL_MS <= expires1 - DAY_MS

    with server.client("dave") as dave:
        fresh = ok(dave.get(f"/v1/packets/{order1}"))
    assert fresh["status"] == "active" and fresh["kind"] == "lucky" and fresh["sender_id"] == "alice"
    assert (fresh["count"], fresh["total_fen"], fresh["opened_count"], fresh["opened_fen"]) == (4, 1000, 0, 0)
    assert fresh["remaining_count"] == 4 and fresh["receipts"] == [] and fresh["best_luck_user_id"] is None
    assert fresh["greeting"] == "恭喜发财" and fresh["group_id"] == gid and ms(fresh["expires_at"]) == expires1
    assert ms(fresh["expires_at"]) - ms(fresh["created_at"]) >= DAY_MS

    # Every member grabs, then opens; a second grab reports the amount; details grow in open order.
    order_of_opens = ["bob", "alice", "dave", "carol"]
    amounts: dict[str, int] = {}
    for position, user in enumerate(order_of_opens, start=1):
        with server.client(user) as client:
            assert ok(client.post(f"/v1/packets/{order1}/grab")) == {"status": "ok"}
            opened = ok(client.post(f"/v1/packets/{order1}/open"))
            assert opened["order_id"] == order1 and opened["repeat"] is False
            assert opened["amount_fen"] >= 1
            amounts[user] = opened["amount_fen"]
            assert ok(client.post(f"/v1/packets/{order1}/grab")) == {"status": "opened", "amount_fen": amounts[user]}
            again = ok(client.post(f"/v1/packets/{order1}/open"))
            assert (again["amount_fen"], again["repeat"], again["opened_at"]) == (
                amounts[user],
                True,
                opened["opened_at"],
            )
            details = ok(client.get(f"/v1/packets/{order1}"))
        assert [r["user_id"] for r in details["receipts"]] == order_of_opens[:position]
        assert [r["amount_fen"] for r in details["receipts"]] == [amounts[u] for u in order_of_opens[:position]]
        assert details["opened_count"] == position and details["remaining_count"] == 4 - position
        assert details["opened_fen"] == sum(amounts.values())
        if position < 4:
            assert details["status"] == "active" and details["best_luck_user_id"] is None
    assert sum(amounts.values()) == 1000
    assert details["status"] == "finished" and details["refunded_fen"] == 0
    best1 = best_luck(details["receipts"])
    assert details["best_luck_user_id"] == best1
    assert amounts[best1] == max(amounts.values())

    # A member added after the last share sees "finished"; grab is no promise.
    with server.client("bob") as bob:
        ok(bob.post(f"/v1/groups/{gid}/members", json={"members": ["erin"]}))
    with server.client("erin") as erin:
        assert ok(erin.post(f"/v1/packets/{order1}/grab"), 410)["error"]["code"] == "finished"
        assert ok(erin.post(f"/v1/packets/{order1}/open"), 410)["error"]["code"] == "finished"

    # A second packet: equal shares of 0.50 yuan; a tie everywhere, so best luck is the first opener.
    with server.client("bob") as bob:
        order2 = ok(
            bob.post("/v1/packets", json={"kind": "equal", "count": 3, "per_share_yuan": "0.50", "group_id": gid}), 201
        )["order_id"]
        assert ok(bob.post(f"/v1/packets/{order2}/pay"))["status"] == "active"
    for user in ["carol", "alice", "erin"]:
        with server.client(user) as client:
            assert ok(client.post(f"/v1/packets/{order2}/open"))["amount_fen"] == 50
    with server.client("dave") as dave:
        assert ok(dave.post(f"/v1/packets/{order2}/open"), 410)["error"]["code"] == "finished"
        details2 = ok(dave.get(f"/v1/packets/{order2}"))
    assert details2["kind"] == "equal" and details2["total_fen"] == 150 and details2["status"] == "finished"
    assert [r["user_id"] for r in details2["receipts"]] == ["carol", "alice", "erin"]
    assert details2["best_luck_user_id"] == "carol"

    # Lists and yearly summaries, written by a background job: poll until they appear.
    year = datetime.fromtimestamp(ms(details["created_at"]) / 1000, ZoneInfo("Asia/Shanghai")).year
    received: dict[str, dict[str, int]] = {u: {} for u in ["alice", "bob", "carol", "dave", "erin"]}
    for user, amount in amounts.items():
        received[user][order1] = amount
    for user in ["carol", "alice", "erin"]:
        received[user][order2] = 50
    best = {order1: best1, order2: "carol"}

    def lists_agree() -> None:
        for user, expected in received.items():
            got = user_list(server, user, "received", year)
            assert got["year"] == year and got["page"] == 1
            assert {i["order_id"]: i["amount_fen"] for i in got["items"]} == expected, (user, got)
            assert {i["order_id"]: i["best_luck"] for i in got["items"]} == {o: best[o] == user for o in expected}
            assert got["summary"] == {
                "count": len(expected),
                "total_fen": sum(expected.values()),
                "best_luck_count": sum(best[o] == user for o in expected),
            }
        for user, order, total in [("alice", order1, 1000), ("bob", order2, 150)]:
            got = user_list(server, user, "sent", year)
            assert [(i["order_id"], i["amount_fen"]) for i in got["items"]] == [(order, total)], (user, got)
            assert got["summary"]["count"] == 1 and got["summary"]["total_fen"] == total
        for user in ["carol", "dave", "erin"]:
            got = user_list(server, user, "sent", year)
            assert got["items"] == [] and got["summary"] == {"count": 0, "total_fen": 0, "best_luck_count": 0}

    eventually(lists_agree)
    # Newest first, and nothing on page 2 or in another year.
    alice_received = user_list(server, "alice", "received", year)["items"]
    assert [i["order_id"] for i in alice_received] == [order2, order1]
    assert user_list(server, "alice", "received", year, page=2)["items"] == []
    assert user_list(server, "alice", "received", year - 1)["summary"]["count"] == 0

    # The ledger: every movement once, with its reference; balances follow from it.
    expected_ledger = {
        "alice": [
            ("topup", "alice:story-alice-1", 10_000),
            ("send", order1, -1000),
            ("credit", f"{order1}:alice", amounts["alice"]),
            ("credit", f"{order2}:alice", 50),
        ],
        "bob": [
            ("topup", "bob:story-bob-1", 2_000),
            ("send", order2, -150),
            ("credit", f"{order1}:bob", amounts["bob"]),
        ],
        "carol": [("credit", f"{order1}:carol", amounts["carol"]), ("credit", f"{order2}:carol", 50)],
        "dave": [("credit", f"{order1}:dave", amounts["dave"])],
        "erin": [("credit", f"{order2}:erin", 50)],
    }

    def ledgers_agree() -> None:
        for user, entries in expected_ledger.items():
            got = ledger(server, user)
            assert Counter((e["kind"], e["ref"], e["amount_fen"]) for e in got) == Counter(entries), (user, got)
            assert balance(server, user) == sum(amount for _, _, amount in entries)

    eventually(ledgers_agree)
    alice_bill = ledger(server, "alice")
    assert [e["kind"] for e in alice_bill][-2:] == ["send", "topup"]  # newest first
    assert all(ms(e["created_at"]) > 0 for e in alice_bill)

    # Money is only moved: with every credit drained, balances add up to the top-ups.
    balances = {user: balance(server, user) for user in expected_ledger}
    assert sum(balances.values()) == sum(topups.values())
    assert balances["alice"] == 10_000 - 1000 + amounts["alice"] + 50
    assert balances["bob"] == 2_000 - 150 + amounts["bob"]


def test_those_who_took_part_keep_reading_a_packet_after_leaving(server: Server) -> None:
    """The sender and an opener who leave the group still read the packet's details (their money
    is in it); a member who left without opening cannot, nor open it."""
    topup(server, "sam", 1_000)
    gid = group(server, "sam", ["olga", "nick", "rita"])
    with server.client("sam") as sam:
        order = ok(sam.post("/v1/packets", json={"kind": "equal", "count": 3, "total_fen": 300, "group_id": gid}), 201)[
            "order_id"
        ]
        ok(sam.post(f"/v1/packets/{order}/pay"))
    with server.client("olga") as olga:
        assert ok(olga.post(f"/v1/packets/{order}/open"))["amount_fen"] == 100
    for leaver in ("sam", "olga", "nick"):
        with server.client(leaver) as client:
            assert ok(client.delete(f"/v1/groups/{gid}/members/{leaver}")) == {"group_id": gid, "removed": leaver}
    for reader in ("sam", "olga", "rita"):
        with server.client(reader) as client:
            details = ok(client.get(f"/v1/packets/{order}"))
            assert (details["sender_id"], [(r["user_id"], r["amount_fen"]) for r in details["receipts"]]) == (
                "sam",
                [("olga", 100)],
            )
    with server.client("nick") as nick:
        assert ok(nick.get(f"/v1/packets/{order}"), 403)["error"]["code"] == "not_member"
        assert ok(nick.post(f"/v1/packets/{order}/open"), 403)["error"]["code"] == "not_member"


def test_a_pre_order_is_told_apart_only_to_its_audience(server: Server) -> None:
    """A pre-order answers 409 not_paid to a member of its group or its exclusive receiver, and
    403 not_member to anyone else (as a paid packet would), on details, grab and open."""
    gid = group(server, "pam", ["gus"])
    with server.client("pam") as pam:
        grouped = ok(
            pam.post("/v1/packets", json={"kind": "lucky", "count": 2, "total_fen": 200, "group_id": gid}), 201
        )["order_id"]
        exclusive = ok(
            pam.post("/v1/packets", json={"kind": "exclusive", "total_fen": 100, "receiver_id": "eve"}), 201
        )["order_id"]
    for user, order, code in [
        ("gus", grouped, "not_paid"),
        ("eve", exclusive, "not_paid"),
        ("mal", grouped, "not_member"),
        ("mal", exclusive, "not_member"),
        ("gus", exclusive, "not_member"),
    ]:
        with server.client(user) as client:
            answers = [
                client.get(f"/v1/packets/{order}"),
                client.post(f"/v1/packets/{order}/grab"),
                client.post(f"/v1/packets/{order}/open"),
            ]
            assert [(a.status_code, a.json()["error"]["code"]) for a in answers] == [
                (409 if code == "not_paid" else 403, code)
            ] * 3, user
