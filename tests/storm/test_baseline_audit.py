"""The baseline's audit in a ladder's rung (bench/storm/peak.py): put in the storm's summary by
``report.audit_entry`` and judged by ``audit_violations`` as hongbao's is, so an audit of the wrong
database, or one that lost packets, fails the rung."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hongbao.bench.storm import report
from hongbao.bench.storm.peak import audit_violations
from hongbao.core.audit import AuditReport


def summary(audit: AuditReport, paid: int, topped_up: int) -> dict[str, Any]:
    """The part of a storm's summary the judgement reads, with ``audit`` entered as ``play`` enters it."""
    return {"clients": {"disagreements": 0}, "audit": report.audit_entry(audit, paid, topped_up)}


def test_an_audit_that_found_what_the_storm_paid_is_clean() -> None:
    judged = summary(AuditReport(counts=Counter({"packets": 3, "receipts": 12, "top-ups fen": 900})), 3, 40)
    assert audit_violations(judged) == []
    assert report.money_ok(judged) is True


def test_an_audit_that_found_fewer_packets_than_were_paid_fails() -> None:
    judged = summary(AuditReport(counts=Counter({"packets": 2, "receipts": 8})), 3, 40)
    found = audit_violations(judged)
    assert len(found) == 1 and "found 2 packets but the storm paid 3" in found[0]
    assert report.money_ok(judged) is False


def test_an_audit_of_an_empty_database_fails_before_its_own_violations() -> None:
    judged = summary(AuditReport(violations=["b1: 2 shares opened, 1 receipt"]), 0, 40)
    found = audit_violations(judged)
    assert len(found) == 2 and "found nothing" in found[0] and found[1] == "b1: 2 shares opened, 1 receipt"
    assert report.money_ok(judged) is False
