"""The storm as a deterministic list of HTTP calls, from a scenario and its seed.

Every request the storm makes is a ``Call``: who makes it, when (seconds after the load starts),
and what it waits for. Calls refer to ids the server hands out through ``{name}`` placeholders:
``g3`` is group 3's id, ``s17`` packet 17's pre-order id (from the send), ``p17`` the same id once
the pay succeeded, ``k17.4`` the grab that precedes an open. A call that names ``needs`` waits
until each of those calls answered 2xx; if one failed, the call is skipped (a member never
opens a packet whose pay failed, nor one whose grab said it is gone).

The population (users, groups, senders' top-ups) comes from one generator seeded with the
scenario's seed; each packet's reactions from a generator seeded with (seed, packet index), so
one load process can expand its own packets without the others and the plan never depends on
how many processes run it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from hongbao.bench.storm.scenario import Scenario

SETUP = -1  # the ``packet`` of population calls (top-ups, groups), run before the load


@dataclass(slots=True)
class Call:
    """One planned request. ``path`` and the string values of ``body`` may hold ``{name}``
    placeholders of ``needs``; ``name`` is what this call's 2xx answer defines (its
    ``group_id`` or ``order_id``); ``packet`` picks the load process (``SETUP`` before the load);
    ``tag`` marks a duplicate click (``dup``) or a client's re-send of an answered request (``retry``)."""

    seq: str
    at: float
    op: str
    user: str
    method: str
    path: str
    body: dict[str, Any] | None = None
    packet: int = SETUP
    needs: tuple[str, ...] = ()
    name: str | None = None
    key: str | None = None
    tag: str = ""


@dataclass(frozen=True, slots=True)
class PacketHead:
    """What the sender decides: when (s after the start), who, to which group, which kind, how much."""

    index: int
    at: float
    sender: str
    group: int
    kind: str
    count: int
    total_fen: int
    receiver: str | None


@dataclass
class Population:
    """Users, groups (members, creator first) and the packets they send, with the setup calls."""

    users: list[str]
    groups: list[list[str]]
    packets: list[PacketHead] = field(default_factory=list)

    def setup_calls(self, run: str) -> list[Call]:
        """Top-ups (each sender gets exactly what their packets need; ``run`` makes the
        Idempotency-Keys unique) and group creations."""
        need: dict[str, int] = {}
        for head in self.packets:
            need[head.sender] = need.get(head.sender, 0) + head.total_fen
        calls = [
            Call(
                f"t{i}",
                0.0,
                "topup",
                "admin",
                "POST",
                f"/v1/admin/accounts/{user}/topup",
                {"amount_fen": fen},
                key=f"storm-{run}-{user}",
            )
            for i, (user, fen) in enumerate(sorted(need.items()))
        ]
        calls += [
            Call(f"g{g}", 0.0, "group", members[0], "POST", "/v1/groups", {"members": members[1:]}, name=f"g{g}")
            for g, members in enumerate(self.groups)
        ]
        return calls


def _weighted(rng: random.Random, pairs: list[tuple[Any, float]]) -> Any:
    return rng.choices([v for v, _ in pairs], weights=[w for _, w in pairs])[0]


def populate(scenario: Scenario, run: str) -> Population:
    """Users ``{run}u{i}``, groups drawn from the size mix, and the packets sent over
    ``duration_s`` as a Poisson process of rate ``send_rate``, all from the scenario's seed."""
    rng = random.Random(scenario.seed)
    users = [f"{run}u{i:06d}" for i in range(scenario.users)]
    groups = []
    for _ in range(scenario.groups):
        _, lo, hi = _weighted(rng, [((w, lo, hi), w) for w, lo, hi in scenario.group_sizes])
        groups.append(rng.sample(users, rng.randint(lo, hi)))
    population = Population(users, groups)
    t = rng.expovariate(scenario.send_rate)
    while t < scenario.duration_s:
        g = rng.randrange(len(groups))
        members = groups[g]
        sender = rng.choice(members)
        kind = _weighted(rng, list(scenario.kinds))
        count = (
            1
            if kind == "exclusive"
            else rng.randint(min(scenario.count_min, len(members)), min(scenario.count_max, len(members)))
        )
        total = rng.randint(scenario.total_min_fen, scenario.total_max_fen)
        if kind == "equal":
            total = max(1, total // count) * count
        receiver = rng.choice([m for m in members if m != sender]) if kind == "exclusive" else None
        population.packets.append(
            PacketHead(len(population.packets), round(t, 4), sender, g, kind, count, total, receiver)
        )
        t += rng.expovariate(scenario.send_rate)
    return population


def _send_body(head: PacketHead) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": head.kind, "count": head.count, "greeting": "恭喜发财"}
    if head.kind == "equal":
        body["per_share_fen"] = head.total_fen // head.count
    else:
        body["total_fen"] = head.total_fen
    if head.receiver is not None:
        body["receiver_id"] = head.receiver
    else:
        body["group_id"] = f"{{g{head.group}}}"
    return body


def packet_calls(scenario: Scenario, population: Population, head: PacketHead) -> list[Call]:
    """The calls of one packet, by its time: send, pay (maybe re-sent), then each reacting
    member's grab (with ``grab_p``) and open after a log-normal delay cut at ``tail_s``, with
    duplicate clicks (``duplicate_p``) and re-sends (``retry_p``)."""
    rng = random.Random(scenario.seed * 1_000_003 + head.index)
    k, seq = head.index, iter(range(1 << 30))
    calls = [
        Call(
            f"{k}.{next(seq)}",
            head.at,
            "send",
            head.sender,
            "POST",
            "/v1/packets",
            _send_body(head),
            k,
            (f"g{head.group}",) if head.receiver is None else (),
            f"s{k}",
        )
    ]
    paid_at = head.at + rng.uniform(0.1, 1.0)
    calls.append(
        Call(
            f"{k}.{next(seq)}",
            paid_at,
            "pay",
            head.sender,
            "POST",
            f"/v1/packets/{{s{k}}}/pay",
            None,
            k,
            (f"s{k}",),
            f"p{k}",
        )
    )
    if rng.random() < scenario.retry_p:
        calls.append(
            Call(
                f"{k}.{next(seq)}",
                paid_at + rng.uniform(0.5, 3.0),
                "pay",
                head.sender,
                "POST",
                f"/v1/packets/{{s{k}}}/pay",
                None,
                k,
                (f"s{k}",),
                tag="retry",
            )
        )
    members = [head.receiver] if head.receiver is not None else population.groups[head.group]
    for member in members:
        if rng.random() >= scenario.open_p:
            continue
        delay = min(
            scenario.tail_s, math.exp(math.log(scenario.delay_median_s) + scenario.delay_sigma * rng.gauss(0, 1))
        )
        at = paid_at + delay
        needs: tuple[str, ...] = (f"p{k}",)
        if rng.random() < scenario.grab_p:
            grab = f"k{k}.{next(seq)}"
            calls.append(Call(grab[1:], at, "grab", member, "POST", f"/v1/packets/{{p{k}}}/grab", None, k, needs, grab))
            at, needs = at + rng.uniform(0.1, 0.6), (f"p{k}", grab)
        path = f"/v1/packets/{{p{k}}}/open"
        calls.append(Call(f"{k}.{next(seq)}", at, "open", member, "POST", path, None, k, needs))
        if rng.random() < scenario.duplicate_p:
            calls.append(
                Call(
                    f"{k}.{next(seq)}",
                    at + rng.uniform(0.01, 0.2),
                    "open",
                    member,
                    "POST",
                    path,
                    None,
                    k,
                    needs,
                    tag="dup",
                )
            )
        if rng.random() < scenario.retry_p:
            calls.append(
                Call(
                    f"{k}.{next(seq)}",
                    at + rng.uniform(1.0, 5.0),
                    "open",
                    member,
                    "POST",
                    path,
                    None,
                    k,
                    needs,
                    tag="retry",
                )
            )
    return calls


def load_calls(scenario: Scenario, population: Population, proc: int, procs: int) -> list[Call]:
    """The calls of load process ``proc`` of ``procs`` (packets ``index % procs == proc``), by time."""
    mine = [
        c for head in population.packets if head.index % procs == proc for c in packet_calls(scenario, population, head)
    ]
    return sorted(mine, key=lambda c: c.at)
