"""Concurrency through HTTP against a real server: a storm of openers on one packet (one and two
workers), idempotent repeats of pay, open and top-up, and a refund racing the last opens."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx

from tests.server.conftest import Server
from tests.server.crowd import Crowd, auth, balances, details_of, eventually_async, fan_out, ledger_async
from tests.server.flows import group, ms, ok, paid_packet, topup


async def storm(server: Server) -> None:
    """300 members open a 100-share lucky packet of 10000 fen at once."""
    users = [f"u{i:03}" for i in range(300)]
    gid = group(server, "sender", users)
    order = paid_packet(
        server, "sender", {"kind": "lucky", "count": 100, "total_fen": 10_000, "group_id": gid}, fund_fen=10_000
    )
    async with Crowd(server) as crowd:
        responses = await fan_out(server, crowd, "POST", f"/v1/packets/{order}/open", users)
        statuses = Counter(r.status_code for r in responses)
        assert statuses == {200: 100, 410: 200}, statuses
        assert {tuple(r.json()["error"].values()) for r in responses if r.status_code == 410} == {
            ("finished", f"packet {order} is finished")
        }
        winners = {u: r.json()["amount_fen"] for u, r in zip(users, responses, strict=True) if r.status_code == 200}
        details = await details_of(server, crowd, order, "sender")
        receipts = details["receipts"]
        assert len(receipts) == 100 == details["opened_count"]
        assert {r["user_id"]: r["amount_fen"] for r in receipts} == winners
        assert sum(r["amount_fen"] for r in receipts) == 10_000 == details["opened_fen"]
        assert min(r["amount_fen"] for r in receipts) >= 1
        assert (details["status"], details["remaining_count"], details["refunded_fen"]) == ("finished", 0, 0)
        amounts = [r["amount_fen"] for r in receipts]
        assert details["best_luck_user_id"] == receipts[amounts.index(max(amounts))]["user_id"]

        async def credited() -> None:
            assert await balances(server, crowd, winners) == winners

        await eventually_async(credited)
        everyone = await balances(server, crowd, [*users, "sender"])
        assert {u: b for u, b in everyone.items() if b} == winners
        assert sum(everyone.values()) == 10_000


async def test_300_openers_on_100_shares(server: Server) -> None:
    """300 concurrent openers of a 100-share packet: 100 receipts summing to T, 200 answers 410, no
    share below 1 fen."""
    await storm(server)


async def test_300_openers_on_100_shares_two_workers(make_server: Callable[..., Server]) -> None:
    """The same storm against two worker processes sharing the port and the database."""
    await storm(make_server(workers=2))


async def test_repeated_pay_debits_once(server: Server) -> None:
    """Twenty concurrent pays of one pre-order and a late repeat: one debit, one send entry, one answer."""
    gid = group(server, "payer", ["friend"])
    topup(server, "payer", 5_000)
    with server.client("payer") as payer:
        order = ok(
            payer.post("/v1/packets", json={"kind": "lucky", "count": 2, "total_fen": 1_200, "group_id": gid}), 201
        )["order_id"]
    async with Crowd(server, 20) as crowd:
        bodies = [ok(r) for r in await fan_out(server, crowd, "POST", f"/v1/packets/{order}/pay", ["payer"] * 20)]
        assert {(b["status"], b["expires_at"]) for b in bodies} == {("active", bodies[0]["expires_at"])}
        assert ok(await crowd[0].post(f"/v1/packets/{order}/pay", headers=auth(server, "payer"))) == bodies[0]
        assert await balances(server, crowd, ["payer"]) == {"payer": 3_800}
        sends = [
            (e["kind"], e["ref"], e["amount_fen"])
            for e in await ledger_async(server, crowd, "payer")
            if e["kind"] == "send"
        ]
        assert sends == [("send", order, -1_200)]
        # Someone else paying the same order is refused and moves nothing.
        refused = await crowd[0].post(f"/v1/packets/{order}/pay", headers=auth(server, "friend"))
        assert ok(refused, 403)["error"]["code"] == "forbidden"
        assert await balances(server, crowd, ["friend", "payer"]) == {"friend": 0, "payer": 3_800}


async def test_repeated_open_returns_the_first_amount(server: Server) -> None:
    """Ten concurrent opens by each of five members on 3 shares: one amount per winner, only 410 for the others."""
    users = [f"m{i}" for i in range(5)]
    gid = group(server, "host", users)
    order = paid_packet(server, "host", {"kind": "lucky", "count": 3, "total_fen": 900, "group_id": gid}, fund_fen=900)
    async with Crowd(server, 50) as crowd:
        fired = [u for _ in range(10) for u in users]
        responses = await fan_out(server, crowd, "POST", f"/v1/packets/{order}/open", fired)
        outcomes: dict[str, set[tuple[int, Any]]] = {u: set() for u in users}
        for user, response in zip(fired, responses, strict=True):
            body = response.json()
            outcomes[user].add(
                (response.status_code, body["amount_fen"] if response.status_code == 200 else body["error"]["code"])
            )
        for user, seen in outcomes.items():
            assert len(seen) == 1, (user, seen)  # one outcome per user: one amount, or only "finished"
        winners = {
            u: amount for u, ((status, amount),) in ((u, tuple(s)) for u, s in outcomes.items()) if status == 200
        }
        assert len(winners) == 3 and sum(winners.values()) == 900
        assert all(seen == {(410, "finished")} for u, seen in outcomes.items() if u not in winners)
        fresh = Counter(r.json()["repeat"] for r in responses if r.status_code == 200)
        assert fresh == {False: 3, True: 27}
        for user, amount in winners.items():
            again = ok(await crowd[0].post(f"/v1/packets/{order}/open", headers=auth(server, user)))
            assert (again["amount_fen"], again["repeat"]) == (amount, True)
        details = await details_of(server, crowd, order, "host")
        assert {r["user_id"]: r["amount_fen"] for r in details["receipts"]} == winners


async def test_repeated_topup_with_one_key_applies_once(server: Server) -> None:
    """Twenty concurrent top-ups with the same Idempotency-Key add the money once; a new key adds again."""
    path, body = "/v1/admin/accounts/saver/topup", {"amount_fen": 777}
    headers = {**auth(server, "admin", admin=True), "idempotency-key": "topup-once-1"}
    async with Crowd(server, 20) as crowd:
        responses = await asyncio.gather(*(crowd[i].post(path, json=body, headers=headers) for i in range(20)))
        bodies = [ok(r) for r in responses]
        assert Counter(b["applied"] for b in bodies) == {True: 1, False: 19}
        assert {b["balance_fen"] for b in bodies} == {777}
        assert await balances(server, crowd, ["saver"]) == {"saver": 777}
        headers["idempotency-key"] = "topup-once-2"
        assert ok(await crowd[0].post(path, json={"amount_fen": 23}, headers=headers))["balance_fen"] == 800
        entries = await ledger_async(server, crowd, "saver")
        assert sorted((e["kind"], e["ref"], e["amount_fen"]) for e in entries) == [
            ("topup", "saver:topup-once-1", 777),
            ("topup", "saver:topup-once-2", 23),
        ]


async def test_refund_racing_the_last_opens(make_server: Callable[..., Server]) -> None:
    """A clock jump to expires_at amid opens on two workers: every fen is opened or refunded once, refusals are 410."""
    server = make_server(workers=2)
    users = [f"r{i:03}" for i in range(300)]
    gid = group(server, "sender", users)
    order = paid_packet(
        server, "sender", {"kind": "lucky", "count": 100, "total_fen": 10_000, "group_id": gid}, fund_fen=10_000
    )
    admin = auth(server, "admin", admin=True)
    async with Crowd(server) as crowd:
        expires_at = ms((await details_of(server, crowd, order, "sender"))["expires_at"])
        early = await fan_out(server, crowd, "POST", f"/v1/packets/{order}/open", users[:20])
        assert Counter(r.status_code for r in early) == {200: 20}
        # The second wave: 280 openers, 2 ms apart, and the clock jump among the first of them.
        ok(await crowd[299].get("/healthz"))  # a warm connection for the jump

        async def open_later(index: int, user: str) -> httpx.Response:
            await asyncio.sleep(index * 0.002)
            return await crowd[index].post(f"/v1/packets/{order}/open", headers=auth(server, user))

        async def jump_later() -> httpx.Response:
            await asyncio.sleep(0.06)
            return await crowd[299].post("/v1/admin/clock", json={"now_ms": expires_at}, headers=admin)

        *answers, moved = await asyncio.gather(*(open_later(i, u) for i, u in enumerate(users[20:])), jump_later())
        assert ok(moved)["now_ms"] >= expires_at
        responses = [*early, *answers]
        statuses = Counter(r.status_code for r in responses)
        assert set(statuses) <= {200, 410}, statuses
        codes = Counter(r.json()["error"]["code"] for r in responses if r.status_code == 410)
        assert set(codes) <= {"finished", "expired"}, codes
        winners = {u: r.json()["amount_fen"] for u, r in zip(users, responses, strict=True) if r.status_code == 200}

        async def settled() -> None:
            details = await details_of(server, crowd, order, "sender")
            assert details["status"] in {"finished", "refunded"}, details["status"]
            assert {r["user_id"]: r["amount_fen"] for r in details["receipts"]} == winners
            assert details["opened_fen"] + details["refunded_fen"] == 10_000
            refunds = [
                (e["ref"], e["amount_fen"])
                for e in await ledger_async(server, crowd, "sender")
                if e["kind"] == "refund"
            ]
            assert refunds == ([(order, details["refunded_fen"])] if details["refunded_fen"] else [])
            assert await balances(server, crowd, [*winners, "sender"]) == {**winners, "sender": details["refunded_fen"]}

        await eventually_async(settled)
        details = await details_of(server, crowd, order, "sender")
        # The jump really landed among the opens: some shares were opened after the first wave,
        # and the rest was refunded rather than opened.
        assert details["refunded_fen"] > 0 and details["status"] == "refunded" and codes["expired"] > 0, (
            details,
            codes,
        )
        everyone = await balances(server, crowd, [*users, "sender"])
        assert sum(everyone.values()) == 10_000
