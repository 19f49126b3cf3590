"""/metrics of a live two-worker server against its documentation and what the server holds: the
Metrics table of docs/operations.md is the catalog's (server/metric_catalog.py); every metric it
lists, every ``hongbao_*`` name the docs mention and every one docs/grafana-dashboard.json's
queries use is exported, and every exported one is in the table; the gauges say what the node
holds (WebSocket connections, online users, opens in flight, crediting mode), the latency
histogram keeps GET and DELETE of one route apart, and the JSON of /v1/admin/metrics agrees."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from hongbao.server.metric_catalog import CATALOG, with_table
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect
from websockets.typing import Subprotocol

from tests.server.conftest import Server, finish_server, start_server
from tests.server.flows import eventually, group, ok, paid_packet, topup

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "docs" / "operations.md"
GRAFANA = ROOT / "docs" / "grafana-dashboard.json"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "docs" / "openapi.yaml"]
NAME = re.compile(r"\bhongbao_[a-z_]+[a-z]\b")
NOT_METRICS = {"hongbao_native"}  # the native module's name
MEMBERS = ["live-m1", "live-m2"]
Families = dict[str, Any]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A two-worker server for the module; stopped (exit 0, money audit) after the last test."""
    server = start_server(tmp_path_factory.mktemp("metrics"), workers=2)
    yield server
    finish_server(server)


def _families(server: Server) -> Families:
    """The server's /metrics, parsed: family name -> family."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return {family.name: family for family in text_string_to_metric_families(text)}


def _value(families: Families, sample: str, **labels: str) -> float | None:
    """The value of series ``sample`` with exactly ``labels`` (None when absent)."""
    for family in families.values():
        for s in family.samples:
            if s.name == sample and s.labels == labels:
                return float(s.value)
    return None


def _exported_names(families: Families) -> set[str]:
    """Every name a document or query may use: each series' name, and each family's name but a
    counter's (a counter is ``_total`` only)."""
    names = {s.name for family in families.values() for s in family.samples}
    names |= {f"{name}_total" if family.type == "counter" else name for name, family in families.items()}
    return names


def _table_metrics() -> set[str]:
    """The metric names in the first column of docs/operations.md's generated table."""
    table = OPERATIONS.read_text(encoding="utf-8").split("<!-- metrics:begin")[1].split("<!-- metrics:end")[0]
    return set(re.findall(r"^\| `(hongbao_[a-z_]+)` \|", table, re.MULTILINE))


def test_the_docs_table_is_the_catalog() -> None:
    """docs/operations.md's Metrics table is what the catalog generates (rerun
    ``python -m hongbao.server.metric_catalog docs/operations.md`` when this fails)."""
    text = OPERATIONS.read_text(encoding="utf-8")
    assert with_table(text) == text
    assert _table_metrics() == {spec.exported for spec in CATALOG}


def test_every_documented_metric_is_exported_and_every_exported_one_documented(server: Server) -> None:
    """The families /metrics exports are the table's; each hongbao_* name in README, docs/*.md and
    openapi.yaml, and each one in the Grafana dashboard's queries (every panel has one), is exported."""
    families = _families(server)
    exported = _exported_names(families)
    table = _table_metrics()
    assert {f"{name}_total" if f.type == "counter" else name for name, f in families.items()} == table
    for doc in DOCS:
        mentioned = set(NAME.findall(doc.read_text(encoding="utf-8"))) - NOT_METRICS
        assert mentioned <= exported, (doc.name, mentioned - exported)
    dashboard = json.loads(GRAFANA.read_text(encoding="utf-8"))
    for panel in dashboard["panels"]:
        used = {name for target in panel["targets"] for name in NAME.findall(target["expr"])}
        assert used and used <= exported, (panel["title"], used - exported)


def test_gauges_and_histograms_say_what_the_node_holds(server: Server) -> None:
    """Two members online over WebSocket: ws_connections (summed over both workers) and
    online_users read 2, then 0 once they close; a packet opened and one cancelled: GET and DELETE
    of /v1/packets/{order_id} are apart, push latency counts each delivered push, nothing is in
    flight, the crediting mode is realtime_large, no breaker exists, no worker ran a full garbage
    collection, and /v1/admin/metrics agrees."""
    sender = "live-s"
    topup(server, sender, 100_000)
    gid = group(server, sender, MEMBERS)
    with ExitStack() as stack:
        for uid in MEMBERS:
            token = server.token(uid)
            url = server.url.replace("http://", "ws://") + "/v1/ws"
            stack.enter_context(connect(url, subprotocols=[Subprotocol("bearer"), Subprotocol(token)]))

        def online() -> Families:
            families = _families(server)
            [sample] = families["hongbao_ws_connections"].samples
            assert sample.value == 2 and _value(families, "hongbao_online_users") == 2
            return families

        node = eventually(online)["hongbao_ws_connections"].samples[0].labels["node"]
        order_id = paid_packet(server, sender, {"kind": "lucky", "count": 2, "total_fen": 200, "group_id": gid})
        with server.client(MEMBERS[0]) as member:
            ok(member.post(f"/v1/packets/{order_id}/open"))
            ok(member.get(f"/v1/packets/{order_id}"))
        with server.client(sender) as client:
            unpaid = ok(client.post("/v1/packets", json={"count": 1, "total_fen": 5, "group_id": gid}), 201)
            ok(client.delete(f"/v1/packets/{unpaid['order_id']}"))

        def settled() -> Families:
            """Every worker's snapshot holds the flow (another worker's may be a second old)."""
            families = _families(server)
            pushed = _value(families, "hongbao_push_delivered_total")
            # packet_received to both members (a group push), opened and credited to the opener
            assert pushed == 4 and _value(families, "hongbao_push_latency_seconds_count") == pushed
            for method in ("GET", "DELETE"):
                labels = {"method": method, "route": "/v1/packets/{order_id}"}
                assert _value(families, "hongbao_http_requests_total", status="200", **labels) == 1
                assert _value(families, "hongbao_http_request_duration_seconds_count", **labels) == 1
            assert _value(families, "hongbao_opens_total") == 1
            return families

        families = eventually(settled)
    assert _value(families, "hongbao_opens_in_flight") == 0
    assert _value(families, "hongbao_credits_pending") is not None
    assert [(s.labels["mode"], s.value) for s in families["hongbao_crediting_mode"].samples] == [
        ("deferred", 0),
        ("queued", 0),
        ("realtime_large", 1),
    ]
    assert families["hongbao_breaker_open"].samples == []  # embedded, no Redis: nothing to trip
    collections = {s.labels["generation"]: s.value for s in families["hongbao_gc_collections"].samples}
    assert sorted(collections) == ["0", "1", "2"] and collections["2"] == 0  # no full collection (gc_policy)

    def offline() -> None:
        families = _families(server)
        assert _value(families, "hongbao_ws_connections", node=node) == 0
        assert _value(families, "hongbao_online_users") == 0

    eventually(offline)

    def summarised() -> None:
        with server.client("admin", admin=True) as admin:
            summary = ok(admin.get("/v1/admin/metrics"))["metrics"]
        assert summary["hongbao_opens_total"] == [{"labels": {}, "value": 1.0}]
        assert summary["hongbao_ws_connections"] == [{"labels": {"node": node}, "value": 0.0}]
        assert [s["count"] for s in summary["hongbao_push_latency_seconds"]] == [4]

    eventually(summarised)
