"""The benchmark gate judges same-run ratios, never absolute times."""

import json
from pathlib import Path

from hongbao.bench import gate


def _run(tmp_path: Path, medians: dict[tuple[str, str], float], correct: bool = True) -> Path:
    benchmarks = [
        {"name": f"test_{g}_{i}", "group": g, "extra_info": {"impl": i, "correct": correct}, "stats": {"min": m}}
        for (g, i), m in medians.items()
    ]
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"benchmarks": benchmarks}))
    return path


def _passing() -> dict[tuple[str, str], float]:
    medians = {}
    for floor in gate.FLOORS:
        medians[(floor.group, "native")] = 1e-6
        medians[(floor.group, floor.against)] = floor.floor * 1e-6 * 1.5
    return medians


def test_gate_passes_when_every_ratio_clears_its_floor(tmp_path: Path) -> None:
    """A run whose ratios are 1.5x their floors passes with exit status 0."""
    assert gate.main(["gate", str(_run(tmp_path, _passing()))]) == 0


def test_gate_fails_a_ratio_below_its_floor(tmp_path: Path) -> None:
    """native at 29x the reference fails the 30x split floor, and the message says so."""
    medians = _passing()
    medians[("split_all_100", "reference")] = 29e-6
    problems = gate.check(gate.load(_run(tmp_path, medians)))
    assert problems == ["split_all_100: native is 29.00x reference, floor 30.0x"]


def test_gate_fails_wrong_results_and_missing_benchmarks(tmp_path: Path) -> None:
    """A wrong result or a missing comparison is a failure even when times look good."""
    medians = _passing()
    del medians[("admission_pair", "mp_value_lock")]
    problems = gate.check(gate.load(_run(tmp_path, medians, correct=False)))
    assert "admission_pair: missing native or mp_value_lock" in problems
    assert sum("result was not correct" in p for p in problems) == len(medians)
