"""Running a storm: the setup in this process, the load in ``processes`` spawned processes with a
rich progress display, the settlement (drain and audit) while their push clients stay connected,
then every process's samples gathered into one ``LoadResult``.

The setup (top-ups, groups) runs first, as fast as the pool allows; the load processes then
build their plans, say they are ready, and all start at one wall-clock instant, so their
``t`` values share a time base.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import secrets
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import orjson
import uvloop
from hongbao.bench.storm.http1 import Entries, Http1Client
from hongbao.bench.storm.load import Executor, Sample
from hongbao.bench.storm.plan import SETUP, Call, populate
from hongbao.bench.storm.proc import LoadJob, load_main
from hongbao.bench.storm.push import GRACE_S, home, is_online
from hongbao.bench.storm.record import Recorder, merge, read_record
from hongbao.bench.storm.scenario import Scenario
from hongbao.bench.storm.wire import Tokens, token_expiry
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

READY_TIMEOUT_S = 120.0
START_MARGIN_S = 0.3
DONE_TIMEOUT_S = GRACE_S + 30.0  # a process's last pushes, then its file
LOG_EVERY_S = 5.0  # the progress line's period when the console is not a terminal
T = TypeVar("T")


class StormError(RuntimeError):
    """The storm could not run: the setup failed, or a load process died (the message says why)."""


class Meter(Protocol):
    """Measures the target over the load (``peak.py``'s CPU meter): ``start()`` just before the
    load begins, after the setup; ``stop()`` once the credits have drained, before the audit."""

    def start(self) -> None:
        """Take the first reading."""

    def stop(self) -> None:
        """Take the last reading."""


@dataclass(frozen=True)
class StormOptions:
    """One storm: ``url`` of the target, the ``scenario``, the HS256 ``secret`` to mint tokens,
    ``work_dir`` for per-process files, optional ``record`` / ``replay`` JSONL files; ``key_origin``
    names where the secret came from (``var/jwt.key``...) in the message of a refused token;
    ``backend`` and ``workers`` describe the target in the report ("" and None: not known);
    ``meter``, if given, is started just before the load and stopped once the credits drained;
    ``entries``: several URLs of one target (a fleet's nodes, docs/architecture.md section 9),
    each user's requests going to the entry its id hashes to (http1.Entries; empty: ``url``);
    the setup and the settlement use ``url``."""

    url: str
    scenario: Scenario
    secret: str
    work_dir: Path
    record: Path | None = None
    replay: Path | None = None
    console: Console | None = None
    key_origin: str = "the storm's secret"
    backend: str = ""
    workers: int | None = None
    meter: Meter | None = None
    entries: tuple[str, ...] = ()


@dataclass
class LoadResult:
    """What the clients saw: every attempt's sample, call outcomes by ``"{op} ok|failed|skipped"``,
    the packets sent (order id -> [audience, count, sender, paid at]), the distinct receipts
    answered (order id, user, fen, opened at), repeated opens answered with another amount
    (``disagreements``: must be 0), each process's push summary (``push.py``), the groups' members
    by name, the online users, the load's wall time (s) and the setup's, and each load process's
    ``generator`` use over the load ({"cpu_s", "wall_s"}: its CPU and wall seconds, ``proc.py``).
    Times: wall clock, s."""

    samples: list[Sample] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    packets: dict[str, list[Any]] = field(default_factory=dict)
    receipts: list[tuple[str, str, int, float]] = field(default_factory=list)
    disagreements: int = 0
    push: list[dict[str, Any]] = field(default_factory=list)
    groups: dict[str, list[str]] = field(default_factory=dict)
    online: list[str] = field(default_factory=list)
    load_s: float = 0.0
    setup_s: float = 0.0
    calls: int = 0
    started_at: float = 0.0  # wall time (s) of the load's start: every sample's t counts from it
    generator: list[dict[str, float]] = field(default_factory=list)


async def _setup(opts: StormOptions, calls: list[Call], tokens: Tokens, recorder: Recorder | None) -> dict[str, str]:
    # Every setup call starts at once and waits for one of ``connections`` client connections: the
    # timeout bounds the connect and the answer, not that wait (a slower target still gets set up).
    client = Http1Client(opts.url, opts.scenario.connections, opts.scenario.timeout_s, wait_counts=False)
    executor = Executor(Entries([client]), tokens, time.monotonic(), opts.scenario.busy_retries, recorder)
    try:
        await executor.play(calls)
    finally:
        client.close()
    failed = {k: v for k, v in executor.counts.items() if not k.endswith(" ok")}
    if failed:
        codes = Counter(
            f"{op} {status} {code}" for op, _, _, status, code, _ in executor.samples if status >= 300 or status == 0
        )
        outcomes = ", ".join(f"{name} {n}" for name, n in sorted(failed.items()))
        answers = ", ".join(f"{answer} x{n}" for answer, n in codes.most_common())
        raise StormError(f"setup failed: {outcomes}; answers: {answers}")
    return executor.names()


def setup_calls(opts: StormOptions, run: str) -> list[Call]:
    """The population calls: from the replay file, or from the scenario's plan for ``run``."""
    if opts.replay is not None:
        return [c for c in read_record(opts.replay) if c.packet == SETUP]
    return populate(opts.scenario, run).setup_calls(run)


def probe(url: str) -> None:
    """Raise StormError unless ``url`` answers ``GET /healthz`` with 200 within 5 s."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/healthz", timeout=5) as response:
            if response.status == 200:
                return
    except OSError as exc:
        raise StormError(f"the target {url} does not answer /healthz: {exc}") from None
    raise StormError(f"the target {url} answers /healthz with {response.status}")


def check_key(url: str, secret: str, origin: str) -> None:
    """Raise StormError when the target refuses (401 or 403) a user token minted with ``secret``
    (from ``origin``) on ``GET /v1/balance``, a read without effects; any other answer passes (a
    target without the route, such as the baseline, is not judged here). Raises StormError too
    when it does not answer within 5 s."""
    request = urllib.request.Request(
        url.rstrip("/") + "/v1/balance", headers={"Authorization": Tokens(secret).bearer("storm-key-check")}
    )
    try:
        with urllib.request.urlopen(request, timeout=5):
            return
    except urllib.error.HTTPError as exc:
        if exc.code not in (401, 403):
            return
        raise StormError(
            f"the target {url} refused a token signed with {origin} (GET /v1/balance answered {exc.code}): "
            "is --data-dir the target's data directory (or --jwt-secret its secret)?"
        ) from None
    except OSError as exc:
        raise StormError(f"the target {url} does not answer GET /v1/balance: {exc}") from None


def run_load(opts: StormOptions, settle: Callable[[], T]) -> tuple[LoadResult, T]:
    """Check the target answers and accepts the key, set up the population, then play the load in
    ``scenario.processes`` processes with a progress display; once every process has played its
    calls, run ``settle()`` (drain, audit) while their push clients stay connected, so a push
    that arrives during the settlement is counted with its real latency. Returns the result and
    what ``settle`` returned; raises StormError when the target does not answer, refuses the
    key, the setup fails or a process dies."""
    probe(opts.url)
    check_key(opts.url, opts.secret, opts.key_origin)
    opts.work_dir.mkdir(parents=True, exist_ok=True)
    run = secrets.token_hex(3)
    result = LoadResult()
    started = time.monotonic()
    recorder = Recorder(opts.work_dir / "record-setup.jsonl") if opts.record else None
    setup = setup_calls(opts, run)
    token_exp = token_expiry()
    try:
        known = uvloop.run(_setup(opts, setup, Tokens(opts.secret, token_exp), recorder))
    finally:
        if recorder is not None:
            recorder.close()
    result.setup_s = time.monotonic() - started
    result.groups = {c.name: [c.user, *c.body["members"]] for c in setup if c.op == "group" and c.name and c.body}
    result.online = sorted({u for members in result.groups.values() for u in members if is_online(u, opts.scenario)})
    procs = opts.scenario.processes
    jobs = [
        LoadJob(
            opts.entries or (opts.url,),
            opts.secret,
            token_exp,
            opts.scenario,
            run,
            p,
            procs,
            known,
            [u for u in result.online if home(u, procs) == p],
            opts.replay,
            opts.work_dir / f"record-{p}.jsonl" if opts.record else None,
            opts.work_dir / f"samples-{p}.json",
        )
        for p in range(procs)
    ]
    settled = _spawn_and_watch(jobs, result, opts.console or Console(stderr=True), settle, opts.meter)
    for job in jobs:
        data: dict[str, Any] = orjson.loads(job.samples.read_bytes())
        result.samples += [tuple(s) for s in data["samples"]]
        result.counts.update(data["counts"])
        result.packets.update(data["packets"])
        result.receipts += [tuple(r) for r in data["receipts"]]
        result.disagreements += data["disagreements"]
        result.push.append(data["push"])
        result.generator.append(data["generator"])
    if opts.record is not None:
        merge([opts.work_dir / "record-setup.jsonl", *(j.record for j in jobs if j.record)], opts.record)
    return result, settled


def _spawn_and_watch(
    jobs: list[LoadJob], result: LoadResult, console: Console, settle: Callable[[], T], meter: Meter | None
) -> T:
    ctx = multiprocessing.get_context("spawn")
    messages = ctx.Queue()
    start, go, settled = ctx.Value("d", 0.0), ctx.Event(), ctx.Event()
    processes = [
        ctx.Process(
            target=load_main, args=(job, messages, start, go, settled), daemon=True, name=f"storm-load-{job.proc}"
        )
        for job in jobs
    ]
    for process in processes:
        process.start()
    try:
        sizes: dict[int, int] = {}
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(sizes) < len(jobs):
            message = _next(messages, processes, deadline)
            if message[0] == "ready":
                sizes[message[1]] = message[2]
        result.calls = sum(sizes.values())
        if meter is not None:
            meter.start()
        start.value = result.started_at = time.time() + START_MARGIN_S
        go.set()
        began = time.monotonic()
        _watch(messages, processes, result.calls, console)
        result.load_s = time.monotonic() - began - START_MARGIN_S
        outcome = settle()
        settled.set()
        done: set[int] = set()
        deadline = time.monotonic() + DONE_TIMEOUT_S
        while len(done) < len(jobs):
            message = _next(messages, processes, deadline)
            if message[0] == "done":
                done.add(message[1])
        for process in processes:
            process.join(timeout=30)
        return outcome
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)


def _next(messages: Any, processes: list[Any], deadline: float) -> tuple[Any, ...]:
    while True:
        try:
            message: tuple[Any, ...] = messages.get(timeout=0.1)
        except queue_module.Empty:
            dead = [p.name for p in processes if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                codes = ", ".join(f"{p.name} {p.exitcode}" for p in processes)
                raise StormError(
                    f"load processes {', '.join(dead) or 'did not answer'} (exit codes: {codes})"
                ) from None
            continue
        if message[0] == "error":
            raise StormError(f"load process {message[1]} failed:\n{message[2]}")
        return message


def _watch(messages: Any, processes: list[Any], total: int, console: Console) -> None:
    """Follow the load processes' progress until each has played its calls: a live bar on a
    terminal; elsewhere (a log, a pipe) a whole line every ``LOG_EVERY_S`` and a last one."""
    if not console.is_terminal:
        _log_progress(messages, processes, total, console)
        return
    progress = Progress(
        TextColumn("[bold]storm"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )
    task = progress.add_task("calls", total=total)
    done: dict[int, int] = {}
    counts: dict[int, dict[str, int]] = {}
    loaded: set[int] = set()
    status = Text()
    with Live(Group(progress, status), console=console, refresh_per_second=4, transient=False):
        while len(loaded) < len(processes):
            message = _next(messages, processes, float("inf"))
            if message[0] == "progress":
                done[message[1]], counts[message[1]] = message[2], message[3]
                progress.update(task, completed=sum(done.values()))
                status.plain = _status_line(counts)
            elif message[0] == "loaded":
                loaded.add(message[1])


def _log_progress(messages: Any, processes: list[Any], total: int, console: Console) -> None:
    done: dict[int, int] = {}
    counts: dict[int, dict[str, int]] = {}
    loaded: set[int] = set()
    began = last = time.monotonic()
    while len(loaded) < len(processes):
        message = _next(messages, processes, float("inf"))
        if message[0] == "progress":
            done[message[1]], counts[message[1]] = message[2], message[3]
        elif message[0] == "loaded":
            loaded.add(message[1])
        now = time.monotonic()
        if now - last >= LOG_EVERY_S or len(loaded) == len(processes):
            last = now
            line = f"storm {sum(done.values())}/{total} calls, {now - began:.0f} s: {_status_line(counts)}"
            console.print(line, markup=False, highlight=False)


def _status_line(counts: dict[int, dict[str, int]]) -> str:
    """Calls so far per operation: answered 2xx, answered otherwise (a late member's ``finished``
    among them: the report tells the expected outcomes from the errors), skipped."""
    total: Counter[str] = Counter()
    for part in counts.values():
        total.update(part)
    parts = []
    for op in ("send", "pay", "grab", "open"):
        ok, failed, skipped = total[f"{op} ok"], total[f"{op} failed"], total[f"{op} skipped"]
        parts.append(
            f"{op} {ok} ok" + (f" {failed} not 2xx" if failed else "") + (f" {skipped} skipped" if skipped else "")
        )
    return " · ".join(parts)
