"""Test-wide settings: hypothesis profiles with pinned seeds so `make test` is repeatable.

`HYPOTHESIS_PROFILE=dev` gives more examples and fresh randomness for local bug hunting."""

import asyncio
import inspect
import os
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop
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


# Async tests: every `async def test_*` runs once under asyncio and once under uvloop, and fails if
# the loop's exception handler fired (an exception nobody awaited), as uvloop's own test base does.
LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if inspect.iscoroutinefunction(metafunc.function):
        metafunc.fixturenames.append("event_loop_kind")
        metafunc.parametrize("event_loop_kind", list(LOOPS), indirect=True)


@pytest.fixture
def event_loop_kind(request: pytest.FixtureRequest) -> str:
    """The event loop an async test runs on: "asyncio" or "uvloop"."""
    return str(request.param)


@pytest.fixture
def loop_cleanups() -> list[Callable[[], Awaitable[None]]]:
    """Async cleanups of loop-bound resources (pools, clients) made for an async test: a fixture
    appends to this list, and they run on the test's own loop, last first, after the test."""
    return []


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    loop = LOOPS[pyfuncitem.callspec.params["event_loop_kind"]]()
    unhandled: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    names = inspect.signature(pyfuncitem.obj).parameters
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    try:
        try:
            loop.run_until_complete(pyfuncitem.obj(**kwargs))
        finally:
            for cleanup in reversed(pyfuncitem.funcargs.get("loop_cleanups", [])):
                loop.run_until_complete(cleanup())
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
    assert not unhandled, f"the event loop's exception handler fired: {unhandled}"
    return True
