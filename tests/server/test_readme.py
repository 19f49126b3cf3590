"""The README's Python push client snippet runs as written: copied out of README.md into a file and
run against a real server (its URL in the environment, as the README's run line sets it), it
prints the events pushed to Bob, and says in one line why it stops when the token is refused or
a newer session of Bob's takes over."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

from hongbao.server.auth import mint
from websockets.sync.client import connect
from websockets.typing import Subprotocol

from tests.server.conftest import Server
from tests.server.flows import ok

README = Path(__file__).resolve().parents[2] / "README.md"


def push_client_snippet() -> str:
    """The README's ```python block that uses hongbao.server.push_client."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    (snippet,) = (block for block in blocks if "PushClient" in block)
    return str(snippet)


def start_watch(server: Server, tmp_path: Path, token: str) -> subprocess.Popen[str]:
    """The snippet saved as watch.py and run with BOB and URL set, as the README says."""
    (tmp_path / "watch.py").write_text(push_client_snippet())
    # stdout a pipe, as when one redirects it, and Python's default buffering (not the caller's setting)
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    env |= {"BOB": token, "URL": server.url}
    return subprocess.Popen(
        [sys.executable, "watch.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def push_until_delivered(server: Server, watch: subprocess.Popen[str]) -> None:
    """Push ``hello`` to bob until one reaches an open socket (watch.py is connected), at most 20 s."""
    with server.client("admin", admin=True) as admin:
        deadline = time.monotonic() + 20
        push = {"user_id": "bob", "event": "hello", "data": {"n": 1}}
        while ok(admin.post("/v1/admin/push", json=push))["result"] != "delivered_to_socket":
            assert watch.poll() is None and time.monotonic() < deadline, watch.communicate(timeout=5)
            time.sleep(0.1)


def test_readme_push_client_snippet_runs(server: Server, tmp_path: Path) -> None:
    """The snippet, saved as watch.py and run with BOB and URL set, connects and prints an event pushed
    to bob, at once even into a pipe (no line waits in a block buffer)."""
    watch = start_watch(server, tmp_path, server.token("bob"))
    try:
        push_until_delivered(server, watch)
        assert watch.stdout is not None
        assert select.select([watch.stdout], [], [], 10)[0], "no line within 10 s of the push"
        line = watch.stdout.readline()
        assert line.startswith("PushEvent(event='hello', data={'n': 1}, offset=") and "topic=None" in line, line
    finally:
        watch.terminate()
        watch.wait(timeout=10)


def test_readme_watch_says_the_token_is_refused(server: Server, tmp_path: Path) -> None:
    """watch.py with a token signed with another key: after its retries it exits 1 with one line on
    stderr saying the token is refused, why, and to mint a fresh one with the server's key."""
    watch = start_watch(server, tmp_path, mint("a-key-that-is-not-the-servers-own-key", "bob"))
    try:
        out, err = watch.communicate(timeout=30)
    finally:
        watch.kill()
    assert (watch.returncode, out) == (1, "")
    assert err.splitlines() == [
        "AuthenticationFailed: 3 handshakes answered 401 (invalid token: Signature verification failed): "
        "the server refuses the token; mint a fresh one, signed with the server's key "
        "(hongbao token --user ID, with the server's --data-dir)"
    ]


def test_readme_watch_says_it_was_replaced(server: Server, tmp_path: Path) -> None:
    """watch.py connected as bob, then a second session of bob opens: watch.py exits 1 with one line
    on stderr saying a newer connection took over (close 4001); the newer session stays open."""
    token = server.token("bob")
    watch = start_watch(server, tmp_path, token)
    try:
        push_until_delivered(server, watch)
        url = server.url.replace("http://", "ws://") + "/v1/ws"
        with connect(url, subprotocols=[Subprotocol("bearer"), Subprotocol(token)]) as newer:
            out, err = watch.communicate(timeout=20)
            assert newer.protocol.state.name == "OPEN"
    finally:
        watch.kill()
    assert watch.returncode == 1 and out.startswith("PushEvent(event='hello'")
    assert err.splitlines() == ["Replaced: closed 4001: a newer connection of this user took over"]
