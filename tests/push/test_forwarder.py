"""The internal forwarder towards a node that stops answering: one warning, a count, a recovery line."""

from __future__ import annotations

import asyncio
import logging
import socket

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


def test_a_node_that_stops_answering_is_logged_once_then_counted(caplog: pytest.LogCaptureFixture) -> None:
    """Twenty forwards and kicks to a dead address log one warning, not twenty lines; when a listener
    answers there again, one line gives the count of the failures in between."""
    port = unused_port()
    address = f"127.0.0.1:{port}"

    async def scenario() -> None:
        forwarder = Forwarder(SECRET, 1.0)
        try:
            for _ in range(10):
                assert await forwarder.push(address, [FORWARD]) == [None]
                assert await forwarder.kick(address, "u1", "s1") is False
            server = await asyncio.get_running_loop().create_server(
                lambda: InternalProtocol(Nobody(), SECRET), "127.0.0.1", port
            )
            try:
                assert await forwarder.push(address, [FORWARD]) == [False]
                assert await forwarder.push(address, [FORWARD]) == [False]
            finally:
                server.close()
                await server.wait_closed()
        finally:
            await forwarder.close()

    with caplog.at_level(logging.INFO, logger="hongbao.push.internal"):
        asyncio.run(scenario())
    lines = [record.getMessage() for record in caplog.records if record.name == "hongbao.push.internal"]
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"internal /internal/push to {address} failed: ClientConnectorError")
    assert lines[1] == f"internal forwards to {address} answer again, after 19 more failed calls"
    assert [r.levelno for r in caplog.records if r.name == "hongbao.push.internal"] == [logging.WARNING, logging.INFO]


def test_a_single_failure_is_followed_by_its_recovery_line(caplog: pytest.LogCaptureFixture) -> None:
    """One failed forward, then an answer: the warning has its "answer again" line (0 more failures)."""
    port = unused_port()
    address = f"127.0.0.1:{port}"

    async def scenario() -> None:
        forwarder = Forwarder(SECRET, 1.0)
        try:
            assert await forwarder.push(address, [FORWARD]) == [None]
            server = await asyncio.get_running_loop().create_server(
                lambda: InternalProtocol(Nobody(), SECRET), "127.0.0.1", port
            )
            try:
                assert await forwarder.kick(address, "u1", "s1") is False
            finally:
                server.close()
                await server.wait_closed()
        finally:
            await forwarder.close()

    with caplog.at_level(logging.INFO, logger="hongbao.push.internal"):
        asyncio.run(scenario())
    lines = [record.getMessage() for record in caplog.records if record.name == "hongbao.push.internal"]
    assert lines[1:] == [f"internal forwards to {address} answer again, after 0 more failed calls"], lines
