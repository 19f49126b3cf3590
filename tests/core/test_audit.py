"""The money audit (docs/architecture.md section 11) passes on honest data and names every kind of tampering."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hongbao.core.adapters.sqlite.audit import audit_sqlite
from hongbao.core.adapters.sqlite.db import SqliteDb
from hongbao.core.clock import ManualClock
from hongbao.server.cli import main as cli_main
from hongbao.server.composition import DB_FILE, Backend

DAY_MS = 24 * 3600 * 1000


def _file(backend: Backend) -> SqliteDb:
    """The embedded backend's money file."""
    assert backend.sqlite is not None
    return backend.sqlite


async def _world(backend: Backend, clock: ManualClock) -> list[str]:
    """Two packets: one finished, one expired and refunded; everything credited."""
    svc = backend.services
    await svc.ports.groups.create("g", "A", ["B", "C"], clock.now_ms())
    await svc.accounts.topup("A", 1000, "t1")
    done, _ = await svc.sending.send("A", {"count": 2, "total_fen": 300, "group_id": "g"})
    await svc.sending.pay("A", done)
    left, _ = await svc.sending.send("A", {"kind": "equal", "count": 3, "per_share_fen": 50, "group_id": "g"})
    await svc.sending.pay("A", left)
    for user in ("B", "C"):
        await svc.opening.open(user, done)
    await svc.opening.open("B", left)
    clock.advance_ms(DAY_MS)
    await svc.settlement.refund_due()
    while await svc.settlement.drain_credits():
        pass
    await svc.settlement.reconcile(window_ms=0)
    return [done, left]


def _tamper(backend: Backend, sql: str) -> None:
    with sqlite3.connect(_file(backend).path) as conn:
        conn.execute(sql)


async def test_honest_world_has_no_violations(backend: Backend, clock: ManualClock) -> None:
    """After a finished and a refunded packet, fully credited: 0 violations, with the counts and the fen."""
    await _world(backend, clock)
    report = audit_sqlite(_file(backend).path)
    assert report.ok, report.lines()
    assert report.counts["packets"] == 2 and report.counts["receipts"] == 3
    assert report.counts["packets finished"] == 1 and report.counts["packets refunded"] == 1
    assert report.lines()[-1] == "audit: 0 violations"
    money = {k.removesuffix(" fen"): v for k, v in report.counts.items() if k.endswith(" fen")}
    assert money == {
        "top-ups": 1000,
        "paid": 450,
        "opened": 350,
        "credited": 350,
        "refunded": 100,
        "active": 0,
        "uncredited": 0,
        "unpaid refunds": 0,
        "balances": 1000,
    }


@pytest.mark.parametrize(
    ("sql", "needle"),
    [
        ("UPDATE t_account SET balance_fen = balance_fen + 1 WHERE user_id = 'B'", "money made or lost"),
        ("UPDATE t_account SET balance_fen = balance_fen + 1 WHERE user_id = 'B'", "balance"),
        ("DELETE FROM t_ledger WHERE kind = 'refund'", "ledger"),
        ("UPDATE t_ledger SET amount_fen = amount_fen - 1 WHERE kind = 'send'", "send debit"),
    ],
)
async def test_tampering_is_named(backend: Backend, clock: ManualClock, sql: str, needle: str) -> None:
    """Money made, a balance off its ledger, a lost refund entry, a debit without its packet: each is a violation."""
    await _world(backend, clock)
    path = _file(backend).path
    _tamper(backend, sql)
    report = audit_sqlite(path)
    assert not report.ok and any(needle in v for v in report.violations), report.lines()


async def test_share_tampering_breaks_the_packet_sum(backend: Backend, clock: ManualClock) -> None:
    """A receipt changed after the fact breaks its packet's sum and its credit match."""
    orders = await _world(backend, clock)
    path = _file(backend).path
    for table in [
        r[0]
        for r in _file(backend).conn.execute(
            "SELECT name FROM sqlite_master WHERE name LIKE 't_receipt_%' AND type='table'"
        )
    ]:
        _tamper(
            backend, f"UPDATE {table} SET amount_fen = amount_fen + 1 WHERE order_id = '{orders[0]}' AND user_id = 'B'"
        )
    violations = audit_sqlite(path).violations
    assert any(f"{orders[0]}: opened" in v for v in violations)
    assert any(f"{orders[0]}:B" in v and "credited" in v for v in violations)


async def test_pending_credit_is_a_violation_only_once_drained(backend: Backend, clock: ManualClock) -> None:
    """An uncredited receipt still balances the books; after the reconciler it is a violation."""
    svc = backend.services
    await svc.ports.groups.create("g", "A", ["B"], clock.now_ms())
    await svc.accounts.topup("A", 100, "t")
    order_id, _ = await svc.sending.send("A", {"count": 1, "total_fen": 100, "group_id": "g"})
    await svc.sending.pay("A", order_id)
    await svc.opening.open("B", order_id)  # queued, not drained
    path = _file(backend).path
    assert audit_sqlite(path, drained=False).ok
    assert any("no credit in the ledger" in v for v in audit_sqlite(path, drained=True).violations)


async def test_a_credit_between_its_two_steps_is_counted_once(backend: Backend, clock: ManualClock) -> None:
    """Ledger credit written, receipt not yet marked (a crash between the two steps): the books
    balance; once drained it is named, and a repeated credit repairs it without paying twice."""
    svc = backend.services
    await svc.ports.groups.create("g", "A", ["B"], clock.now_ms())
    await svc.accounts.topup("A", 100, "t")
    order_id, _ = await svc.sending.send("A", {"count": 1, "total_fen": 100, "group_id": "g"})
    await svc.sending.pay("A", order_id)
    await svc.opening.open("B", order_id)
    await svc.crediting.credit(order_id, "B")
    for table in [
        r[0]
        for r in _file(backend).conn.execute(
            "SELECT name FROM sqlite_master WHERE name LIKE 't_receipt_%' AND type='table'"
        )
    ]:
        _tamper(backend, f"UPDATE {table} SET credit_status = 'pending' WHERE order_id = '{order_id}'")
    assert audit_sqlite(_file(backend).path, drained=False).ok
    assert any("still marked pending" in v for v in audit_sqlite(_file(backend).path, drained=True).violations)
    clock.advance_ms(1)
    await svc.settlement.reconcile(window_ms=0)
    assert audit_sqlite(_file(backend).path, drained=True).ok
    assert await svc.ports.ledger.balance("B") == 100


def test_cli_on_an_empty_database_has_nothing_to_audit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`hongbao audit` on a database with no packets and no ledger entries does not print "0
    violations": it names the file it looked at, says there was nothing to audit, and exits 2."""
    data = tmp_path / "var"
    SqliteDb(data / DB_FILE).close()
    assert cli_main(["audit", "--data-dir", str(data)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "violations" not in err
    assert err.splitlines() == [
        f"hongbao audit: nothing to audit in SQLite {data / DB_FILE}: no packets, no ledger entries"
    ]


def test_cli_on_a_file_without_the_schema_has_nothing_to_audit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A zero-byte hongbao.db (no tables at all): nothing to audit, exit 2, no traceback."""
    data = tmp_path / "var"
    data.mkdir()
    (data / DB_FILE).touch()
    assert cli_main(["audit", "--data-dir", str(data), "--not-drained"]) == 2
    assert "nothing to audit in SQLite" in capsys.readouterr().err


async def test_cli_names_the_database_it_audited(
    backend: Backend, clock: ManualClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """On books with money in them: the database first, the counts, `audit: 0 violations` last, exit 0."""
    await _world(backend, clock)
    assert cli_main(["audit", "--data-dir", str(_file(backend).path.parent)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"audited: SQLite {_file(backend).path}" and "packets: 2" in lines
    assert lines[-1] == "audit: 0 violations"
