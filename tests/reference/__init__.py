"""Small pure-Python references of the native hot paths.

Each module mirrors one file of native/src and is written for clarity, not speed: the native
functions are checked against these with hypothesis (tests/native) and raced against them in the
benchmarks (bench/native)."""
