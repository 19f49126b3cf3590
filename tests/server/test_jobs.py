"""The background jobs' loop (server/app.py ``every``): what it logs when a job fails."""

from __future__ import annotations

import asyncio
import logging

import pytest
from hongbao.core import errors
from hongbao.core.breaker import BreakerOpen
from hongbao.server.app import every


async def test_a_dependency_down_is_quiet_and_other_failures_name_the_job(caplog: pytest.LogCaptureFixture) -> None:
    """A job that meets MySQL down (Degraded) or an open breaker logs nothing itself (the pool or the
    breaker said it once) and runs again; any other failure is logged once, with the job's name and
    its traceback."""
    stopping, calls = asyncio.Event(), []

    async def job() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise errors.Degraded("database db_00 is unavailable")
        if len(calls) == 2:
            raise BreakerOpen("redis is down (breaker open)")
        if len(calls) == 3:
            raise RuntimeError("a bug")
        stopping.set()

    with caplog.at_level(logging.DEBUG, logger="hongbao.server"):
        await every("refunds", 0.001, job, stopping)()
    assert calls == [0, 1, 2, 3]
    records = [r for r in caplog.records if r.name == "hongbao.server"]
    assert [(r.levelname, r.getMessage()) for r in records] == [
        ("ERROR", "background job refunds failed; retrying in 0.00 s")
    ]
    assert records[0].exc_info is not None and records[0].exc_info[0] is RuntimeError
