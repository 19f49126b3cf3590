"""Test-wide settings: hypothesis profiles with pinned seeds so `make test` is repeatable.

`HYPOTHESIS_PROFILE=dev` gives more examples and fresh randomness for local bug hunting."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", deadline=None, max_examples=2000, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
