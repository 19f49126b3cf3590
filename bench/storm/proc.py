"""One load process: build its share of the plan (or of a record), connect its online users'
push clients, wait for the common start, play it, report progress to the parent, keep the push
clients connected until the parent has settled the storm (so pushes that come late are counted,
with their real latency), wait for the pushes to go quiet, and leave its samples, observations
and deliveries in a JSON file.

Processes are started with ``spawn`` (no state inherited from the parent's event loop or rich's
threads). The parent hands each a ``LoadJob``; the process answers on the queue with
``("ready", proc, calls)``, then ``("progress", proc, done, counts)`` every ``PROGRESS_S``
seconds, then ``("loaded", proc)`` when its calls are played, then (after the parent sets
``settled``) ``("done", proc)`` once its file is written; or ``("error", proc, text)``. The file
also holds the process's own CPU time over the load (``generator``: CPU seconds, every thread,
and wall seconds from the common start until its last call answered), so a report can tell a
generator that ran out of CPU from a slow server.

The garbage collector is off while the calls are played (what was made before, the plan, the
tokens and the push clients, is frozen out of it): on a busy machine one collection of a load
process's ~100k objects paused its loop for up to half a second, which the report counted as
generator lag. The load makes little cyclic garbage (a closed connection, a failed request's
traceback); it is collected once the calls are played.
"""

from __future__ import annotations

import asyncio
import gc
import time
import traceback
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import orjson
import uvloop
from hongbao.bench.storm.http1 import Entries, Http1Client
from hongbao.bench.storm.load import Executor, warm
from hongbao.bench.storm.plan import SETUP, Call, load_calls, populate
from hongbao.bench.storm.push import PushUsers
from hongbao.bench.storm.record import Recorder, read_record
from hongbao.bench.storm.scenario import Scenario
from hongbao.bench.storm.wire import Tokens

PROGRESS_S = 0.25


@dataclass(frozen=True)
class LoadJob:
    """What load process ``proc`` of ``procs`` plays: the plan of ``scenario`` for run tag ``run``
    (or the load lines of the ``replay`` file), against ``urls`` (one target's entries: a
    user's requests go to the one its id hashes to; its push connection to the first), minting
    with ``secret`` tokens that expire at ``token_exp`` (s since the epoch; the same in every
    process, so a user has one token);
    ``known`` ids defined in the setup; the ``online`` users whose push connections it holds;
    where to write its ``record`` lines and ``samples``."""

    urls: tuple[str, ...]
    secret: str
    token_exp: int
    scenario: Scenario
    run: str
    proc: int
    procs: int
    known: dict[str, str]
    online: list[str]
    replay: Path | None
    record: Path | None
    samples: Path


def job_calls(job: LoadJob) -> list[Call]:
    """The calls of ``job``, sorted by time."""
    if job.replay is not None:
        calls = [c for c in read_record(job.replay) if c.packet != SETUP and c.packet % job.procs == job.proc]
        return sorted(calls, key=lambda c: c.at)
    return load_calls(job.scenario, populate(job.scenario, job.run), job.proc, job.procs)


def load_main(job: LoadJob, queue: Queue[Any], start: Synchronized[float], go: Event, settled: Event) -> None:
    """The body of a load process (the ``multiprocessing`` target)."""
    try:
        uvloop.run(_main(job, job_calls(job), queue, start, go, settled))
        queue.put(("done", job.proc))
    except BaseException:
        queue.put(("error", job.proc, traceback.format_exc()))
        raise


async def _main(
    job: LoadJob, calls: list[Call], queue: Queue[Any], start: Synchronized[float], go: Event, settled: Event
) -> None:
    tokens = Tokens(job.secret, job.token_exp)
    warm(tokens, calls)
    push = PushUsers(job.urls[0], job.online, tokens, job.scenario)
    await push.connect()
    gc.collect()
    gc.freeze()  # the plan, the tokens and the push clients: never scanned again
    queue.put(("ready", job.proc, len(calls)))
    await asyncio.get_running_loop().run_in_executor(None, go.wait)
    gc.disable()
    t0 = time.monotonic() + (start.value - time.time())
    cpu0 = time.process_time()
    push.schedule_drops(t0)
    recorder = Recorder(job.record) if job.record is not None else None
    client = Entries([Http1Client(url, job.scenario.connections, job.scenario.timeout_s) for url in job.urls])
    executor = Executor(client, tokens, t0, job.scenario.busy_retries, recorder, job.known)

    async def report() -> None:
        while True:
            queue.put(("progress", job.proc, executor.done, dict(executor.counts)))
            await asyncio.sleep(PROGRESS_S)

    reporter = asyncio.create_task(report())
    try:
        await executor.play(calls)
    finally:
        reporter.cancel()
        client.close()
        if recorder is not None:
            recorder.close()
    generator = {"cpu_s": time.process_time() - cpu0, "wall_s": time.monotonic() - t0}
    gc.enable()
    queue.put(("progress", job.proc, executor.done, dict(executor.counts)))
    queue.put(("loaded", job.proc))
    await asyncio.get_running_loop().run_in_executor(None, settled.wait)
    await push.stop()
    job.samples.write_bytes(
        orjson.dumps(
            {
                "samples": executor.samples,
                "counts": executor.counts,
                "packets": executor.packets,
                "receipts": [(order, user, amount, wall) for (order, user), (amount, wall) in executor.opened.items()],
                "disagreements": executor.disagreements,
                "push": push.summary(),
                "generator": generator,
            }
        )
    )
