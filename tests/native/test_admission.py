"""hongbao_native's AdmissionTable and RateLimiter (native/src/admission.rs) against
tests/reference/admission.py, within one process and across processes."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import signal
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import hongbao_native as hn
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.reference.admission import AdmissionModel, TableFull

SHM = Path("/dev/shm")
# Byte offset of the lock word (u32, pid of the holder) in the segment header; see the layout at
# the top of native/src/admission.rs. Tests write it to simulate a holder that died or stalls.
LOCK_OFFSET = 64
FORK = mp.get_context("fork")

pytestmark = pytest.mark.skipif(not SHM.is_dir(), reason="needs /dev/shm (Linux)")


def _name() -> str:
    return f"t-{os.getpid()}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def names() -> Iterator[list[str]]:
    """Segment names for one test; whatever they still name afterwards is removed."""
    made: list[str] = []
    yield made
    for name in made:
        for prefix in ("hongbao-", "hongbao-rl-"):
            (SHM / f"{prefix}{name}").unlink(missing_ok=True)


def _table(names: list[str], capacity: int) -> hn.AdmissionTable:
    names.append(_name())
    return hn.AdmissionTable.create(names[-1], capacity)


def _limiter(names: list[str], rate: float, burst: int) -> hn.RateLimiter:
    names.append(_name())
    return hn.RateLimiter.create(names[-1], rate, burst)


def _set_lock_word(name: str, pid: int) -> None:
    with open(SHM / f"hongbao-{name}", "r+b") as f:
        f.seek(LOCK_OFFSET)
        f.write(struct.pack("=I", pid))


def _dead_pid() -> int:
    child = FORK.Process(target=os._exit, args=(0,))
    child.start()
    child.join()
    assert child.pid is not None
    return child.pid


# --- one process --------------------------------------------------------------------------------


def test_enter_until_limit_then_refuse(names: list[str]) -> None:
    """try_enter admits exactly `limit` and then refuses; in_flight counts them."""
    t = _table(names, 8)
    assert [t.try_enter("pkt", 3) for _ in range(5)] == [True, True, True, False, False]
    assert t.in_flight("pkt") == 3
    assert t.in_flight("other") == 0
    assert len(t) == 1


def test_leave_makes_room_again(names: list[str]) -> None:
    """After leave, one more is admitted; in_flight follows every step down to 0."""
    t = _table(names, 8)
    assert t.try_enter("pkt", 2) and t.try_enter("pkt", 2)
    assert not t.try_enter("pkt", 2)
    t.leave("pkt")
    assert t.in_flight("pkt") == 1
    assert t.try_enter("pkt", 2)
    t.leave("pkt")
    t.leave("pkt")
    assert t.in_flight("pkt") == 0
    assert len(t) == 0


def test_limit_zero_never_admits_and_limits_are_per_key(names: list[str]) -> None:
    """limit 0 refuses; a full key does not affect another key."""
    t = _table(names, 8)
    assert t.try_enter("a", 0) is False
    assert t.try_enter("a", 1) is True
    assert t.try_enter("a", 1) is False
    assert t.try_enter("b", 1) is True
    assert (t.in_flight("a"), t.in_flight("b"), len(t)) == (1, 1, 2)


def test_leave_without_holding_is_value_error(names: list[str]) -> None:
    """leave of a key this process does not hold raises ValueError and never goes negative."""
    t = _table(names, 8)
    with pytest.raises(ValueError, match="holds no admission"):
        t.leave("never")
    assert t.try_enter("k", 1)
    t.leave("k")
    with pytest.raises(ValueError, match="holds no admission"):
        t.leave("k")
    assert t.in_flight("k") == 0
    assert t.try_enter("k", 1)


def test_slots_are_reused_over_100k_distinct_keys(names: list[str]) -> None:
    """100 000 distinct keys entered and left one by one never fill a capacity-64 table."""
    t = _table(names, 64)
    for i in range(100_000):
        key = f"packet-{i}"
        assert t.try_enter(key, 1)
        t.leave(key)
    assert len(t) == 0
    assert all(t.try_enter(f"k{i}", 1) for i in range(64))
    assert len(t) == 64


def test_full_table_raises_and_keeps_working(names: list[str]) -> None:
    """The capacity+1-th (key, pid) raises AdmissionTableFull; existing keys and freed slots still work."""
    t = _table(names, 64)
    for i in range(64):
        assert t.try_enter(f"k{i}", 2)
    with pytest.raises(hn.AdmissionTableFull, match="full"):
        t.try_enter("one-too-many", 2)
    assert issubclass(hn.AdmissionTableFull, ValueError)
    assert t.in_flight("one-too-many") == 0
    assert len(t) == 64
    assert t.try_enter("k5", 2) is True
    assert t.try_enter("k5", 2) is False
    assert not t.try_enter("one-too-many", 0)
    t.leave("k7")
    assert t.try_enter("one-too-many", 2)
    assert [t.in_flight(f"k{i}") for i in (5, 7, 8)] == [2, 0, 1]
    assert t.in_flight("one-too-many") == 1


keys = st.sampled_from(["a", "b", "c", "d", "e", "\u7ea2\u5305", ""])
ops = st.lists(
    st.one_of(
        st.tuples(st.just("enter"), keys, st.integers(min_value=0, max_value=3)),
        st.tuples(st.just("leave"), keys),
        st.tuples(st.just("in_flight"), keys),
        st.tuples(st.just("reclaim")),
    ),
    max_size=60,
)


@given(ops)
def test_matches_the_reference_model(script: list[tuple[object, ...]]) -> None:
    """Random enter/leave/in_flight/reclaim sequences give the reference model's results exactly."""
    t = hn.AdmissionTable.create(_name(), 4)
    t.unlink()
    model = AdmissionModel(4)
    me = os.getpid()
    for op in script:
        if op[0] == "enter":
            key, limit = str(op[1]), int(str(op[2]))
            try:
                expected: object = model.try_enter(key, limit, me)
            except TableFull:
                expected = "full"
            try:
                got: object = t.try_enter(key, limit)
            except hn.AdmissionTableFull:
                got = "full"
        elif op[0] == "leave":
            key = str(op[1])
            try:
                model.leave(key, me)
                expected = "ok"
            except ValueError:
                expected = "ValueError"
            try:
                t.leave(key)
                got = "ok"
            except ValueError:
                got = "ValueError"
        elif op[0] == "in_flight":
            expected, got = model.in_flight(str(op[1])), t.in_flight(str(op[1]))
        else:
            expected, got = model.reclaim(me), t.reclaim(me)
        assert got == expected, op
        assert len(t) == len(model)


def test_attach_shares_counts_and_unlink_removes_the_name(names: list[str]) -> None:
    """An attached table sees the same counts; after unlink, attach fails but mappings still work."""
    t = _table(names, 16)
    other = hn.AdmissionTable.attach(t.name)
    assert (other.name, other.capacity) == (t.name, 16)
    assert t.try_enter("k", 2)
    assert other.in_flight("k") == 1
    assert other.try_enter("k", 2)
    assert not t.try_enter("k", 2)
    assert t.in_flight("k") == 2
    t.unlink()
    with pytest.raises(FileNotFoundError):
        hn.AdmissionTable.attach(t.name)
    with pytest.raises(FileNotFoundError):
        t.unlink()
    assert other.in_flight("k") == 2
    assert repr(t) == f"AdmissionTable(name='{t.name}', capacity=16)"


def test_create_replaces_a_stale_segment(names: list[str]) -> None:
    """create over an existing name gives a fresh, empty table; the old mapping keeps its own counts."""
    old = _table(names, 8)
    assert old.try_enter("k", 5)
    new = hn.AdmissionTable.create(old.name, 32)
    assert (new.capacity, new.in_flight("k"), len(new)) == (32, 0, 0)
    assert old.in_flight("k") == 1
    assert hn.AdmissionTable.attach(old.name).capacity == 32


def test_attach_rejects_files_that_are_not_tables(names: list[str]) -> None:
    """attach raises ValueError on a wrong magic (a rate limiter) or a short file."""
    rl = _limiter(names, 1.0, 1)
    with pytest.raises(ValueError, match="magic"):
        hn.AdmissionTable.attach(f"rl-{rl.name}")
    names.append(f"rl-{_name()}")
    hn.AdmissionTable.create(names[-1], 4)
    with pytest.raises(ValueError, match="magic"):
        hn.RateLimiter.attach(names[-1][3:])
    names.append(_name())
    (SHM / f"hongbao-{names[-1]}").write_bytes(b"\0" * 10)
    with pytest.raises(ValueError, match="shorter than its header"):
        hn.AdmissionTable.attach(names[-1])


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: hn.AdmissionTable.create("", 4), ValueError, "invalid segment name"),
        (lambda: hn.AdmissionTable.create("a/b", 4), ValueError, "invalid segment name"),
        (lambda: hn.AdmissionTable.create("x" * 101, 4), ValueError, "invalid segment name"),
        (lambda: hn.AdmissionTable.attach("sp ace"), ValueError, "invalid segment name"),
        (lambda: hn.AdmissionTable.create("ok", 0), ValueError, r"capacity must be in \[1, 1048576\], got 0"),
        (lambda: hn.AdmissionTable.create("ok", 2**20 + 1), ValueError, "capacity must be"),
        (lambda: hn.AdmissionTable.create("ok", 2**80), ValueError, "beyond 64 bits"),
        (lambda: hn.AdmissionTable.create("ok", "4"), TypeError, "int"),  # type: ignore[arg-type]
        (lambda: hn.AdmissionTable.attach(f"missing-{uuid.uuid4().hex}"), FileNotFoundError, "hongbao-missing-"),
        (lambda: hn.RateLimiter.create("ok", 0.0, 1), ValueError, "rate_per_second"),
        (lambda: hn.RateLimiter.create("ok", -1.0, 1), ValueError, "rate_per_second"),
        (lambda: hn.RateLimiter.create("ok", math.nan, 1), ValueError, "rate_per_second"),
        (lambda: hn.RateLimiter.create("ok", math.inf, 1), ValueError, "rate_per_second"),
        (lambda: hn.RateLimiter.create("ok", 1.0, 0), ValueError, "burst"),
        (lambda: hn.RateLimiter.create("ok", 1.0, 2**32 + 1), ValueError, "burst"),
        (lambda: hn.RateLimiter.create("ok", 1e-9, 2**20), ValueError, "too long"),
        (lambda: hn.RateLimiter.attach(f"missing-{uuid.uuid4().hex}"), FileNotFoundError, "hongbao-rl-missing-"),
    ],
)
def test_invalid_arguments_raise_clear_errors(call, error: type[Exception], match: str) -> None:  # type: ignore[no-untyped-def]
    """Bad names, sizes, rates and missing segments raise ValueError / TypeError / FileNotFoundError."""
    with pytest.raises(error, match=match):
        call()
    assert not (SHM / "hongbao-ok").exists() and not (SHM / "hongbao-rl-ok").exists()


def test_method_arguments_are_range_checked(names: list[str]) -> None:
    """limit, pid and n outside their ranges raise ValueError (never OverflowError); keys must be str."""
    t = _table(names, 4)
    rl = _limiter(names, 1.0, 2)
    calls: list[tuple[Callable[[], object], str]] = [
        (lambda: t.try_enter("k", -1), r"limit must be in \[0, 4294967295\], got -1"),
        (lambda: t.try_enter("k", 2**32), "limit must be"),
        (lambda: t.try_enter("k", 2**100), "beyond 64 bits"),
        (lambda: t.reclaim(0), "pid must be"),
        (lambda: t.reclaim(2**31), "pid must be"),
        (lambda: t.try_enter("\ud800", 1), "surrogate"),
        (lambda: rl.try_acquire(-1), "n must be"),
        (lambda: rl.retry_after(-(2**70)), "beyond 64 bits"),
    ]
    for call, match in calls:
        with pytest.raises(ValueError, match=match):
            call()
    with pytest.raises(TypeError):
        t.try_enter(b"k", 1)  # type: ignore[arg-type]
    assert len(t) == 0
    assert rl.try_acquire(2) is True


# --- across processes ---------------------------------------------------------------------------

HAMMER_PROCS = 4
HAMMER_ITERS = 100_000
HAMMER_KEYS = ("p0", "p1", "p2")
HAMMER_LIMIT = 2
SUM_LIMIT = 1000
SUM_ATTEMPTS = 600


def _hammer(name: str, barrier, results, leave_now) -> None:  # type: ignore[no-untyped-def]
    try:
        t = hn.AdmissionTable.attach(name)
        barrier.wait()
        entered = violations = 0
        for i in range(HAMMER_ITERS):
            key = HAMMER_KEYS[i % len(HAMMER_KEYS)]
            if t.try_enter(key, HAMMER_LIMIT):
                entered += 1
                if t.in_flight(key) > HAMMER_LIMIT:
                    violations += 1
                t.leave(key)
        held = sum(t.try_enter("sum", SUM_LIMIT) for _ in range(SUM_ATTEMPTS))
        results.put(("ok", os.getpid(), entered, violations, held))
        leave_now.wait(60)
        for _ in range(held):
            t.leave("sum")
    except BaseException as e:  # reported to the parent, which fails the test
        results.put(("error", os.getpid(), repr(e), 0, 0))


def test_four_processes_never_exceed_the_limit_and_lose_no_count(names: list[str]) -> None:
    """4 processes x 100 000 enter/leave: in_flight never above the limit, no lost counts, all back to 0."""
    t = _table(names, 64)
    barrier, results, leave_now = FORK.Barrier(HAMMER_PROCS), FORK.Queue(), FORK.Event()
    procs = [FORK.Process(target=_hammer, args=(t.name, barrier, results, leave_now)) for _ in range(HAMMER_PROCS)]
    for p in procs:
        p.start()
    try:
        reports = [results.get(timeout=120) for _ in procs]
        assert [r[0] for r in reports] == ["ok"] * HAMMER_PROCS, reports
        assert sum(r[3] for r in reports) == 0, "in_flight exceeded the limit"
        assert all(r[2] > 0 for r in reports), reports
        held = {r[1]: r[4] for r in reports}
        assert sum(held.values()) == SUM_LIMIT, "exactly the limit admitted under contention"
        assert t.in_flight("sum") == SUM_LIMIT, "every successful enter is counted"
        assert len(t) == sum(1 for h in held.values() if h > 0)
        assert all(t.in_flight(k) == 0 for k in HAMMER_KEYS)
        leave_now.set()
    finally:
        leave_now.set()
        for p in procs:
            p.join(60)
    assert [p.exitcode for p in procs] == [0] * HAMMER_PROCS
    assert [t.in_flight(k) for k in (*HAMMER_KEYS, "sum")] == [0, 0, 0, 0]
    assert len(t) == 0


def _hold_then_sleep(t: hn.AdmissionTable, ready) -> None:  # type: ignore[no-untyped-def]
    for key in ("a", "a", "a", "b"):
        assert t.try_enter(key, 10)
    ready.send(os.getpid())
    time.sleep(60)


def test_reclaim_drops_a_killed_childs_counts(names: list[str]) -> None:
    """A forked child SIGKILLed while holding counts: reclaim(pid) returns them and frees its slots."""
    t = _table(names, 16)
    assert t.try_enter("a", 10)
    recv, send = FORK.Pipe(duplex=False)
    child = FORK.Process(target=_hold_then_sleep, args=(t, send))
    child.start()
    assert recv.poll(30)
    assert child.pid is not None and recv.recv() == child.pid != os.getpid()
    assert (t.in_flight("a"), t.in_flight("b"), len(t)) == (4, 1, 3)
    os.kill(child.pid, signal.SIGKILL)
    child.join(30)
    assert child.exitcode == -signal.SIGKILL
    assert t.reclaim(child.pid) == 4
    assert t.reclaim(child.pid) == 0
    assert (t.in_flight("a"), t.in_flight("b"), len(t)) == (1, 0, 1)
    t.leave("a")
    assert len(t) == 0


def test_a_dead_lock_holder_is_overtaken(names: list[str]) -> None:
    """A lock word left by a dead process is stolen after a bounded wait, with the counts intact."""
    t = _table(names, 16)
    assert t.try_enter("k", 5) and t.try_enter("k", 5)
    _set_lock_word(t.name, _dead_pid())
    start = time.monotonic()
    assert t.try_enter("k", 5)
    assert time.monotonic() - start < 10
    assert (t.in_flight("k"), len(t)) == (3, 1)


def _enter_and_report(name: str, send) -> None:  # type: ignore[no-untyped-def]
    send.send(hn.AdmissionTable.attach(name).try_enter("k", 1))


def test_a_live_lock_holder_is_waited_for(names: list[str]) -> None:
    """While a live process holds the lock, others wait (no steal); they proceed once it is released."""
    t = _table(names, 16)
    recv, send = FORK.Pipe(duplex=False)
    _set_lock_word(t.name, os.getpid())
    child = FORK.Process(target=_enter_and_report, args=(t.name, send))
    child.start()
    try:
        assert not recv.poll(1.0), "entered while the lock was held by a live process"
    finally:
        _set_lock_word(t.name, 0)
    assert recv.poll(30) and recv.recv() is True
    child.join(30)
    assert child.exitcode == 0 and child.pid is not None
    assert t.in_flight("k") == 1
    assert t.reclaim(child.pid) == 1


# --- RateLimiter --------------------------------------------------------------------------------


def test_rate_limiter_grants_exactly_burst(names: list[str]) -> None:
    """A fresh bucket grants exactly `burst` tokens, in any split, then refuses."""
    rl = _limiter(names, 0.001, 5)
    assert (rl.rate_per_second, rl.burst) == (0.001, 5)
    assert rl.retry_after() == 0.0
    assert rl.try_acquire(3) is True
    assert rl.try_acquire(3) is False
    assert rl.try_acquire(0) is True
    assert [rl.try_acquire() for _ in range(3)] == [True, True, False]
    assert 999.0 < rl.retry_after() <= 1000.0
    assert 2999.0 < rl.retry_after(3) <= 3000.0
    assert rl.retry_after(6) == math.inf
    assert rl.try_acquire(6) is False
    assert repr(rl) == f"RateLimiter(name='{rl.name}', rate_per_second=0.001, burst=5)"


def test_rate_limiter_refills_at_its_rate(names: list[str]) -> None:
    """After draining, about rate * elapsed tokens come back (generous margins for a loaded host)."""
    rl = _limiter(names, 20.0, 10)
    while rl.try_acquire():
        pass
    drained = time.monotonic()
    assert 0.0 < rl.retry_after() <= 0.05
    time.sleep(0.25)
    granted = 0
    while rl.try_acquire():
        granted += 1
    elapsed = time.monotonic() - drained
    assert 4 <= granted <= min(10, 20.0 * elapsed + 1), (granted, elapsed)


def test_rate_limiter_is_shared_by_attached_objects(names: list[str]) -> None:
    """Two mappings of one limiter draw from one bucket."""
    rl = _limiter(names, 0.001, 4)
    other = hn.RateLimiter.attach(rl.name)
    assert (other.rate_per_second, other.burst) == (0.001, 4)
    assert rl.try_acquire(3) and other.try_acquire()
    assert not rl.try_acquire() and not other.try_acquire()


RL_RATE, RL_BURST, RL_SECONDS = 100.0, 20, 0.5


def _draw(name: str, barrier, results) -> None:  # type: ignore[no-untyped-def]
    rl = hn.RateLimiter.attach(name)
    barrier.wait()
    start = time.monotonic()
    granted = 0
    while time.monotonic() - start < RL_SECONDS:
        granted += rl.try_acquire()
    results.put((granted, start, time.monotonic()))


def test_rate_limiter_is_host_wide_across_processes(names: list[str]) -> None:
    """Two processes drawing from one bucket get burst + rate * elapsed in total, not each."""
    rl = _limiter(names, RL_RATE, RL_BURST)
    barrier, results = FORK.Barrier(2), FORK.Queue()
    procs = [FORK.Process(target=_draw, args=(rl.name, barrier, results)) for _ in range(2)]
    for p in procs:
        p.start()
    reports = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    total = sum(r[0] for r in reports)
    elapsed = max(r[2] for r in reports) - min(r[1] for r in reports)
    assert total <= RL_BURST + RL_RATE * elapsed + 2, (total, elapsed)
    assert total >= RL_BURST + RL_RATE * RL_SECONDS * 0.5, (total, elapsed)
