"""Accounts: balances, top-ups (each Idempotency-Key applies once, for one amount) and the bill
(the ledger, newest first; past the first pages refused under pressure)."""

from __future__ import annotations

import re
import secrets

from hongbao.core import errors
from hongbao.core.clock import Clock
from hongbao.core.money import parse_fen
from hongbao.core.ports import LedgerEntry, LedgerStore
from hongbao.core.rules import valid_user_id
from hongbao.core.services.pressure import ListsPressure
from hongbao.core.times import rfc3339
from hongbao.core.vocabulary import EntryKind

PAGE_SIZE = 20
MAX_TOPUP_FEN = 100_000_000_000  # 1e9 yuan a top-up: keeps every balance far from the int64 limit of its column
_IDEMPOTENCY_KEY = re.compile(r"[!-~]{1,128}")


class Accounts:
    """The accounts over ``ledger``; the bill's pages follow the lists' ``pressure`` switch."""

    __slots__ = ("ledger", "clock", "pressure")

    def __init__(self, ledger: LedgerStore, clock: Clock, pressure: ListsPressure) -> None:
        self.ledger, self.clock, self.pressure = ledger, clock, pressure

    async def topup(self, user_id: str, amount_fen: object, key: str | None) -> bool:
        """Add ``amount_fen`` (an integer, 1..MAX_TOPUP_FEN) to ``user_id``'s balance once per
        idempotency ``key`` (1..128 visible ASCII characters; None: a fresh one), ledger ref
        ``user_id:key``; False on a repeat. Raises InvalidRequest (a bad user id or key),
        InvalidAmount, IdempotencyKeyReused (the key again with another amount: nothing moves)."""
        if not valid_user_id(user_id):
            raise errors.InvalidRequest("user_id must be 1..64 of [A-Za-z0-9_-]")
        amount_fen = parse_fen(amount_fen)
        if amount_fen > MAX_TOPUP_FEN:
            raise errors.InvalidAmount(f"amount_fen is at most {MAX_TOPUP_FEN} fen a top-up")
        if key is None:
            key = secrets.token_hex(16)
        elif not _IDEMPOTENCY_KEY.fullmatch(key):
            raise errors.InvalidRequest("Idempotency-Key must be 1..128 visible ASCII characters")
        ref = f"{user_id}:{key}"
        applied = await self.ledger.post(LedgerEntry(user_id, EntryKind.TOPUP, ref, amount_fen, self.clock.now_ms()))
        if not applied and (first := await self.ledger.amount(user_id, EntryKind.TOPUP, ref)) != amount_fen:
            raise errors.IdempotencyKeyReused(
                f"Idempotency-Key {key} was used for a top-up of {first} fen, not {amount_fen} fen"
            )
        return applied

    async def balance(self, user_id: str) -> int:
        """``user_id``'s balance in fen."""
        return await self.ledger.balance(user_id)

    async def bill(self, user_id: str, page: int) -> dict[str, object]:
        """Page ``page`` (PAGE_SIZE entries) of ``user_id``'s ledger, newest first. Raises
        Degraded for a page the pressure switch sheds."""
        self.pressure.check(page)
        entries = await self.ledger.entries(user_id, (page - 1) * PAGE_SIZE, PAGE_SIZE)
        return {
            "page": page,
            "items": [
                {"kind": e.kind, "ref": e.ref, "amount_fen": e.amount_fen, "created_at": rfc3339(e.created_at_ms)}
                for e in entries
            ],
        }
