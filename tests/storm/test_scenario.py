"""Scenarios: named ones, TOML files and flags, and errors that name the field at fault."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hongbao.bench.storm.plan import load_calls, populate
from hongbao.bench.storm.scenario import NAMED, ScenarioError, load_scenario
from hongbao.bench.storm.stats import percentile


def test_named_scenarios_are_valid() -> None:
    """Every named scenario passes its own checks; hot-group is 500 members on 100-share packets."""
    for name in NAMED:
        assert load_scenario(name).name == name
    hot = load_scenario("hot-group")
    assert (hot.groups, hot.group_sizes, hot.count_min, hot.count_max) == (1, ((1.0, 500, 500),), 100, 100)


def test_file_starts_from_its_base_and_flags_win(tmp_path: Path) -> None:
    """A TOML file overrides its base scenario; flag overrides override the file."""
    path = tmp_path / "s.toml"
    path.write_text('base = "hot-group"\n[storm]\nduration_s = 7\nkinds = { lucky = 1, equal = 1 }\n')
    scenario = load_scenario(file=path, overrides={"send_rate": 3})
    assert (scenario.duration_s, scenario.send_rate, scenario.users) == (7.0, 3.0, 500)
    assert scenario.kinds == (("lucky", 1.0), ("equal", 1.0))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("durration_s = 5", "unknown scenario field 'durration_s'"),
        ("duration_s = 'soon'", "duration_s = 'soon' is not valid"),
        ("open_p = 1.5", "open_p must be a probability in [0, 1], got 1.5"),
        ("users = 10", "a group of 500 members needs at least that many users (10)"),
        ("kinds = { lucky = 1, golden = 2 }", "kinds must map lucky, equal, exclusive to weights"),
        ("base = 'new-year'", "unknown scenario 'new-year' (named: smoke, new-year-eve, hot-group)"),
        ("duration_s = ", "not valid TOML"),
    ],
)
def test_errors_name_the_field(tmp_path: Path, text: str, message: str) -> None:
    """A bad scenario file raises ScenarioError whose message names what is wrong."""
    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(file=path)
    assert message in str(info.value)


def test_cli_refuses_a_bad_scenario_with_exit_2(tmp_path: Path) -> None:
    """``hongbao storm`` with a bad --set exits 2 and says which field, before touching any server."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hongbao.server.cli",
            "storm",
            "--target",
            "http://127.0.0.1:9",
            "--jwt-secret",
            "x",
            "--set",
            "retry_p=2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "retry_p must be a probability in [0, 1], got 2.0" in done.stderr


def test_plan_is_deterministic_and_independent_of_processes() -> None:
    """The same seed plans the same calls, and splitting them over 1 or 3 processes changes nothing."""
    scenario = load_scenario(
        "smoke", overrides={"duration_s": 2, "users": 60, "groups": 10, "group_sizes": [[1.0, 3, 40]]}
    )
    population = populate(scenario, "r1")
    one = [(c.seq, c.at, c.op, c.user, c.path, c.body) for c in load_calls(scenario, population, 0, 1)]
    three = [
        (c.seq, c.at, c.op, c.user, c.path, c.body)
        for p in range(3)
        for c in load_calls(scenario, populate(scenario, "r1"), p, 3)
    ]
    assert one and sorted(one) == sorted(three)
    sends = [c for c in one if c[2] == "send"]
    assert len(sends) == len(population.packets)
    topups = [c.body["amount_fen"] for c in population.setup_calls("r1") if c.op == "topup" and c.body]
    assert sum(topups) == sum(h.total_fen for h in population.packets)  # each sender gets exactly what they send


def test_percentile_is_nearest_rank() -> None:
    """Nearest-rank percentiles: p50 of 1..10 is 5, p90 is 9, p99 is 10; empty is 0."""
    values = [float(v) for v in range(1, 11)]
    assert [percentile(values, q) for q in (50, 90, 99, 100)] == [5.0, 9.0, 10.0, 10.0]
    assert percentile([], 50) == 0.0
