"""The baseline's audit in a ladder's rung (bench/storm/peak.py ``baseline_violations``): judged as
hongbao's is, so an audit of the wrong database, or one that lost packets, fails the rung."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hongbao.bench.storm.peak import baseline_violations
from hongbao.core.audit import AuditReport


def summary(paid: int, topped_up: int) -> dict[str, Any]:
    """The part of a storm's summary the judgement reads."""
    return {"clients": {"packets_paid": paid, "users_topped_up": topped_up, "disagreements": 0}}


def test_an_audit_that_found_what_the_storm_paid_is_clean() -> None:
    audit = AuditReport(counts=Counter({"packets": 3, "receipts": 12, "top-ups fen": 900}))
    assert baseline_violations(audit, summary(3, 40)) == []


def test_an_audit_that_found_fewer_packets_than_were_paid_fails() -> None:
    audit = AuditReport(counts=Counter({"packets": 2, "receipts": 8}))
    found = baseline_violations(audit, summary(3, 40))
    assert len(found) == 1 and "found 2 packets but the storm paid 3" in found[0]


def test_an_audit_of_an_empty_database_fails_before_its_own_violations() -> None:
    audit = AuditReport(violations=["b1: 2 shares opened, 1 receipt"])
    found = baseline_violations(audit, summary(0, 40))
    assert len(found) == 2 and "found nothing" in found[0] and found[1] == "b1: 2 shares opened, 1 receipt"
