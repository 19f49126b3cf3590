"""The storm's tests use the server tests' real ``hongbao serve`` subprocess (with its money audit at the end)."""

from tests.server.conftest import make_server  # noqa: F401  (a fixture, re-exported for tests/storm)
