"""The internal forwarder towards a node that stops answering: one warning, a count, a recovery line."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from hongbao.core.push_ports import Stored
from hongbao.server.push_internal import Forwarder, InternalProtocol

SECRET = "forwarder-test-secret"
FORWARD = ("u1", "s1", Stored(1, "e1", b'{"type":"message"}'))


class Nobody:
    """A receiver with no sessions: every message and kick is "not here"."""

    def receive(self, uid: str, sid: str, message: Stored) -> bool:
        return False

    def kick(self, uid: str, sid: str) -> bool:
        return False


def unused_port() -> int:
    """A loopback port with nothing listening on it (bound once, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def listener(port: int, secret: str = SECRET) -> AsyncIterator[None]:
    """A real internal listener on loopback ``port`` (with ``secret``); afterwards it stops
    listening and closes the connections it accepted, as a stopped node does."""
    accepted: list[InternalProtocol] = []

    def accept() -> InternalProtocol:
        accepted.append(InternalProtocol(Nobody(), secret))
        return accepted[-1]

    server = await asyncio.get_running_loop().create_server(accept, "127.0.0.1", port)
    try:
        yield
    finally:
        server.close()
        for protocol in accepted:
            if protocol.transport is not None:
                protocol.transport.close()
        await server.wait_closed()


def logged(caplog: pytest.LogCaptureFixture, scenario: Callable[[Forwarder], Awaitable[None]]) -> list[str]:
    """Run ``scenario`` with a fresh Forwarder (1-s bound), closed afterwards; the lines the
    forwarder logged (INFO and up), each as "LEVEL message"."""

    async def run() -> None:
        forwarder = Forwarder(SECRET, 1.0)
        try:
            await scenario(forwarder)
        finally:
            await forwarder.close()

    with caplog.at_level(logging.INFO, logger="hongbao.push.internal"):
        asyncio.run(run())
    return [f"{r.levelname} {r.getMessage()}" for r in caplog.records if r.name == "hongbao.push.internal"]


def test_a_node_that_stops_answering_is_logged_once_then_counted(caplog: pytest.LogCaptureFixture) -> None:
    """Twenty forwards and kicks to a dead address log one warning, not twenty lines; when a listener
    answers there again, one line gives the count of the failures in between."""
    port = unused_port()
    address = f"127.0.0.1:{port}"

    async def scenario(forwarder: Forwarder) -> None:
        for _ in range(10):
            assert await forwarder.push(address, [FORWARD]) == [None]
            assert await forwarder.kick(address, "u1", "s1") is False
        async with listener(port):
            assert await forwarder.push(address, [FORWARD]) == [False]
            assert await forwarder.push(address, [FORWARD]) == [False]

    lines = logged(caplog, scenario)
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"WARNING internal /internal/push to {address} failed: ClientConnectorError")
    assert lines[1] == f"INFO internal forwards to {address} answer again, after 19 more failed calls"


def test_a_single_failure_is_followed_by_its_recovery_line(caplog: pytest.LogCaptureFixture) -> None:
    """One failed forward, then an answer: the warning has its "answer again" line (0 more failures)."""
    port = unused_port()
    address = f"127.0.0.1:{port}"

    async def scenario(forwarder: Forwarder) -> None:
        assert await forwarder.push(address, [FORWARD]) == [None]
        async with listener(port):
            assert await forwarder.kick(address, "u1", "s1") is False

    lines = logged(caplog, scenario)
    assert lines[1:] == [f"INFO internal forwards to {address} answer again, after 0 more failed calls"], lines


def test_a_node_that_refuses_the_secret_is_logged_once_too(caplog: pytest.LogCaptureFixture) -> None:
    """A listener with another secret answers 401 to every forward: one warning that names the
    status, then a count, as for a node that does not answer at all."""
    port = unused_port()
    address = f"127.0.0.1:{port}"

    async def scenario(forwarder: Forwarder) -> None:
        async with listener(port, secret="another-secret"):
            for _ in range(5):
                assert await forwarder.push(address, [FORWARD]) == [None]
        async with listener(port):
            assert await forwarder.push(address, [FORWARD]) == [False]

    assert logged(caplog, scenario) == [
        f"WARNING internal /internal/push to {address} failed: answered 401 "
        "(further failures to it are counted until it answers)",
        f"INFO internal forwards to {address} answer again, after 4 more failed calls",
    ]
