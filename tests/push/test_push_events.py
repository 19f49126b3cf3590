"""Red-packet events of a real money flow reach the right users over WebSocket (docs/architecture.md
section 7; hongbao.core.events): received, opened, credited, finished with best luck, expired, refunded."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.push.conftest import connect
from tests.server.conftest import Server
from tests.server.flows import group, move_clock, ms, ok, paid_packet


def by_event(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Event name -> data (each name once), after checking the offsets run 1, 2, ... in order."""
    assert [m["offset"] for m in messages] == list(range(1, len(messages) + 1))
    named = {m["event"]: m["data"] for m in messages}
    assert len(named) == len(messages), [m["event"] for m in messages]
    return named


def test_money_flow_events_reach_their_users(two_workers: Server) -> None:
    """Pay -> packet_received to the group; open -> opened and credited to the opener; the last open
    -> finished with best luck to the group; an exclusive packet's expiry -> expired to its receiver
    and refunded to its sender; nobody else hears anything."""
    server = two_workers

    async def scenario() -> None:
        alice, bob, carol, dan = [await connect(server, uid) for uid in ("ev_alice", "ev_bob", "ev_carol", "ev_dan")]
        gid = group(server, "ev_alice", ["ev_bob", "ev_carol"])
        lucky = paid_packet(
            server,
            "ev_alice",
            {"kind": "lucky", "count": 2, "total_fen": 300, "group_id": gid, "greeting": "hi"},
            fund_fen=1000,
        )
        amounts = {}
        for uid in ("ev_bob", "ev_carol"):
            with server.client(uid) as client:
                amounts[uid] = ok(client.post(f"/v1/packets/{lucky}/open"))["amount_fen"]
        exclusive = paid_packet(server, "ev_alice", {"kind": "exclusive", "total_fen": 50, "receiver_id": "ev_bob"})
        with server.client("ev_alice") as client:
            expires_at = ok(client.get(f"/v1/packets/{exclusive}"))["expires_at"]
        move_clock(server, ms(expires_at) + 1000)

        best = max(amounts, key=lambda uid: (amounts[uid], uid == "ev_bob"))  # ties go to the earlier open (bob)
        finished = {"order_id": lucky, "best_luck_user_id": best, "best_luck_fen": amounts[best]}
        got_alice = by_event(await alice.receive(3))
        assert got_alice["packet_received"]["order_id"] == lucky and got_alice["packet_received"]["total_fen"] == 300
        assert got_alice["finished"] == finished
        assert got_alice["refunded"] == {"order_id": exclusive, "refunded_fen": 50}
        got_bob = await bob.receive(6)
        received = [m["data"] for m in got_bob if m["event"] == "packet_received"]
        assert [r["order_id"] for r in received] == [lucky, exclusive]
        assert received[0] == {
            "order_id": lucky,
            "sender_id": "ev_alice",
            "kind": "lucky",
            "count": 2,
            "total_fen": 300,
            "greeting": "hi",
            "expires_at": received[0]["expires_at"],
        }
        named_bob = {m["event"]: m["data"] for m in got_bob if m["event"] != "packet_received"}
        assert [m["offset"] for m in got_bob] == list(range(1, 7))
        assert named_bob["opened"]["amount_fen"] == amounts["ev_bob"]
        assert named_bob["credited"] == {"order_id": lucky, "amount_fen": amounts["ev_bob"]}
        assert named_bob["finished"] == finished
        assert named_bob["expired"] == {"order_id": exclusive, "remaining_count": 1}
        got_carol = by_event(await carol.receive(4))
        assert (got_carol["opened"]["amount_fen"], got_carol["credited"]["amount_fen"]) == (amounts["ev_carol"],) * 2
        assert got_carol["finished"] == finished and got_carol["packet_received"]["order_id"] == lucky
        for ws in (alice, bob, carol, dan):
            assert await ws.silent(0.3)
            await ws.close()

    asyncio.run(scenario())
