"""The JSON text messages the push hub sends (docs/architecture.md section 7), and its clock.

- ``{"type": "event", "event", "data", "offset", "epoch"}`` (+ ``"topic"`` for a broadcast, whose
  offset and epoch are the topic's): one message of a user's stream or of a topic;
- ``{"type": "reset", "epoch"}``: the replay that follows is not the whole gap (history lost, or
  another epoch): the client reloads its state over HTTP and starts over in ``epoch``;
- ``{"type": "subscribed" | "unsubscribed", "topic"}``, ``{"type": "error", "code", "message"}``.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from hongbao.core.push_ports import place


class EventBody:
    """A BodyMaker (``(offset, epoch) -> bytes``) for ``event`` with ``data`` (and ``topic`` for
    a broadcast): the JSON of the event and its data is encoded once (``head``) and placed per
    offset (hongbao.core.push_ports.place)."""

    __slots__ = ("head",)

    def __init__(self, event: str, data: Any, topic: str | None = None) -> None:
        head = b'{"type":"event","event":' + orjson.dumps(event) + b',"data":' + orjson.dumps(data)
        self.head = head if topic is None else head + b',"topic":' + orjson.dumps(topic)

    def __call__(self, offset: int, epoch: str) -> bytes:
        return place(self.head, offset, epoch)


def hello(epoch: str) -> bytes:
    """The first frame of a connection whose replay is whole: the epoch of the user's stream, which
    a client that has no message yet resumes in (``?epoch=``), so a stream that starts a new epoch
    while it is away is told to it (``reset``) like to a client with an offset."""
    return orjson.dumps({"type": "hello", "epoch": epoch})


def reset(epoch: str) -> bytes:
    """The history after the client's cursor is incomplete; the stream goes on in ``epoch``."""
    return orjson.dumps({"type": "reset", "epoch": epoch})


def subscription(on: bool, topic: str) -> bytes:
    """The answer to a subscribe (``on``) or unsubscribe of ``topic``."""
    return orjson.dumps({"type": "subscribed" if on else "unsubscribed", "topic": topic})


def error(message: str) -> bytes:
    """A client message was refused (the connection stays open)."""
    return orjson.dumps({"type": "error", "code": "invalid_request", "message": message})


def now_ms() -> int:
    """Wall-clock ms since the epoch (push times are never the service's test clock)."""
    return int(time.time() * 1000)
