"""``--record FILE`` / ``--replay FILE``: the storm's requests as JSON lines.

One line per planned call, in the order of the plan (setup first, then by time): the exact
``method``, ``path`` and ``body`` sent (with the server's real ids), the acting ``user``, the
``Idempotency-Key``, the call's place in the plan (``seq``, ``at`` seconds after the start,
``packet``, ``needs``, ``name``, ``tag``), and what came back (``status``, ``attempts``, and
``id``: the ``group_id`` / ``order_id`` the answer defined). A call skipped because what it
needed failed keeps its ``{name}`` placeholders and ``"skipped": true``.

A replay turns each line back into a call: the ids that the recorded run got are replaced by
the placeholders of the calls that made them, so the same requests are made against a fresh
server, which hands out its own ids. The time base is kept (``at``), the number of load
processes is the replay's own.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import orjson
from hongbao.bench.storm.plan import SETUP, Call


def call_line(
    call: Call, path: str, body: dict[str, Any] | None, status: int | None, attempts: int, created: str | None
) -> bytes:
    """The JSON line of ``call`` as it was sent (``status`` None: skipped)."""
    line: dict[str, Any] = {
        "seq": call.seq,
        "at": call.at,
        "packet": call.packet,
        "op": call.op,
        "user": call.user,
        "method": call.method,
        "path": path,
        "body": body,
        "key": call.key,
        "needs": list(call.needs),
        "name": call.name,
        "tag": call.tag,
        "status": status,
        "attempts": attempts,
        "id": created,
    }
    if status is None:
        line["skipped"] = True
    return orjson.dumps(line) + b"\n"


class Recorder:
    """Appends call lines to ``path`` (one file per process; ``merge`` joins them)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._out: IO[bytes] = open(path, "wb")

    def write(self, line: bytes) -> None:
        """Append one line (from ``call_line``)."""
        self._out.write(line)

    def close(self) -> None:
        """Flush and close the file."""
        self._out.close()


def _order(line: dict[str, Any]) -> tuple[bool, float, str, int, int]:
    head, _, tail = str(line["seq"]).partition(".")
    digits = head.lstrip("tg")
    return (
        line["packet"] != SETUP,
        float(line["at"]),
        head[: len(head) - len(digits)],
        int(digits or 0),
        int(tail or 0),
    )


def merge(parts: Iterable[Path], out: Path) -> int:
    """Join the per-process record files into ``out``, setup first, then by time and plan
    order; returns the number of lines."""
    lines = [orjson.loads(raw) for part in parts if part.exists() for raw in part.read_bytes().splitlines() if raw]
    lines.sort(key=_order)
    with open(out, "wb") as handle:
        for line in lines:
            handle.write(orjson.dumps(line) + b"\n")
    return len(lines)


def _template(value: str, ids: dict[str, str], needs: list[str]) -> str:
    for name in needs:
        real = ids.get(name)
        if real:
            value = value.replace(real, "{" + name + "}")
    return value


def read_record(path: Path) -> list[Call]:
    """The calls of a record file, ids turned back into placeholders; ValueError naming the
    line that is not a call line."""
    lines: list[dict[str, Any]] = []
    for number, raw in enumerate(path.read_bytes().splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = orjson.loads(raw)
            if not isinstance(line, dict) or not {"seq", "at", "op", "user", "method", "path"} <= line.keys():
                raise ValueError("missing fields")
        except (orjson.JSONDecodeError, ValueError) as exc:
            raise ValueError(f"{path}:{number}: not a storm record line ({exc})") from None
        lines.append(line)
    ids = {str(line["name"]): str(line["id"]) for line in lines if line.get("name") and line.get("id")}
    calls = []
    for line in lines:
        needs = [str(n) for n in line.get("needs") or []]
        body = line.get("body")
        if isinstance(body, dict):
            body = {k: _template(v, ids, needs) if isinstance(v, str) else v for k, v in body.items()}
        calls.append(
            Call(
                str(line["seq"]),
                float(line["at"]),
                str(line["op"]),
                str(line["user"]),
                str(line["method"]),
                _template(str(line["path"]), ids, needs),
                body,
                int(line.get("packet", SETUP)),
                tuple(needs),
                line.get("name"),
                line.get("key"),
                str(line.get("tag") or ""),
            )
        )
    return calls
