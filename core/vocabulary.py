"""The money side's vocabulary, one enum per closed set of words (the wire values are the enum
values, so a stored or queued word and its enum compare equal): ledger entry kinds, list
directions and the refusals of an open. Packet kinds and statuses are in hongbao.core.packet."""

from __future__ import annotations

from enum import StrEnum


class EntryKind(StrEnum):
    """What a ledger entry records; its ``ref`` is unique per kind (docs/architecture.md, the ledger)."""

    TOPUP = "topup"  # ref: ``user_id:Idempotency-Key``
    SEND = "send"  # the sender's debit at a pay; ref: the order id
    CREDIT = "credit"  # a share reaching its receiver; ref: ``order_id:user_id``
    REFUND = "refund"  # an expired packet's remainder back to its sender; ref: the order id


class Direction(StrEnum):
    """Which of a user's two lists a row belongs to."""

    SENT = "sent"
    RECEIVED = "received"


class Refusal(StrEnum):
    """Why an open in a batch got no receipt (the error code it is answered with)."""

    FINISHED = "finished"  # no share left
    EXPIRED = "expired"  # past its expiry (or refunded)
    NOT_FOUND = "not_found"  # no such packet
