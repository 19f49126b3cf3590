"""pytest-benchmark suites of the native hot paths, each raced against a reference in the same run."""
