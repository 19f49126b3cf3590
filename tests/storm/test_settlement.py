"""The storm settles (drains, audits) while its push clients stay connected, so a push that comes
after the load is counted with its real latency instead of missed."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hongbao.bench.storm import runner
from hongbao.bench.storm.plan import populate
from hongbao.bench.storm.push import QUIET_S
from hongbao.bench.storm.runner import StormOptions, run_load
from hongbao.bench.storm.scenario import load_scenario
from hongbao.bench.storm.wire import storm_secret

from tests.server.conftest import Server

RUN = "set0"
USERS = 12


def test_push_clients_stay_connected_through_the_settlement(
    make_server: Callable[..., Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event pushed to every online user during the settlement, after the clients' quiet wait,
    reaches each of them once."""
    monkeypatch.setattr(runner.secrets, "token_hex", lambda n: RUN)  # the run tag names the users
    server = make_server()
    scenario = load_scenario(
        "smoke",
        overrides={
            "duration_s": 2.0,
            "tail_s": 1.0,
            "users": USERS,
            "groups": 3,
            "send_rate": 4.0,
            "processes": 2,
            "online_p": 1.0,
            "drop_p": 0.0,
            "group_sizes": [[1.0, 3, 6]],
        },
    )
    setup = populate(scenario, RUN).setup_calls(RUN)
    users = sorted(
        {u for c in setup if c.op == "group" and c.body for u in [c.user, *c.body["members"]]}
    )  # online: every member

    def settle() -> float:
        time.sleep(QUIET_S + 1.0)  # the clients' quiet wait is over: they used to have closed by now
        sent = time.time()
        with server.client("admin", admin=True) as admin:
            for user in users:
                answer = admin.post(
                    "/v1/admin/push", json={"user_id": user, "event": "late", "data": {"order_id": "x"}}
                )
                assert answer.status_code == 200 and answer.json()["result"] == "delivered_to_socket", answer.text
        return sent

    result, sent = run_load(
        StormOptions(server.url, scenario, storm_secret(server.data_dir, None), tmp_path / "work"), settle
    )
    assert sorted(result.online) == users and len(users) >= 3 and result.calls > 0
    late = sorted(
        (user, wall) for summary in result.push for event, _, user, wall in summary["deliveries"] if event == "late"
    )
    assert [user for user, _ in late] == users
    assert all(0 <= wall - sent < 10 for _, wall in late)
