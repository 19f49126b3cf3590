"""The peak benchmark's rule (``peak.py``): when a send rate holds, the ladder, and the knee.

A rung is one play of the whole storm at one send rate (sends/s) against one system. It HOLDS when
- opens are answered within ``OPEN_P99_MS`` at p99 (over the 2xx answers, as the storm's report
  computes it), and at least one open was answered;
- no request timed out, and none went without an answer (a refused or reset connection);
- at most ``BUSY_SHARE`` of the requests were refused busy (429, retried by the storm): a system
  that sheds most of its load quickly does not hold the rate it sheds;
- the money audit is clean (and no repeated open was answered with another amount);
- the generator kept up: its lag p99 (how late calls left against the plan, ``load.py``) is below
  ``LAG_P99_MS`` and no load process used ``GENERATOR_CORE`` of a core or more over the load.
  A rung that fails only these measured the load generator, not the server: it does not hold
  either, and ``generator_limited`` says so (the generator must get cheaper, not the server).
A rung whose storm could not run (``error``, e.g. the setup was refused) does not hold.

The ladder plays the rates in ascending order, for every system at each rate before the next
rate (so the systems share the machine's conditions), and a system stops climbing after its
first rung that does not hold. A system whose first rate failed goes down instead, halving the
rate until one holds (at least ``LOWEST_RATE``: 20 fails -> 10 -> 5 ...), so that a machine slower
than the ladder was sized for still gives every system a knee. Then each knee is narrowed
(``refine``): a rung at the midpoint between the highest rate that held and the lowest that did
not, the bound it moves, until the two are within ``RESOLUTION`` of the held rate (20 | 40 -> 30
-> 25 or 35 -> ...). Then the two
rates that bracket each knee are played again (``settle``) until each has a settled verdict:
``PLAYS`` plays agreeing and more than disagree (2 of 2, or 2 of 3 when the first two differ). A
rate's verdict is the majority of its plays (a tie does not hold); when a second play moves a knee,
narrowing and settling go on from the new bracket. A knee is the highest rate that holds below the
lowest rate that does not (None: not even ``LOWEST_RATE`` held); the lowest failing rate is its upper
bound. Without the narrowing a knee is known only to within a step of the ladder (a factor of 2
on the default doubling rates, and so is a ratio of knees); without the second plays one rung that
tips either way near a knee moves it a step, and a ratio of knees with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

OPEN_P99_MS = 500.0
LAG_P99_MS = 100.0
GENERATOR_CORE = 0.9
BUSY_SHARE = 0.01
RESOLUTION = 0.125  # refine until the lowest failing rate is within this share of the knee
PLAYS = 2  # plays agreeing on each rate that brackets a knee
LOWEST_RATE = 1.0  # sends/s: a system that fails its first rate goes down by halves, not below this


@dataclass
class Rung:
    """One play at ``rate`` sends/s. ``operations``: the storm report's per-operation entries
    (``ok``, ``attempts``, ``rps``, ``p50_ms``, ``p99_ms``...); ``timeouts`` and ``unanswered``:
    attempts that got no answer (timed out; other client errors); ``busy``: 429 answers;
    ``audit_clean`` and the first ``violations``; ``lag_p99_ms`` and ``generator_cores`` (each load
    process's CPU over the load, in cores); ``cpu``: the servers' CPU (``peak.py``); ``push``:
    push delivery (None: nobody online); ``loadavg``: the machine's 1-minute load average when the
    rung began; ``error``: why the storm could not run ("" when it ran). ``reasons`` is filled by
    ``judge`` ([] when it holds)."""

    rate: float
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    timeouts: int = 0
    unanswered: int = 0
    busy: int = 0
    audit_clean: bool = False
    violations: list[str] = field(default_factory=list)
    lag_p99_ms: float = 0.0
    generator_cores: list[float] = field(default_factory=list)
    cpu: dict[str, Any] = field(default_factory=dict)
    push: dict[str, Any] | None = None
    loadavg: float = 0.0
    error: str = ""
    reasons: list[str] = field(default_factory=list)

    @property
    def holds(self) -> bool:
        """True when ``judge`` found no reason against this rung."""
        return not self.reasons

    def as_json(self) -> dict[str, Any]:
        """The rung as plain JSON values, with ``holds`` and ``generator_limited``."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return out | {"holds": self.holds, "generator_limited": bool(generator_limits(self))}


def generator_limits(rung: Rung) -> list[str]:
    """Why the load generator, not the server, may have set the pace of ``rung`` ([] when it kept up)."""
    reasons = []
    if rung.lag_p99_ms >= LAG_P99_MS:
        reasons.append(f"generator lag p99 {rung.lag_p99_ms:g} ms >= {LAG_P99_MS:g} ms")
    busiest = max(rung.generator_cores, default=0.0)
    if busiest >= GENERATOR_CORE:
        reasons.append(f"a load process used {busiest:g} of a core (>= {GENERATOR_CORE:g})")
    return reasons


def verdict(rung: Rung) -> list[str]:
    """Every reason ``rung`` does not hold (the module's rule), [] when it holds."""
    if rung.error:
        return [f"the storm could not run: {rung.error}"]
    reasons = []
    opens = rung.operations.get("open", {})
    if not opens.get("ok"):
        reasons.append("no open was answered")
    elif opens["p99_ms"] >= OPEN_P99_MS:
        reasons.append(f"open p99 {opens['p99_ms']:g} ms >= {OPEN_P99_MS:g} ms")
    if rung.timeouts:
        reasons.append(f"{rung.timeouts} requests timed out")
    if rung.unanswered:
        reasons.append(f"{rung.unanswered} requests got no answer")
    requests = sum(int(op.get("attempts", 0)) for op in rung.operations.values())
    if rung.busy > BUSY_SHARE * requests:
        reasons.append(f"{rung.busy} of {requests} requests refused busy (> {BUSY_SHARE:.0%})")
    if not rung.audit_clean:
        reasons.append("the audit is not clean")
    return reasons + generator_limits(rung)


def climb(rates: Iterable[float], systems: Sequence[str], play: Callable[[str, float], Rung]) -> dict[str, list[Rung]]:
    """Play the ladder: for each rate in ascending order, ``play(system, rate)`` for every system of
    ``systems`` whose previous rung held; each rung is judged (``reasons``) as it comes. Returns the
    rungs played, by system."""
    ladders: dict[str, list[Rung]] = {system: [] for system in systems}
    for rate in sorted(rates):
        climbing = [s for s in systems if not ladders[s] or ladders[s][-1].holds]
        if not climbing:
            break
        for system in climbing:
            _step(ladders, play, system, rate)
    return ladders


def _step(ladders: dict[str, list[Rung]], play: Callable[[str, float], Rung], system: str, rate: float) -> None:
    """Play ``system`` at ``rate``, judge the rung and add it to the system's ladder."""
    rung = play(system, rate)
    rung.reasons = verdict(rung)
    ladders[system].append(rung)


def tally(rungs: Sequence[Rung]) -> dict[float, tuple[int, int]]:
    """Each rate of ``rungs`` (sends/s) with (plays that held, plays), in ascending rate order."""
    counts: dict[float, tuple[int, int]] = {}
    for r in sorted(rungs, key=lambda r: r.rate):
        held, played = counts.get(r.rate, (0, 0))
        counts[r.rate] = (held + r.holds, played + 1)
    return counts


def bracket(rungs: Sequence[Rung]) -> tuple[float | None, float | None]:
    """(knee, failed_at) of ``rungs``, in sends/s: a rate holds when most of its plays held (a tie
    does not); the knee is the highest rate that holds below the lowest rate that does not (None: no
    rate holds below it); ``failed_at`` is that lowest failing rate, the knee's upper bound (None:
    every rate holds)."""
    holds = {rate: 2 * held > played for rate, (held, played) in tally(rungs).items()}
    ceiling = min((rate for rate, ok in holds.items() if not ok), default=None)
    held = [rate for rate, ok in holds.items() if ok and (ceiling is None or rate < ceiling)]
    return max(held, default=None), ceiling


def settled(rungs: Sequence[Rung], rate: float, plays: int = PLAYS) -> bool:
    """True when ``plays`` of ``rate``'s plays in ``rungs`` agree and outnumber those that differ."""
    held, played = tally(rungs).get(rate, (0, 0))
    most, fewest = max(held, played - held), min(held, played - held)
    return most >= plays and most > fewest


def refine(ladders: dict[str, list[Rung]], play: Callable[[str, float], Rung], resolution: float = RESOLUTION) -> None:
    """Narrow each system's knee by bisection after ``climb``: while the lowest failing rate is
    more than ``resolution`` x the knee above it, ``play`` the midpoint, judge it and append it to
    the system's rungs; a system with no rate held yet plays half its lowest failing rate (not
    below ``LOWEST_RATE``) until one holds. Each step plays every system still narrowing, in turn
    (they share the machine's conditions). A system with no failing rung (a knee that is only a
    lower bound), or whose failing rate is below twice ``LOWEST_RATE`` with none held, is left as
    it is. Raises ValueError when ``resolution`` <= 0."""
    if not resolution > 0:
        raise ValueError(f"resolution must be a positive share of the knee, got {resolution!r}")
    while True:
        probes = {}
        for system, rungs in ladders.items():
            low, high = bracket(rungs)
            if low is None and high is not None and high / 2 >= LOWEST_RATE:
                probes[system] = high / 2
            elif low is not None and high is not None and high - low > resolution * low:
                probes[system] = (low + high) / 2
        if not probes:
            return
        for system, rate in probes.items():
            _step(ladders, play, system, rate)


def settle(
    ladders: dict[str, list[Rung]],
    play: Callable[[str, float], Rung],
    rates: Iterable[float],
    resolution: float = RESOLUTION,
    plays: int = PLAYS,
) -> None:
    """After ``climb`` on ``rates``: narrow each knee (``refine``), then play again each rate that
    brackets a knee (the knee, then its ``failed_at``) until it is ``settled``, one rung per system
    in turn (they share the machine's conditions), narrowing again whenever a verdict moves a
    bracket. A system whose highest failing rate turns out to hold climbs on to the next of
    ``rates``. Each rate is played at most ``2 x plays - 1`` times, so this ends. Raises
    ValueError when ``resolution`` <= 0 or ``plays`` < 1."""
    if plays < 1:
        raise ValueError(f"plays must be at least 1, got {plays!r}")
    while True:
        refine(ladders, play, resolution)
        probes = {}
        for system, rungs in ladders.items():
            low, high = bracket(rungs)
            unsettled = [rate for rate in (low, high) if rate is not None and not settled(rungs, rate, plays)]
            above = [rate for rate in rates if low is not None and high is None and rate > low]
            if unsettled or above:
                probes[system] = unsettled[0] if unsettled else min(above)
        if not probes:
            return
        for system, rate in probes.items():
            _step(ladders, play, system, rate)
