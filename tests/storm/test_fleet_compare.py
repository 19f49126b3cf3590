"""The fleet benchmark's figures (bench/storm/fleet.py) from two storm reports: the share of
requests relayed and the relays' CPU cost, against one node with the same workers."""

from __future__ import annotations

from typing import Any

from hongbao.bench.storm.fleet import compare


def _report(server_ms: float, requests: int, open_p99: float, clean: bool = True) -> dict[str, Any]:
    ops = {op: {"rps": 10.0, "p50_ms": 1.0, "p99_ms": open_p99} for op in ("send", "pay", "grab", "open")}
    return {
        "operations": ops,
        "cpu": {"server_ms_per_request": server_ms, "requests": {"send": requests // 2, "open": requests // 2}},
        "audit": {"ok": clean},
        "row_lock": {"most": 2, "samples": 100},
    }


def test_the_relays_cost_is_the_cpu_and_time_beyond_one_nodes_per_relayed_request() -> None:
    """1000 requests at 3.3 ms against 3.0 ms, 400 of them relayed (300 to an owner, 100 across):
    a share of 0.4 and 0.75 ms of CPU a relay. 400 relays of 6 ms among 1000 packet requests the
    routes counted in 4.8 s (a relayed request at each node it passed): 600 served in place at
    4 ms, so a relay adds 2 ms. A dirty audit shows as such."""
    fleet = _report(3.3, 1000, 40.0) | {
        "relays": {"hongbao_fleet_forwarded_total": 300.0, "hongbao_fleet_region_forwarded_total": 100.0},
        "times": {
            "hongbao_fleet_relay_seconds_sum": 2.4,
            "hongbao_fleet_relay_seconds_count": 400.0,
            "owned_sum": 4.8,
            "owned_count": 1000.0,
        },
    }
    result = compare(fleet, _report(3.0, 1000, 30.0, clean=False))
    assert result["relayed_share"] == 0.4 and result["relay_cpu_ms"] == 0.75
    assert (result["relay_round_trip_ms"], result["served_here_ms"], result["relay_latency_ms"]) == (6.0, 4.0, 2.0)
    assert result["fleet"]["packet_row_transactions_max"] == 2
    assert result["fleet"]["latency_ms"]["open"] == {"p50": 1.0, "p99": 40.0} and result["fleet"]["audit_clean"]
    assert not result["one_node"]["audit_clean"]
    nothing = compare(fleet | {"relays": dict.fromkeys(fleet["relays"], 0.0)}, _report(3.0, 1000, 30.0))
    assert nothing["relayed_share"] == 0.0 and nothing["relay_cpu_ms"] is None
