"""The storm's executor against a scripted loopback server: which attempt a receipt's time is taken from."""

from __future__ import annotations

import time

import orjson
from hongbao.bench.storm.delivery import push_report
from hongbao.bench.storm.http1 import Entries, Http1Client
from hongbao.bench.storm.load import Executor
from hongbao.bench.storm.plan import Call
from hongbao.bench.storm.runner import LoadResult
from hongbao.bench.storm.wire import Tokens

from tests.storm.test_http1 import serve

EARLY_S = 0.005  # uvloop's timers keep libuv's millisecond clock: a planned call may leave up to ~1 ms early


def _answer(body: dict[str, object]) -> bytes:
    raw = orjson.dumps(body)
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(raw), raw)


def _open(seq: str, at: float) -> Call:
    return Call(seq, at, "open", "u1", "POST", "/v1/packets/{p1}/open", None, 1, ("p1",))


async def _play(*answers: bytes | None) -> tuple[Executor, list[float]]:
    """Play opens of one user on one packet 0.2 s apart, answered ``answers`` in turn (None: the
    server hangs up, as a worker killed after its commit): (the executor, each attempt's planned
    wall time, less ``EARLY_S``)."""
    replies = iter(answers)
    server, url, _, _ = await serve(lambda data: next(replies))
    client = Http1Client(url, 4, 5.0)
    try:
        started = time.time()
        executor = Executor(Entries([client]), Tokens("s" * 32), time.monotonic(), 0, known={"p1": "P1"})
        await executor.play([_open(f"1.{i}", 0.2 * i) for i in range(len(answers))])
    finally:
        client.close()
        server.close()
    return executor, [started + 0.2 * i - EARLY_S for i in range(len(answers))]


async def test_a_receipt_whose_first_answer_was_lost_dates_from_the_first_attempt() -> None:
    """The first open hangs up (its commit done, its push lost with the worker), a retry answers
    ``repeat``: the receipt dates from the first attempt, so a reset told between the two covers
    the ``opened`` push that never came."""
    executor, (first, retry) = await _play(None, _answer({"order_id": "P1", "amount_fen": 50, "repeat": True}))
    amount, opened_at = executor.opened[("P1", "u1")]
    assert amount == 50 and first <= opened_at < first + 0.1 < retry
    told, earlier = (first + retry) / 2, first - 0.5  # a reset after the first attempt, one before it
    result = LoadResult(
        packets={"P1": ["@u1", 1, "u0", first - 1.0]},
        receipts=[("P1", "u1", amount, opened_at)],
        push=[
            {
                "online": 1,
                "reconnects": 0,
                "failures": 0,
                "errors": [],
                "duplicates": 0,
                "resets": 2,
                "reset_times": [("u1", earlier), ("u1", told)],
                "deliveries": [],
            }
        ],
        online=["u1"],
        samples=[("open", 0.0, 0.01, 200, "already_opened", 0.0)],
        started_at=first,
    )
    report = push_report(result)
    assert report is not None and (report["expected"], report["missing"], report["untold"]) == (2, 2, 0)
    [example] = [e for e in report["missing_examples"] if e[0] == "opened"]
    assert example[:3] == ["opened", "P1", "u1"] and 0 <= example[3] < 0.1 and example[4] == -0.5


async def test_a_first_open_answered_after_a_repeat_dates_the_receipt() -> None:
    """A repeat answered first, then the answer of the first open (a duplicate click's race): the
    receipt dates from the attempt answered as the first open; a third amount is a disagreement."""
    executor, (_, second, _) = await _play(
        _answer({"order_id": "P1", "amount_fen": 50, "repeat": True}),
        _answer({"order_id": "P1", "amount_fen": 50, "repeat": False}),
        _answer({"order_id": "P1", "amount_fen": 70, "repeat": True}),
    )
    amount, opened_at = executor.opened[("P1", "u1")]
    assert amount == 50 and second <= opened_at < second + 0.1 and executor.disagreements == 1
