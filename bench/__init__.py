"""hongbao.bench: benchmark suites of the native hot paths (pytest-benchmark) and, later, the storm
load generator, the money audit and reports."""
