"""A value on its way without a coroutine: one future (a Redis reply) and the plain functions
that turn it into an answer, layer by layer (adapter, service, handler, app), run by ONE callback
when the future is done.

Why: an answer that waits for one reply and then only computes costs, as coroutines, a Task and a
resumption through every awaiting frame (here ~5 µs of a ~60 µs grab); as a :class:`Soon` it costs
a callback and the calls themselves. It is for hot reads that either finish from the reply or give
up with :class:`Later`, after which the caller takes its coroutine path (which does everything
the slow way, so a Soon never has to await anything itself).

``then(fn)`` adds a step on the value (skipped once an error is raised); ``outcome(fn)`` a step on
``(value, error)`` that always runs (to map errors); the consumer either awaits the Soon or calls
``add_done_callback(cb)`` and reads ``result()`` in ``cb``, as with an asyncio future.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")
U = TypeVar("U")


class Later(Exception):
    """A fast path cannot answer from what it has (a cache miss, a failed reply): the caller takes
    its coroutine path instead."""


class Soon(Generic[T]):
    """The value ``future``'s result becomes through the steps added with :meth:`then` and
    :meth:`outcome`. Each step runs once, in order, in the callback of ``future``."""

    __slots__ = ("_future", "_steps", "_value", "_error", "_done", "_callback")

    def __init__(self, future: asyncio.Future[Any]) -> None:
        self._future = future
        self._steps: list[tuple[bool, Callable[..., Any]]] = []  # (on the outcome, step)
        self._value: Any = None
        self._error: BaseException | None = None
        self._done = False
        self._callback: Callable[[Soon[T]], None] | None = None

    def then(self, step: Callable[[T], U]) -> Soon[U]:
        """Add ``step(value)``; an exception it raises becomes the error (later ``then`` steps are skipped)."""
        self._steps.append((False, step))
        return self  # type: ignore[return-value]  # the same Soon, its value now a U (a cast() costs a call)

    def outcome(self, step: Callable[[T | None, BaseException | None], U]) -> Soon[U]:
        """Add ``step(value, error)`` (exactly one of them is None, unless the value is): its return is
        the new value and clears the error; what it raises is the new error."""
        self._steps.append((True, step))
        return self  # type: ignore[return-value]

    def add_done_callback(self, callback: Callable[[Soon[T]], None]) -> None:
        """Call ``callback(self)`` once the future is done and every step has run (one loop turn
        later, as asyncio future callbacks are). One callback per Soon: it has one consumer."""
        self._callback = callback
        self._future.add_done_callback(self._on_done)

    def result(self) -> T:
        """The final value, or raises the final error; only once done (see add_done_callback)."""
        if not self._done:
            raise asyncio.InvalidStateError("the Soon is not done yet")
        if self._error is not None:
            raise self._error
        return cast(T, self._value)

    def __await__(self) -> Generator[Any, None, T]:
        try:
            yield from self._future.__await__()
        except asyncio.CancelledError:
            raise
        except BaseException:
            pass  # the future's error: _settle reads it again and hands it to the steps
        self._settle()
        return self.result()

    def _on_done(self, _: asyncio.Future[Any]) -> None:
        self._settle()
        if self._callback is not None:
            self._callback(self)

    def _settle(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            value, error = self._future.result(), None
        except BaseException as exc:  # the reply's error (or a cancellation) goes to the steps
            value, error = None, exc
        for on_outcome, step in self._steps:
            if error is not None and not on_outcome:
                continue
            try:
                value, error = (step(value, error) if on_outcome else step(value)), None
            except Exception as exc:
                value, error = None, exc
        self._value, self._error = value, error
