"""The client fleet of the push benchmark: light WebSocket clients (``client.Counter``) spread over
several processes, so that the clients are not what is measured, driven by the parent through
pipes, one command at a time, every process at once.

A process holds its share of the connections. Commands (``Fleet`` methods): ``connect`` (open
connections for some users, minting their tokens with the server's key, at most ``CONCURRENCY``
handshakes in flight per process), ``reset`` (count from zero), ``expect`` (wait until every
connection has counted a number of text frames, or a timeout), ``close`` (drop every connection
and wait until they are gone). Each process raises its RLIMIT_NOFILE to the hard limit first.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import resource
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import uvloop
from hongbao.bench.push.client import Counter, Target, greeting
from hongbao.server.auth import mint

CONCURRENCY = 100  # handshakes in flight per client process
CONNECT_TIMEOUT_S = 60.0


def raise_nofile() -> int:
    """Raise this process's open-file limit (RLIMIT_NOFILE) to its hard limit; the new soft limit."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


@dataclass(frozen=True)
class Counts:
    """What the fleet's connections counted: text ``frames`` and their ``payload_bytes`` in all,
    the fewest and most frames one connection got, ``closes`` received, connections ``open``."""

    frames: int
    payload_bytes: int
    least: int
    most: int
    closes: int
    open: int


class _Pool:
    """The connections of one client process."""

    def __init__(self) -> None:
        self.conns: list[Counter] = []

    async def connect(self, target: Target, users: list[str], secret: str, topic: str | None) -> tuple[int, list[str]]:
        """Open a connection per user (token minted with ``secret``; subscribed to ``topic``,
        or idle after a ``hello`` when None); (connections made, the first few errors)."""
        loop = asyncio.get_running_loop()
        gate = asyncio.Semaphore(CONCURRENCY)
        first = greeting(topic)
        errors: list[str] = []

        async def one(user: str) -> None:
            async with gate:
                ready: asyncio.Future[str | None] = loop.create_future()
                request = target.request(mint(secret, user))
                try:
                    _, conn = await loop.create_connection(
                        lambda: Counter(request, first, ready), target.host, target.port
                    )
                    error = await asyncio.wait_for(ready, CONNECT_TIMEOUT_S)
                except (OSError, TimeoutError) as exc:
                    error = repr(exc)
                else:
                    self.conns.append(conn)
                if error is not None:
                    errors.append(f"{user}: {error}")

        await asyncio.gather(*(one(user) for user in users))
        return len(users) - len(errors), errors[:5]

    async def reset(self) -> None:
        for conn in self.conns:
            conn.reset()

    async def expect(self, frames: int, timeout_s: float) -> Counts:
        """Wait until every connection counted ``frames`` text frames (or ``timeout_s`` passed)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(c.texts < frames for c in self.conns if not c.lost.done()):
            await asyncio.sleep(0.01)
        texts = [c.texts for c in self.conns] or [0]
        return Counts(
            sum(texts),
            sum(c.payload_bytes for c in self.conns),
            min(texts),
            max(texts),
            sum(c.closes for c in self.conns),
            sum(not c.lost.done() for c in self.conns),
        )

    async def close(self) -> int:
        """Drop every connection and wait until they are gone; how many there were."""
        for conn in self.conns:
            conn.close()
        await asyncio.gather(*(c.lost for c in self.conns))
        closed, self.conns = len(self.conns), []
        return closed


async def _serve(pipe: Connection) -> None:
    loop = asyncio.get_running_loop()
    pool = _Pool()
    while True:
        name, args = await loop.run_in_executor(None, pipe.recv)
        if name == "stop":
            return
        try:
            pipe.send(("ok", await getattr(pool, name)(*args)))
        except Exception:
            pipe.send(("error", traceback.format_exc()))


def _main(pipe: Connection) -> None:
    raise_nofile()
    uvloop.run(_serve(pipe))


class FleetError(RuntimeError):
    """A client process failed (its traceback is the message)."""


class Fleet:
    """``procs`` client processes (spawned), each holding its share of the connections."""

    def __init__(self, procs: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipes: list[Connection] = []
        self.processes = []
        for _ in range(procs):
            parent, child = context.Pipe()
            process = context.Process(target=_main, args=(child,), daemon=True)
            process.start()
            self.pipes.append(parent)
            self.processes.append(process)

    def _all(self, name: str, per_process: list[tuple[Any, ...]]) -> list[Any]:
        """Send command ``name`` to every process (its own arguments each), then collect the answers."""
        try:
            for pipe, args in zip(self.pipes, per_process, strict=True):
                pipe.send((name, args))
            answers = [pipe.recv() for pipe in self.pipes]
        except (OSError, EOFError) as exc:
            codes = [process.exitcode for process in self.processes]
            raise FleetError(f"{name}: a client process is gone ({exc!r}; exit codes {codes})") from None
        for status, value in answers:
            if status != "ok":
                raise FleetError(value)
        return [value for _, value in answers]

    def connect(self, target: Target, users: list[str], secret: str, topic: str | None = None) -> tuple[int, list[str]]:
        """Connect every user of ``users`` (spread over the processes); (made, first errors)."""
        shares = [users[i :: len(self.pipes)] for i in range(len(self.pipes))]
        answers = self._all("connect", [(target, share, secret, topic) for share in shares])
        return sum(made for made, _ in answers), [e for _, errors in answers for e in errors][:5]

    def reset(self) -> None:
        """Every connection counts from zero."""
        self._all("reset", [()] * len(self.pipes))

    def expect(self, frames: int, timeout_s: float) -> Counts:
        """Wait until every connection counted ``frames`` text frames or ``timeout_s`` seconds passed."""
        answers: list[Counts] = self._all("expect", [(frames, timeout_s)] * len(self.pipes))
        return Counts(
            sum(a.frames for a in answers),
            sum(a.payload_bytes for a in answers),
            min(a.least for a in answers),
            max(a.most for a in answers),
            sum(a.closes for a in answers),
            sum(a.open for a in answers),
        )

    def close(self) -> int:
        """Drop every connection; how many there were."""
        return sum(self._all("close", [()] * len(self.pipes)))

    def stop(self) -> None:
        """End the client processes."""
        for pipe in self.pipes:
            try:
                pipe.send(("stop", ()))
            except OSError:
                pass  # already gone
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
