"""Push delivery: what the storm's online users should have received, what they did, how fast.

Expected (events of ``core/events.py``, for users online during the storm):
- ``packet_received`` for every paid packet, to each online member of its group (the sender
  included) or to its exclusive receiver, caused by the pay;
- ``opened`` for every receipt a client was answered, to its online opener, caused by the open;
- ``finished`` for every packet whose every share a client saw opened, to each online member of
  its group or to the exclusive packet's sender, caused by the last open.
Other events delivered (``credited``...) are counted, not expected. A missing event whose user was
told ``reset`` after its cause is ``told`` (the client reloads over HTTP, docs/architecture.md section 7);
``untold`` counts the others, which fail the storm. Latency is the time from the
start of the causing request to the message's arrival at the client (wall clock, one machine),
in ms. docs/architecture.md section 11: every expected event must arrive (counted after dedupe).
The ``timeline`` counts expected and delivered events and their latency by the bucket (of the
report's width, ``series.py``) in which their cause started.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from hongbao.bench.storm import series
from hongbao.bench.storm.runner import LoadResult
from hongbao.bench.storm.stats import percentile

EVENTS = ("packet_received", "opened", "finished")
Key = tuple[str, str, str]  # (event, order id, user)


def expected_pushes(result: LoadResult) -> dict[Key, float]:
    """Every expected delivery, with the wall time (s) its causing request left."""
    online = set(result.online)
    opens: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for order, user, _, wall in result.receipts:
        opens[order].append((user, wall))
    expected: dict[Key, float] = {}
    for order, (audience, count, sender, paid_at) in result.packets.items():
        if paid_at is None:
            continue
        exclusive = audience.startswith("@")
        members = [audience[1:]] if exclusive else result.groups.get(audience, [])
        expected.update({("packet_received", order, m): paid_at for m in members if m in online})
        expected.update({("opened", order, u): wall for u, wall in opens[order] if u in online})
        if opens[order] and len(opens[order]) == count:
            last = max(wall for _, wall in opens[order])
            expected.update({("finished", order, m): last for m in ([sender] if exclusive else members) if m in online})
    return expected


def _latency(values: list[float]) -> dict[str, float]:
    values.sort()
    return {
        "p50_ms": round(percentile(values, 50), 1),
        "p90_ms": round(percentile(values, 90), 1),
        "p99_ms": round(percentile(values, 99), 1),
        "max_ms": round(values[-1], 1) if values else 0.0,
    }


def _timeline(result: LoadResult, expected: dict[Key, float], delivered: dict[Key, float]) -> dict[str, Any]:
    load = [s for s in result.samples if s[0] in series.LOAD_OPS]
    width = series.bucket_seconds(series.span(load))
    causes = {key: max(0.0, wall - result.started_at) for key, wall in expected.items()}
    count = int(max(causes.values(), default=0.0) // width) + 1
    lines: dict[str, Any] = {"bucket_s": width, "start_s": [i * width for i in range(count)]}
    lines["expected"], lines["delivered"] = [0] * count, [0] * count
    latencies: list[list[float]] = [[] for _ in range(count)]
    for key, t in causes.items():
        bucket = int(t // width)
        lines["expected"][bucket] += 1
        if key in delivered:
            lines["delivered"][bucket] += 1
            latencies[bucket].append(max(0.0, delivered[key] - expected[key]) * 1000.0)
    return lines | series.percentiles(latencies)


def _example(key: Key, due: float, resets: list[float], start: float) -> list[Any]:
    """[event, order id, user, due (s after the load's start), the user's last reset before it
    was due (s after the start; None: none)]: what a missing push's diagnosis starts from."""
    before = [wall for wall in resets if wall < due]
    return [*key, round(due - start, 3), round(max(before) - start, 3) if before else None]


def push_report(result: LoadResult) -> dict[str, Any] | None:
    """Delivered vs expected, latency percentiles (all and per event), client counts, the
    timeline; None when nobody was online."""
    if not result.online:
        return None
    expected = expected_pushes(result)
    delivered: dict[Key, float] = {}
    for summary in result.push:
        for event, order, user, wall in summary["deliveries"]:
            delivered.setdefault((event, order, user), wall)
    missing = [key for key in expected if key not in delivered]
    resets: dict[str, list[float]] = defaultdict(list)
    for summary in result.push:
        for user, wall in summary.get("reset_times", []):
            resets[user].append(wall)
    untold = [key for key in missing if not any(wall >= expected[key] for wall in resets[key[2]])]
    by_event: dict[str, Any] = {}
    everything: list[float] = []
    for event in EVENTS:
        keys = [key for key in expected if key[0] == event]
        latencies = [max(0.0, delivered[k] - expected[k]) * 1000.0 for k in keys if k in delivered]
        everything += latencies
        by_event[event] = {"expected": len(keys), "delivered": len(latencies), **_latency(latencies)}
    return {
        "online_users": len(result.online),
        "reconnects": sum(s["reconnects"] for s in result.push),
        "client_failures": sum(s["failures"] for s in result.push),
        "client_errors": [e for s in result.push for e in s["errors"]][:5],
        "resets": sum(s["resets"] for s in result.push),
        "duplicates": sum(s["duplicates"] for s in result.push),
        "expected": len(expected),
        "delivered": len(expected) - len(missing),
        "missing": len(missing),
        "untold": len(untold),
        "missing_examples": [
            _example(key, expected[key], resets[key[2]], result.started_at) for key in (untold or missing)[:10]
        ],
        **_latency(everything),
        "by_event": by_event,
        "also_delivered": dict(Counter(event for event, _, _ in delivered if event not in EVENTS)),
        "timeline": _timeline(result, expected, delivered),
    }
