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
    }


def test_the_relays_cost_is_the_cpu_beyond_one_nodes_per_relayed_request() -> None:
    """1000 requests at 3.3 ms against 3.0 ms, 400 of them relayed (300 to an owner, 100 across):
    a share of 0.4 and 0.75 ms a relay; a dirty audit shows as such."""
    fleet = _report(3.3, 1000, 40.0) | {
        "relays": {"hongbao_fleet_forwarded_total": 300.0, "hongbao_fleet_region_forwarded_total": 100.0}
    }
    result = compare(fleet, _report(3.0, 1000, 30.0, clean=False))
    assert result["relayed_share"] == 0.4 and result["relay_cpu_ms"] == 0.75
    assert result["fleet"]["latency_ms"]["open"] == {"p50": 1.0, "p99": 40.0} and result["fleet"]["audit_clean"]
    assert not result["one_node"]["audit_clean"]
    nothing = compare(fleet | {"relays": dict.fromkeys(fleet["relays"], 0.0)}, _report(3.0, 1000, 30.0))
    assert nothing["relayed_share"] == 0.0 and nothing["relay_cpu_ms"] is None
