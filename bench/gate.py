"""Release gate over a saved pytest-benchmark run: same-run ratios against their floors.

Usage: ``python -m hongbao.bench.gate bench-results/native.json``. Every benchmark in the run carries
``extra_info["impl"]`` and ``extra_info["correct"]``; within a group, the ratio of two impls is the
comparison impl's fastest round over the native fastest round (higher is better for native). The
gate never looks at an absolute time: these machines are shared and noisy, so only ratios measured
in the same run are compared, and of the same run the minimum, the estimate that other load on the
machine disturbs least. Exit status 1 when a ratio is below its floor, a result was wrong, or a gated benchmark
is missing.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Floor:
    """``native`` must be at least ``floor`` times faster than ``against`` in ``group``."""

    group: str
    against: str
    floor: float
    native: str = "native"


FLOORS: tuple[Floor, ...] = (
    Floor("split_all_100", "reference", 30.0),
    Floor("ws_frame_1k", "wsproto", 10.0),
    Floor("ws_frame_1k", "websockets", 1.0),
    Floor("admission_pair", "mp_value_lock", 10.0),
)


def load(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Map (group, impl) -> the benchmark record of a pytest-benchmark JSON file."""
    data = json.loads(path.read_text())
    runs: dict[tuple[str, str], dict[str, Any]] = {}
    for bench in data["benchmarks"]:
        impl = bench.get("extra_info", {}).get("impl", bench["name"])
        runs[(bench["group"] or bench["name"], impl)] = bench
    return runs


def report(runs: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """One line per benchmark: group, impl, fastest round in ns, ratio to the group's native fastest round."""
    lines = []
    for (group, impl), bench in sorted(runs.items()):
        min_ns = bench["stats"]["min"] * 1e9
        native = runs.get((group, "native"))
        ratio = native and bench["stats"]["min"] / native["stats"]["min"]
        ratio_text = f"{ratio:8.2f}x" if ratio else "       -"
        ok = "ok" if bench.get("extra_info", {}).get("correct") else "WRONG"
        lines.append(f"{group:24} {impl:16} {min_ns:14.1f} ns {ratio_text}  {ok}")
    return lines


def check(runs: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """Every violation: wrong results, missing gated benchmarks, ratios under their floor."""
    problems = [
        f"{group}/{impl}: result was not correct"
        for (group, impl), bench in runs.items()
        if not bench.get("extra_info", {}).get("correct")
    ]
    for floor in FLOORS:
        fast, slow = runs.get((floor.group, floor.native)), runs.get((floor.group, floor.against))
        if fast is None or slow is None:
            problems.append(f"{floor.group}: missing {floor.native} or {floor.against}")
            continue
        ratio = slow["stats"]["min"] / fast["stats"]["min"]
        if ratio < floor.floor:
            problems.append(f"{floor.group}: native is {ratio:.2f}x {floor.against}, floor {floor.floor}x")
    return problems


def main(argv: list[str]) -> int:
    """Print the ratio table and the gate's verdict; return the exit status."""
    if len(argv) != 2:
        print("usage: python -m hongbao.bench.gate RESULTS.json", file=sys.stderr)
        return 2
    runs = load(Path(argv[1]))
    print("\n".join(report(runs)))
    problems = check(runs)
    for problem in problems:
        print(f"gate: FAIL {problem}")
    print(f"gate: {len(FLOORS)} floors, {len(problems)} failures")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
