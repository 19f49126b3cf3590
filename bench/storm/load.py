"""Playing calls: an open-loop executor, and the body of one load process.

The executor walks the calls by time and starts each at its planned moment (open loop: a slow
server does not slow the storm down, the requests pile up as real users' would). A call first
waits for the calls it ``needs`` (skipped if one failed), then fills in their ids and sends;
on 429 busy it tries again after Retry-After (with jitter, at most ``busy_retries`` times), as
our clients do. Every attempt becomes a sample ``(op, t, latency_s, status, code, lag_s)``:
``t`` seconds after the start, ``code`` the answer's error code ("" for a 2xx, ``already_opened``
for a 2xx grab or open telling a user who had opened the first amount), ``lag_s`` how late the
call started against the plan, before waiting for what it needs (a growing lag means the
generator, not the server, is the bottleneck).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import orjson
from hongbao.bench.storm.http1 import Entries
from hongbao.bench.storm.plan import Call
from hongbao.bench.storm.record import Recorder, call_line
from hongbao.bench.storm.wire import Answer, Tokens, request

Sample = tuple[str, float, float, int, str, float]
MAX_BUSY_WAIT_S = 2.0


def _repeat(op: str, body: dict[str, Any] | None) -> str:
    """``already_opened`` for a 2xx ``body`` that answers a user who had opened the packet (a grab's
    ``status: opened``, an open's ``repeat: true``), else ""."""
    if body is None:
        return ""
    repeat = body.get("status") == "opened" if op == "grab" else op == "open" and body.get("repeat") is True
    return "already_opened" if repeat else ""


def fill(template: str, values: dict[str, str]) -> str:
    """``template`` with each ``{name}`` of ``values`` replaced by its id."""
    for name, value in values.items():
        template = template.replace("{" + name + "}", value)
    return template


def bearer(tokens: Tokens, call: Call) -> str:
    """The Authorization header of ``call``: its user's token (an admin token for a top-up),
    minted on first use (``warm`` mints them before a load)."""
    return tokens.bearer(call.user, admin=call.op == "topup")


def warm(tokens: Tokens, calls: Sequence[Call]) -> None:
    """Mint every token ``calls`` use, before the load: a mint costs tens of microseconds of CPU
    that would otherwise delay the calls planned around it and count as the generator's load."""
    for call in calls:
        bearer(tokens, call)


class Executor:
    """Runs calls against the server of ``entries`` (each call to its user's entry), from the
    monotonic instant ``t0``. ``known`` holds ids defined before (the groups, for the load processes)."""

    def __init__(
        self,
        entries: Entries,
        tokens: Tokens,
        t0: float,
        busy_retries: int,
        recorder: Recorder | None = None,
        known: dict[str, str] | None = None,
    ) -> None:
        self.entries, self.tokens, self.t0 = entries, tokens, t0
        self.busy_retries, self.recorder = busy_retries, recorder
        self.samples: list[Sample] = []
        self.counts: Counter[str] = Counter()  # "{op} ok" / "{op} failed" / "{op} skipped"
        self.done = 0
        # what the push expectations need (times: wall clock when the request left): order id ->
        # [audience ("g3" or "@user"), count, sender, paid at]; (order id, user) -> (the amount first
        # answered, opened at: ``_opened``); (order id, user) -> when its first open attempt left
        self.packets: dict[str, list[Any]] = {}
        self.opened: dict[tuple[str, str], tuple[int, float]] = {}
        self._tried: dict[tuple[str, str], float] = {}
        self.disagreements = 0  # repeated opens answered with another amount than the first
        self._wall = time.time() - time.monotonic()
        self._names: dict[str, asyncio.Future[str | None]] = {}
        for name, value in (known or {}).items():
            self._future(name).set_result(value)
        self._defined = set(known or ())

    def _future(self, name: str) -> asyncio.Future[str | None]:
        future = self._names.get(name)
        if future is None:
            future = self._names[name] = asyncio.get_running_loop().create_future()
        return future

    def names(self) -> dict[str, str]:
        """Every id defined so far, by name."""
        return {n: f.result() for n, f in self._names.items() if f.done() and f.result() is not None}  # type: ignore[misc]

    async def play(self, calls: Sequence[Call]) -> None:
        """Start every call at ``t0 + call.at`` (calls come sorted by ``at``); return when all ended.
        A call needing a name that no call here (nor ``known``) defines, as in a cut record, is skipped."""
        tasks: set[asyncio.Task[None]] = set()
        self._defined.update(call.name for call in calls if call.name is not None)
        for call in calls:
            delay = self.t0 + call.at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(self.run(call))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        while tasks:
            await asyncio.gather(*tasks)

    async def run(self, call: Call) -> None:
        """Wait for what ``call`` needs, send it (retrying 429s), record it, define its name."""
        lag = max(0.0, time.monotonic() - self.t0 - call.at)  # the generator's own delay, before any wait
        values: dict[str, str] = {}
        for name in call.needs:
            value = await self._future(name) if name in self._defined else None
            if value is None:
                self._finish(call, call.path, call.body, None, 0, None)
                return
            values[name] = value
        path = fill(call.path, values)
        body = (
            {k: fill(v, values) if isinstance(v, str) else v for k, v in call.body.items()} if call.body else call.body
        )
        payload = orjson.dumps(body) if body is not None else None
        auth = bearer(self.tokens, call)
        if call.op == "open":
            self._tried.setdefault((values[call.needs[0]], call.user), self._wall + time.monotonic())
        answer: Answer | None = None
        for attempt in range(1, self.busy_retries + 2):
            answer = await request(self.entries.for_user(call.user), path, call.method, auth, payload, call.key)
            self.samples.append(
                (
                    call.op,
                    answer.started - self.t0,
                    answer.latency_s,
                    answer.status,
                    answer.code or _repeat(call.op, answer.body),
                    lag if attempt == 1 else 0.0,
                )
            )
            if answer.status != 429 or attempt > self.busy_retries:
                break
            await asyncio.sleep(min(MAX_BUSY_WAIT_S, answer.retry_after_s or 0.05) * random.uniform(0.5, 1.5))
        assert answer is not None
        created = None
        if answer.body is not None:
            if call.name is not None:
                created = str(answer.body.get("group_id") or answer.body.get("order_id") or "")
            self._observe(call, body, answer.body, self._wall + answer.started)
        self._finish(call, path, body, answer.status, attempt, created)

    def _observe(self, call: Call, sent: dict[str, Any] | None, answer: dict[str, Any], wall: float) -> None:
        order = str(answer.get("order_id", ""))
        if call.op == "send" and sent is not None:
            audience = f"@{sent['receiver_id']}" if "receiver_id" in sent else call.needs[0]
            self.packets[order] = [audience, int(sent.get("count", 1)), call.user, None]
        elif call.op == "pay" and order in self.packets and self.packets[order][3] is None:
            self.packets[order][3] = wall
        elif call.op == "open":
            self._opened((order, call.user), int(answer.get("amount_fen", 0)), answer.get("repeat") is True, wall)

    def _opened(self, key: tuple[str, str], amount: int, repeat: bool, wall: float) -> None:
        """Record an open answered with ``amount`` (``repeat``: the user had opened it before) by
        the attempt that left at ``wall``. The receipt's time is that of the attempt that made it:
        the one answered as a first open. While only repeats have answered, the one that made it
        went unanswered (its worker died after the commit, and its ``opened`` push with it): the
        time is then the earliest attempt's, as the push was lost no earlier, and a ``reset``
        told after it counts as telling the loss (bench/storm/delivery.py)."""
        held = self.opened.get(key)
        if held is None:
            self.opened[key] = (amount, self._tried.get(key, wall) if repeat else wall)
        elif held[0] != amount:
            self.disagreements += 1
        elif not repeat:
            self.opened[key] = (amount, wall)

    def _finish(
        self, call: Call, path: str, body: dict[str, Any] | None, status: int | None, attempts: int, created: str | None
    ) -> None:
        outcome = "skipped" if status is None else "ok" if 200 <= status < 300 else "failed"
        self.counts[f"{call.op} {outcome}"] += 1
        self.done += 1
        if call.name is not None:
            future = self._future(call.name)
            if not future.done():
                future.set_result(created if outcome == "ok" else None)
        if self.recorder is not None:
            self.recorder.write(call_line(call, path, body, status, attempts, created))
