"""Independent client implementations against a live server: the `websockets` library, the
`websocket-client` library and aiohttp each connect with the token as the `bearer` subprotocol,
get `bearer` back, exchange a WebSocket ping/pong and an app-level ping/pong, receive a pushed
event, and close cleanly with 1000; a client that sends a message over the limit reads the 1009."""

from __future__ import annotations

import aiohttp
import orjson
import pytest
import websocket
import websockets.asyncio.client

from tests.server.conftest import Server
from tests.ws.conftest import push

PING, PONG = '{"type":"ping"}', {"type": "pong"}


def ws_url(server: Server) -> str:
    """The server's WebSocket URL."""
    return server.url.replace("http://", "ws://") + "/v1/ws"


def pushed(server: Server, uid: str) -> None:
    """Push one event to ``uid`` (connected: it goes to the socket)."""
    with server.client("admin", admin=True) as admin:
        assert push(admin, uid, {"peer": uid}, event="hello")["result"] == "delivered_to_socket"


async def test_websockets_library(ws_server: Server, event_loop_kind: str) -> None:
    """The `websockets` client: bearer subprotocol, ping/pong, app ping, a pushed event, clean 1000."""
    uid = f"peer-ws-{event_loop_kind}"
    async with websockets.asyncio.client.connect(
        ws_url(ws_server), subprotocols=["bearer", ws_server.token(uid)]
    ) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "bearer"
        await (await ws.ping(b"lib"))
        await ws.send(PING)
        assert orjson.loads(await ws.recv()) == PONG
        await ws.send('{"type":"subscribe","topic":"attached"}')
        assert orjson.loads(await ws.recv())["type"] == "subscribed"
        pushed(ws_server, uid)
        event = orjson.loads(await ws.recv())
        assert (event["type"], event["event"], event["data"]) == ("event", "hello", {"peer": uid})
        await ws.close()
    assert ws.close_code == 1000 and ws.remote_address is not None


def test_websocket_client_library(ws_server: Server) -> None:
    """`websocket-client`: bearer subprotocol, ping/pong, app ping, a pushed event, clean 1000."""
    ws = websocket.create_connection(ws_url(ws_server), subprotocols=["bearer", ws_server.token("peer-wsc")], timeout=5)
    try:
        assert ws.getsubprotocol() == "bearer"
        ws.ping("wsc")
        opcode, frame = ws.recv_data_frame(control_frame=True)
        assert (opcode, frame.data) == (websocket.ABNF.OPCODE_PONG, b"wsc")
        ws.send(PING)
        assert orjson.loads(ws.recv()) == PONG
        ws.send('{"type":"subscribe","topic":"attached"}')
        assert orjson.loads(ws.recv())["type"] == "subscribed"
        pushed(ws_server, "peer-wsc")
        assert orjson.loads(ws.recv())["data"] == {"peer": "peer-wsc"}
        ws.send_close(websocket.STATUS_NORMAL)
        opcode, frame = ws.recv_data_frame(control_frame=True)
        assert opcode == websocket.ABNF.OPCODE_CLOSE and frame.data[:2] == (1000).to_bytes(2, "big")
    finally:
        ws.shutdown()


@pytest.mark.parametrize("size", [70_000, 8 << 20])
def test_websocket_client_library_reads_1009_of_a_message_over_the_limit(ws_server: Server, size: int) -> None:
    """`websocket-client` sends a message past the 64 KiB limit in one send: the server fails the
    connection while bytes of it are still unread, and the client still reads the close frame
    with 1009 (a reset would have destroyed it)."""
    ws = websocket.create_connection(ws_url(ws_server), subprotocols=["bearer", ws_server.token("peer-big")], timeout=5)
    try:
        ws.send("x" * size)
        opcode, frame = ws.recv_data_frame(control_frame=True)
        assert opcode == websocket.ABNF.OPCODE_CLOSE and frame.data[:2] == (1009).to_bytes(2, "big")
    finally:
        ws.shutdown()


async def test_aiohttp_client(ws_server: Server, event_loop_kind: str) -> None:
    """aiohttp's client: bearer subprotocol, ping/pong, app ping, a pushed event, clean 1000."""
    uid = f"peer-aio-{event_loop_kind}"
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(
            ws_url(ws_server), protocols=("bearer", ws_server.token(uid)), autoping=False
        ) as ws:
            assert ws.protocol == "bearer"
            await ws.ping(b"aio")
            message = await ws.receive(timeout=5)
            assert (message.type, message.data) == (aiohttp.WSMsgType.PONG, b"aio")
            await ws.send_str(PING)
            assert orjson.loads(await ws.receive_str(timeout=5)) == PONG
            await ws.send_str('{"type":"subscribe","topic":"attached"}')
            assert orjson.loads(await ws.receive_str(timeout=5))["type"] == "subscribed"
            pushed(ws_server, uid)
            assert orjson.loads(await ws.receive_str(timeout=5))["data"] == {"peer": uid}
            await ws.close()
            assert ws.close_code == 1000
