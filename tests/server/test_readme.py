"""The README's Python push client snippet runs as written: copied out of README.md into a file and
run against a real server (its URL in the environment, as the README's run line sets it), it
prints the events pushed to Bob."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.server.conftest import Server
from tests.server.flows import ok

README = Path(__file__).resolve().parents[2] / "README.md"


def push_client_snippet() -> str:
    """The README's ```python block that uses hongbao.server.push_client."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    (snippet,) = (block for block in blocks if "PushClient" in block)
    return str(snippet)


def test_readme_push_client_snippet_runs(server: Server, tmp_path: Path) -> None:
    """The snippet, saved as watch.py and run with BOB and URL set, connects and prints an event pushed to bob."""
    snippet = push_client_snippet()
    (tmp_path / "watch.py").write_text(snippet)
    env = {**os.environ, "BOB": server.token("bob"), "URL": server.url, "PYTHONUNBUFFERED": "1"}
    watch = subprocess.Popen(
        [sys.executable, "watch.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        with server.client("admin", admin=True) as admin:
            deadline = time.monotonic() + 20
            push = {"user_id": "bob", "event": "hello", "data": {"n": 1}}
            while (
                ok(admin.post("/v1/admin/push", json=push))["result"] != "delivered_to_socket"
            ):  # until it is connected
                assert watch.poll() is None and time.monotonic() < deadline, watch.communicate(timeout=5)
                time.sleep(0.1)
        assert watch.stdout is not None
        line = watch.stdout.readline()
        assert line.startswith("PushEvent(event='hello', data={'n': 1}, offset=") and "topic=None" in line, line
    finally:
        watch.terminate()
        watch.wait(timeout=10)
