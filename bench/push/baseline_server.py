"""The baseline of the push benchmark: a plain ``websockets`` library server (its asyncio API,
``websockets.asyncio.server.serve``) doing what the benchmark asks of hongbao, the way its
documentation shows it.

- Any path upgrades to a WebSocket (no authentication); a client message
  ``{"type": "subscribe", "topic": t}`` adds the connection to the subscribers and is answered
  ``{"type": "subscribed", "topic": t}``; any other message with an error, as hongbao answers a
  message type it does not know.
- ``GET /broadcast?text=T`` (a plain HTTP request, answered by ``process_request``) sends the
  text ``T`` to every subscriber with ``websockets.broadcast`` and answers 200 with their count.
- ``GET /healthz`` answers 200 (readiness).

No compression (``compression=None``) and no server pings (``ping_interval=None``), as hongbao
neither compresses nor pings; it runs on uvloop, as hongbao does, so the benchmark compares the
WebSocket layers and not the event loops.

Usage: ``python -m hongbao.bench.push.baseline_server --port N [--host 127.0.0.1]``; stops on SIGTERM.
"""

from __future__ import annotations

from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

import orjson
from hongbao.bench.push.script import run_script, until_stopped
from websockets.asyncio.server import Server, ServerConnection, broadcast, serve
from websockets.http11 import Request, Response

SUBSCRIBERS: set[ServerConnection] = set()
UNKNOWN = orjson.dumps({"type": "error", "code": "invalid_request", "message": "unknown message type"}).decode()


async def handler(connection: ServerConnection) -> None:
    """One connection: answer its messages until it closes."""
    try:
        async for message in connection:
            try:
                parsed = orjson.loads(message)
            except orjson.JSONDecodeError:
                parsed = None
            if isinstance(parsed, dict) and parsed.get("type") == "subscribe":
                SUBSCRIBERS.add(connection)
                await connection.send(orjson.dumps({"type": "subscribed", "topic": parsed.get("topic")}).decode())
            else:
                await connection.send(UNKNOWN)
    finally:
        SUBSCRIBERS.discard(connection)


def control(connection: ServerConnection, request: Request) -> Response | None:
    """``process_request``: answer /broadcast and /healthz over plain HTTP; None lets a WebSocket
    handshake go on."""
    url = urlsplit(request.path)
    if url.path == "/healthz":
        return connection.respond(HTTPStatus.OK, "ok\n")
    if url.path == "/broadcast":
        text = parse_qs(url.query).get("text", [""])[-1]
        broadcast(SUBSCRIBERS, text)
        return connection.respond(HTTPStatus.OK, f"{len(SUBSCRIBERS)}\n")
    return None


async def main(host: str, port: int) -> None:
    """Serve on ``host``:``port`` until SIGTERM or SIGINT."""
    server: Server
    async with serve(
        handler, host, port, process_request=control, compression=None, ping_interval=None, backlog=4096
    ) as server:
        await until_stopped()
        server.close()


if __name__ == "__main__":
    run_script(__doc__, main)
