"""A real embedded backend (SQLite file + shared-memory admission table) on a manual clock."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from itertools import count
from pathlib import Path

import hongbao_native
import pytest
from hongbao.core.clock import ManualClock
from hongbao.server.composition import Backend, create_admission, embedded

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, ms
_names = count()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def admission() -> Iterator[hongbao_native.AdmissionTable]:
    table = create_admission(f"test-{os.getpid()}-{next(_names)}")
    yield table
    table.unlink()


@pytest.fixture
def make_backend(
    tmp_path: Path, clock: ManualClock, admission: hongbao_native.AdmissionTable
) -> Iterator[Callable[..., Backend]]:
    """Open one more worker's backend on the same data directory (same DB file, same admission)."""
    opened: list[Backend] = []

    def make(**kwargs: object) -> Backend:
        backend = embedded(tmp_path, admission, clock=clock, **kwargs)  # type: ignore[arg-type]
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        assert backend.sqlite is not None
        backend.sqlite.close()


@pytest.fixture
def backend(make_backend: Callable[..., Backend]) -> Backend:
    return make_backend()
