"""The peak benchmark's rule on synthetic rungs: what holds, where the ladder stops, the knee and the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hongbao.bench.storm import knee
from hongbao.bench.storm.knee import Rung
from hongbao.bench.storm.peak import main, rung_dir, summarize
from hongbao.bench.storm.peak_table import print_peak
from hongbao.bench.storm.scenario import load_scenario
from rich.console import Console


def rung(rate: float, open_p99_ms: float = 120.0, **changes: Any) -> Rung:
    """A rung that holds unless ``changes`` spoil it."""
    opens = {"ok": 50, "attempts": 60, "rps": 5.0, "p50_ms": 20.0, "p99_ms": open_p99_ms}
    values: dict[str, Any] = {
        "operations": {"open": opens},
        "audit_clean": True,
        "lag_p99_ms": 3.0,
        "generator_cores": [0.1, 0.2],
    }
    return Rung(rate, **(values | changes))


def judged(r: Rung) -> Rung:
    """``r`` with its reasons filled in, as the ladder does."""
    r.reasons = knee.verdict(r)
    return r


def test_a_clean_fast_rung_holds_and_each_fault_breaks_it() -> None:
    """Open p99 under 500 ms, no timeout, at most 1 % refused busy, a clean audit and a generator
    that kept up hold; each fault alone does not."""
    assert judged(rung(20)).holds
    faults = {
        "open p99 500 ms >= 500 ms": rung(20, open_p99_ms=500.0),
        "3 requests timed out": rung(20, timeouts=3),
        "2 requests got no answer": rung(20, unanswered=2),
        "2 of 60 requests refused busy (> 1%)": rung(20, busy=2),
        "the audit is not clean": rung(20, audit_clean=False),
        "generator lag p99 100 ms >= 100 ms": rung(20, lag_p99_ms=100.0),
        "a load process used 0.95 of a core (>= 0.9)": rung(20, generator_cores=[0.3, 0.95]),
        "no open was answered": rung(20, operations={}),
        "the storm could not run: setup failed": rung(20, error="setup failed"),
    }
    for reason, faulty in faults.items():
        assert judged(faulty).reasons == [reason], reason
    one_in_a_hundred = {"open": {"ok": 100, "attempts": 100, "p99_ms": 10.0}}
    assert judged(rung(20, operations=one_in_a_hundred, busy=1)).holds  # 1 % refused busy still holds
    assert judged(rung(20, timeouts=1, audit_clean=False)).reasons == ["1 requests timed out", "the audit is not clean"]
    assert knee.generator_limits(rung(20, lag_p99_ms=250.0)) and not knee.generator_limits(rung(20, timeouts=9))
    assert rung(20, lag_p99_ms=250.0).as_json()["generator_limited"] is True


def test_the_ladder_stops_after_the_first_failing_rung() -> None:
    """Each system climbs the rates in order until its first failing rung; the knee is the rung below it."""
    breaks_at = {"a": 40.0, "b": 150.0, "c": 20.0}  # the first rate each system fails
    played: list[tuple[str, float]] = []

    def play(system: str, rate: float) -> Rung:
        played.append((system, rate))
        return rung(rate, timeouts=1) if rate >= breaks_at[system] else rung(rate)

    ladders = knee.climb([150.0, 20.0, 40.0, 80.0], ["a", "b", "c"], play)
    assert played == [("a", 20), ("b", 20), ("c", 20), ("a", 40), ("b", 40), ("b", 80), ("b", 150)]
    assert [r.rate for r in ladders["a"]] == [20, 40] and [r.holds for r in ladders["a"]] == [True, False]
    assert {system: knee.bracket(rungs)[0] for system, rungs in ladders.items()} == {"a": 20, "b": 80, "c": None}
    assert knee.bracket([judged(rung(20)), judged(rung(40, audit_clean=False)), judged(rung(80))]) == (20, 40)


def test_refining_narrows_each_knee_by_bisection() -> None:
    """After the climb each knee is narrowed at midpoints, every system in turn, until the lowest
    failing rate is within the resolution of the knee; a system whose first rate failed goes down
    by halves until a rate holds, then narrows, or stops at LOWEST_RATE with no knee; a ladder with
    no failure is left."""
    breaks_at = {"a": 27.0, "b": 46.0, "low": 6.0, "none": 0.0, "top": 1000.0}
    played: list[tuple[str, float]] = []

    def play(system: str, rate: float) -> Rung:
        played.append((system, rate))
        return rung(rate, open_p99_ms=900.0) if rate >= breaks_at[system] else rung(rate)

    ladders = knee.climb([20.0, 40.0, 80.0], list(breaks_at), play)
    played.clear()
    knee.refine(ladders, play, 0.125)
    # a: 20 | 40 -> 30 fails -> 25 holds -> 27.5 fails (2.5 <= 0.125 x 25); b: 40 | 80 -> 60, 50 fail -> 45 holds
    # low: 20 fails -> 10 fails -> 5 holds -> 7.5, 6.25 fail -> 5.625 holds; none: down to 1.25 (0.625 < LOWEST_RATE)
    assert knee.LOWEST_RATE == 1.0
    assert played == [
        *[("a", 30), ("b", 60), ("low", 10), ("none", 10), ("a", 25), ("b", 50), ("low", 5), ("none", 5)],
        *[("a", 27.5), ("b", 45), ("low", 7.5), ("none", 2.5), ("low", 6.25), ("none", 1.25), ("low", 5.625)],
    ]
    assert {s: knee.bracket(r) for s, r in ladders.items()} == {
        "a": (25, 27.5),
        "b": (45, 50),
        "low": (5.625, 6.25),
        "none": (None, 1.25),
        "top": (80, None),
    }
    played.clear()
    knee.refine(ladders, play, 0.5)  # already narrower than asked: nothing more to play
    assert played == []
    assert knee.bracket(ladders["a"]) == (25, 27.5)
    with pytest.raises(ValueError, match="resolution"):
        knee.refine(ladders, play, 0.0)


def test_each_play_of_a_rate_keeps_its_own_directory(tmp_path: Path) -> None:
    """The first play of a rate reports in ``rate-<R>``, later ones in ``rate-<R>-play<N>``."""
    assert rung_dir(tmp_path, 97.5) == tmp_path / "rate-97.5"
    (tmp_path / "rate-97.5").mkdir()
    assert rung_dir(tmp_path, 97.5) == tmp_path / "rate-97.5-play2"
    (tmp_path / "rate-97.5-play2").mkdir()
    assert rung_dir(tmp_path, 97.5) == tmp_path / "rate-97.5-play3"
    assert rung_dir(tmp_path, 40.0) == tmp_path / "rate-40"


def test_a_rate_holds_by_the_majority_of_its_plays() -> None:
    """With several plays of a rate, it holds when most held (a tie does not); a verdict is settled
    once the plays asked for agree and outnumber the others."""
    fails, holds = judged(rung(30, open_p99_ms=900.0)), judged(rung(30))
    lower = judged(rung(20))
    assert knee.bracket([lower, holds, fails]) == (20, 30)  # 1 of 2: a tie does not hold
    assert knee.bracket([lower, holds, fails, judged(rung(30))]) == (30, None)
    assert knee.tally([fails, lower, holds]) == {20: (1, 1), 30: (1, 2)}
    assert knee.settled([holds], 30, 1) and not knee.settled([holds], 30, 2)
    assert not knee.settled([holds, fails], 30, 2) and knee.settled([holds, fails, judged(rung(30))], 30, 2)
    assert knee.settled([fails, judged(rung(30, timeouts=1))], 30, 2) and not knee.settled([], 30, 1)


def test_settling_plays_each_bracketing_rate_again_until_its_plays_agree() -> None:
    """After the narrowing, the knee and the rate above it are played again, every system in turn;
    a tie takes a third play; a second play that overturns a knee moves it and the new bracket is
    narrowed and settled in turn; a failing top rate that turns out to hold climbs on."""
    verdicts = {  # each system's plays of a rate, in order: True holds
        ("steady", 20): [True],
        ("steady", 40): [False],
        ("steady", 30): [True],
        ("steady", 35): [False, False],
        ("steady", 32.5): [True, True],
        ("flaky", 20): [True],
        ("flaky", 40): [False],
        ("flaky", 30): [True, True],
        ("flaky", 35): [False],
        ("flaky", 32.5): [True, False, False],  # the knee: a tie, then a third play overturns it
        ("late", 20): [True],
        ("late", 40): [False, True, True],  # the climb's stop turns out to hold: on to 80
        ("late", 30): [True],
        ("late", 35): [True],
        ("late", 37.5): [True, True],
        ("late", 80): [False],
        ("late", 60): [False],
        ("late", 50): [True, True],
        ("late", 55): [False, False],
    }
    played: list[tuple[str, float]] = []

    def play(system: str, rate: float) -> Rung:
        n = sum(1 for p in played if p == (system, rate))
        played.append((system, rate))
        return rung(rate) if verdicts[system, rate][n] else rung(rate, open_p99_ms=900.0)

    rates = [20.0, 40.0, 80.0]
    ladders = knee.climb(rates, ["steady", "flaky", "late"], play)
    knee.settle(ladders, play, rates, 0.125, 2)
    brackets = {s: knee.bracket(r) for s, r in ladders.items()}
    assert brackets == {"steady": (32.5, 35), "flaky": (30, 32.5), "late": (50, 55)}
    assert all(knee.settled(ladders[s], rate) for s, (low, high) in brackets.items() for rate in (low, high) if rate)
    counts = {key: len(plays) for key, plays in verdicts.items()}
    assert {key: played.count(key) for key in verdicts} == counts  # every scripted play, no more
    assert played[:6] == [("steady", 20), ("flaky", 20), ("late", 20), ("steady", 40), ("flaky", 40), ("late", 40)]
    with pytest.raises(ValueError, match="plays"):
        knee.settle(ladders, play, rates, 0.125, 0)
    before = len(played)
    knee.settle(ladders, play, rates, 0.125, 1)  # one play each: already settled
    assert len(played) == before


def test_the_report_gives_knees_ratios_and_notes() -> None:
    """peak.json's summary: knees, hongbao / baseline ratios; a topped-out ladder, a ladder with no
    knee and a lagging generator noted."""
    ladders = {
        "hongbao": [judged(rung(20)), judged(rung(40)), judged(rung(80, lag_p99_ms=300.0))],
        "hongbao-offline": [judged(rung(20)), judged(rung(40)), judged(rung(80))],
        "baseline": [judged(rung(20)), judged(rung(40, open_p99_ms=2000.0, lag_p99_ms=150.0))],
    }
    result = summarize(ladders, load_scenario("smoke"), [20.0, 40.0, 80.0], 2, 0.125, 2)
    assert {s: e["knee"] for s, e in result["systems"].items()} == {
        "hongbao": 40,
        "hongbao-offline": 80,
        "baseline": 20,
    }
    assert {s: e["failed_at"] for s, e in result["systems"].items()} == {
        "hongbao": 80,
        "hongbao-offline": None,
        "baseline": 40,
    }
    assert result["knee_ratio"] == {"online": 2.0, "offline": 4.0}
    # online: 40 / 40 (baseline's failing rate) to 80 / 20; offline never failed: no upper bound
    assert result["knee_ratio_bounds"] == {"online": [1.0, 4.0], "offline": [2.0, None]}
    assert result["rule"]["knee_resolution"] == 0.125 and result["rule"]["plays_to_settle"] == 2
    assert result["systems"]["baseline"]["verdicts"] == [
        {"rate": 20, "held": 1, "plays": 1},
        {"rate": 40, "held": 0, "plays": 1},
    ]
    assert result["audits_clean"] is True
    assert result["rule"]["open_p99_ms_below"] == 500.0 and result["rule"]["generator_lag_p99_ms_below"] == 100.0
    rungs = result["systems"]["hongbao"]["rungs"]
    assert [r["holds"] for r in rungs] == [True, True, False] and rungs[2]["generator_limited"] is True
    notes = " | ".join(result["notes"])
    assert "the generator was the limit for hongbao at 80/s (generator lag p99 300 ms >= 100 ms" in notes
    assert "the generator also fell behind for baseline at 40/s" in notes and "(open p99 2000 ms >= 500 ms)" in notes
    assert "hongbao-offline held every rate up to 80/s" in notes
    console = Console(record=True, width=400)
    print_peak(result, console)
    assert "baseline 20/s held 1 of 1 (fails 40/s held 0 of 1)" in console.export_text()
    dirty = summarize({"baseline": [judged(rung(20, audit_clean=False))]}, load_scenario("smoke"), [20.0], 2, 0.125, 1)
    assert dirty["audits_clean"] is False and dirty["knee_ratio"] == {"online": None, "offline": None}
    assert dirty["knee_ratio_bounds"] == {"online": None, "offline": None}
    assert dirty["notes"] == ["baseline held no rate down to 20/s: it has no knee, and no ratio"]
    refined = {"baseline": [judged(rung(20)), judged(rung(40, timeouts=1)), judged(rung(30))]}
    narrowed = summarize(refined, load_scenario("smoke"), [20.0, 40.0], 2, 0.125, 1)
    rates = [r["rate"] for r in narrowed["systems"]["baseline"]["rungs"]]
    assert rates == [20, 30, 40]  # rungs by rate, the refining ones among the ladder's
    assert (narrowed["systems"]["baseline"]["knee"], narrowed["systems"]["baseline"]["failed_at"]) == (30, 40)
    # the last rung played held, but 40 failed: the knee is bounded, no "held every rate" note
    assert narrowed["notes"] == []


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--resolution", "0"], "resolution must be a positive share of the knee: '0'"),
        (["--resolution", "-1"], "resolution must be a positive share of the knee: '-1'"),
        (["--resolution", "x"], "resolution must be a positive share of the knee: 'x'"),
        (["--rates", "0"], "rates must be positive sends/s: '0'"),
        (["--plays", "0"], "plays must be a whole number of at least 1: '0'"),
        (["--plays", "1.5"], "plays must be a whole number of at least 1: '1.5'"),
    ],
)
def test_bad_ladder_flags_are_refused_before_any_rung(
    flags: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A resolution or a rate that is not positive stops the command at once (usage error, status 2)."""
    with pytest.raises(SystemExit) as stopped:
        main(flags)
    assert stopped.value.code == 2
    assert said in capsys.readouterr().err
