"""PacketStore on SQLite: packets and receipts in their day tables, the batched open transaction.

Every money transaction is ``BEGIN IMMEDIATE`` (see sqlite_db), which on SQLite is the row lock
of docs/architecture.md section 6: one writer at a time, so a refund racing the last open is serialised.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import hongbao_native
from hongbao.core.adapters.sql import (
    DAYS,
    PACKET_COLUMNS,
    RECEIPT_COLUMNS,
    packet_from_row,
    packet_table,
    packet_values,
    plan_opens,
    receipt_from_row,
    receipt_table,
)
from hongbao.core.adapters.sqlite.db import SqliteDb
from hongbao.core.packet import Packet, Receipt, Status
from hongbao.core.ports import Draw, OpenResult
from hongbao.core.vocabulary import Refusal


class SqlitePacketStore:
    """The embedded PacketStore (see hongbao.core.ports.PacketStore for the contract)."""

    __slots__ = ("_db",)

    def __init__(self, db: SqliteDb) -> None:
        self._db = db

    def _tables(self, order_id: str) -> tuple[str, str]:
        _, table, day = hongbao_native.shard_of(order_id, 1, self._db.n_tables)
        return packet_table(table, day), receipt_table(table, day)

    def _all_tables(self) -> list[tuple[str, str]]:
        return [(packet_table(t, d), receipt_table(t, d)) for t in range(self._db.n_tables) for d in DAYS]

    async def insert_packet(self, packet: Packet) -> bool:
        """Insert the packet row; False if the order id exists (idempotent pay)."""
        ptable, _ = self._tables(packet.order_id)
        values = packet_values(packet)

        def insert() -> bool:
            with self._db.immediate() as conn:
                cur = conn.execute(
                    f"INSERT INTO {ptable} ({PACKET_COLUMNS}) VALUES ({','.join('?' * 14)}) "
                    "ON CONFLICT (order_id) DO NOTHING",
                    values,
                )
                return cur.rowcount == 1

        return await self._db.run(insert)

    async def get_packet(self, order_id: str) -> Packet | None:
        """The packet row, or None."""
        ptable, _ = self._tables(order_id)

        def get() -> Packet | None:
            row = self._db.reader.execute(
                f"SELECT {PACKET_COLUMNS} FROM {ptable} WHERE order_id = ?", (order_id,)
            ).fetchone()
            return None if row is None else packet_from_row(row)

        return self._db.read(get)

    async def get_packets(self, order_ids: Sequence[str]) -> dict[str, Packet]:
        """The packet rows of ``order_ids`` that exist (point reads on this thread: the file is local)."""
        found = [await self.get_packet(order_id) for order_id in dict.fromkeys(order_ids)]
        return {packet.order_id: packet for packet in found if packet is not None}

    def database(self, order_id: str) -> int:
        """0: the embedded file is the one database (hongbao.core.ports.PacketStore.database).
        Raises ValueError for an order id that does not parse."""
        self._tables(order_id)
        return 0

    async def open_batches(
        self, batches: Sequence[tuple[str, Sequence[str]]], now_ms: int, draw: Draw, credit_from: int | None = None
    ) -> list[list[OpenResult]]:
        """The batched open transaction (hongbao.core.ports.PacketStore.open_batches): one
        immediate transaction, the packets taken in order id order. ``credit_from`` is not used:
        the credit that follows is a write to the same local file, with no round trip to save."""

        def run() -> list[list[OpenResult]]:
            results: dict[str, list[OpenResult]] = {}
            with self._db.immediate() as conn:
                for order_id, user_ids in sorted(batches, key=lambda batch: batch[0]):
                    results[order_id] = self._open_one(conn, order_id, user_ids, now_ms, draw)
            return [results[order_id] for order_id, _ in batches]

        return await self._db.run(run)

    def _open_one(
        self, conn: sqlite3.Connection, order_id: str, user_ids: Sequence[str], now_ms: int, draw: Draw
    ) -> list[OpenResult]:
        ptable, rtable = self._tables(order_id)
        row = conn.execute(f"SELECT {PACKET_COLUMNS} FROM {ptable} WHERE order_id = ?", (order_id,)).fetchone()
        if row is None:
            return [OpenResult(None, Refusal.NOT_FOUND) for _ in user_ids]
        packet = packet_from_row(row)
        plan = plan_opens(packet, self._existing(conn, rtable, order_id, user_ids), user_ids, now_ms, draw)
        if not plan.inserts:
            return plan.results
        conn.executemany(
            f"INSERT INTO {rtable} (order_id, user_id, position, amount_fen, opened_at, credit_status) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            plan.inserts,
        )
        best = self._best_luck(conn, rtable, order_id) if plan.finished else None
        conn.execute(
            f"UPDATE {ptable} SET remaining_fen = ?, remaining_count = ?, status = ?, best_luck_user_id = ? "
            "WHERE order_id = ?",
            (
                plan.remaining_fen,
                plan.remaining_count,
                (Status.FINISHED if plan.finished else Status.ACTIVE).value,
                None if best is None else best.user_id,
                order_id,
            ),
        )
        return plan.crowned(best)

    @staticmethod
    def _existing(conn: sqlite3.Connection, rtable: str, order_id: str, user_ids: Sequence[str]) -> dict[str, Receipt]:
        marks = ",".join("?" * len(user_ids))
        rows = conn.execute(
            f"SELECT {RECEIPT_COLUMNS} FROM {rtable} WHERE order_id = ? AND user_id IN ({marks})", (order_id, *user_ids)
        )
        return {str(r[1]): receipt_from_row(r) for r in rows}

    @staticmethod
    def _best_luck(conn: sqlite3.Connection, rtable: str, order_id: str) -> Receipt | None:
        row = conn.execute(
            f"SELECT {RECEIPT_COLUMNS} FROM {rtable} WHERE order_id = ? ORDER BY amount_fen DESC, position ASC LIMIT 1",
            (order_id,),
        ).fetchone()
        return None if row is None else receipt_from_row(row)

    async def best_luck(self, order_id: str) -> str | None:
        """The best-luck user id once the packet is finished (largest share, earliest open on ties)."""
        ptable, _ = self._tables(order_id)

        def get() -> str | None:
            row = self._db.reader.execute(
                f"SELECT best_luck_user_id FROM {ptable} WHERE order_id = ?", (order_id,)
            ).fetchone()
            return None if row is None or row[0] is None else str(row[0])

        return self._db.read(get)

    async def best_lucks(self, order_ids: Sequence[str]) -> dict[str, str | None]:
        """``best_luck`` of each packet (point reads on this thread: the file is local)."""
        return {order_id: await self.best_luck(order_id) for order_id in dict.fromkeys(order_ids)}

    async def receipts_of(self, keys: Sequence[tuple[str, str]]) -> list[Receipt]:
        """The receipts of ``keys`` that exist (point reads on this thread: the file is local)."""
        found = [await self.receipt(order_id, user_id) for order_id, user_id in dict.fromkeys(keys)]
        return [receipt for receipt in found if receipt is not None]

    async def receipts(self, order_id: str) -> list[Receipt]:
        """Every receipt of the packet, in open order."""
        _, rtable = self._tables(order_id)
        sql = f"SELECT {RECEIPT_COLUMNS} FROM {rtable} WHERE order_id = ? ORDER BY position"
        return self._db.read(lambda: [receipt_from_row(r) for r in self._db.reader.execute(sql, (order_id,))])

    async def receipt(self, order_id: str, user_id: str) -> Receipt | None:
        """The user's receipt for the packet, or None."""
        _, rtable = self._tables(order_id)
        sql = f"SELECT {RECEIPT_COLUMNS} FROM {rtable} WHERE order_id = ? AND user_id = ?"

        def get() -> Receipt | None:
            row = self._db.reader.execute(sql, (order_id, user_id)).fetchone()
            return None if row is None else receipt_from_row(row)

        return self._db.read(get)

    async def refund(self, order_id: str, now_ms: int) -> Packet | None:
        """Record the refund of the remainder once, at or after expiry (PacketStore.refund)."""
        ptable, _ = self._tables(order_id)

        def refund() -> Packet | None:
            with self._db.immediate() as conn:
                cur = conn.execute(
                    f"UPDATE {ptable} SET refunded_fen = remaining_fen, remaining_fen = 0, "
                    "status = CASE WHEN remaining_fen > 0 THEN ? ELSE ? END "
                    "WHERE order_id = ? AND status = ? AND expires_at <= ?",
                    (Status.EXPIRED.value, Status.FINISHED.value, order_id, Status.ACTIVE.value, now_ms),
                )
                if cur.rowcount != 1:
                    return None
                row = conn.execute(f"SELECT {PACKET_COLUMNS} FROM {ptable} WHERE order_id = ?", (order_id,)).fetchone()
                packet = packet_from_row(row)
                return packet if packet.status is Status.EXPIRED else None

        return await self._db.run(refund)

    async def mark_refunded(self, order_id: str) -> None:
        """Expired -> refunded once the sender's refund is in the ledger."""
        ptable, _ = self._tables(order_id)

        def mark() -> None:
            with self._db.immediate() as conn:
                conn.execute(
                    f"UPDATE {ptable} SET status = ? WHERE order_id = ? AND status = ?",
                    (Status.REFUNDED.value, order_id, Status.EXPIRED.value),
                )

        await self._db.run(mark)

    async def unpaid_refunds(self, limit: int) -> list[Packet]:
        """Expired packets whose refund has not been credited yet."""

        def scan() -> list[Packet]:
            found: list[Packet] = []
            for ptable, _ in self._all_tables():
                rows = self._db.conn.execute(
                    f"SELECT {PACKET_COLUMNS} FROM {ptable} WHERE status = ? LIMIT ?", (Status.EXPIRED.value, limit)
                )
                found += (packet_from_row(r) for r in rows)
            return found[:limit]

        return await self._db.run(scan)

    async def due_refunds(self, now_ms: int, limit: int) -> list[str]:
        """Active packets past expiry, oldest first (the scan behind the refund scheduler)."""

        def scan() -> list[str]:
            found: list[tuple[int, str]] = []
            for ptable, _ in self._all_tables():
                found += self._db.conn.execute(
                    f"SELECT expires_at, order_id FROM {ptable} WHERE status = ? AND expires_at <= ? "
                    "ORDER BY expires_at LIMIT ?",
                    (Status.ACTIVE.value, now_ms, limit),
                ).fetchall()
            return [order_id for _, order_id in sorted(found)[:limit]]

        return await self._db.run(scan)

    async def mark_credited(self, receipts: Sequence[tuple[str, str]]) -> None:
        """Mark each (order_id, user_id) receipt credited, all in one transaction."""
        rows = [(self._tables(order_id)[1], order_id, user_id) for order_id, user_id in receipts]

        def mark() -> None:
            with self._db.immediate() as conn:
                for rtable in sorted({r[0] for r in rows}):
                    conn.executemany(
                        f"UPDATE {rtable} SET credit_status = 'credited' WHERE order_id = ? AND user_id = ?",
                        [(o, u) for t, o, u in rows if t == rtable],
                    )

        await self._db.run(mark)

    async def uncredited(self, opened_before_ms: int, limit: int) -> list[Receipt]:
        """Pending receipts opened before ``opened_before_ms``, oldest first (the reconciler's scan)."""

        def scan() -> list[Receipt]:
            found: list[Receipt] = []
            for _, rtable in self._all_tables():
                rows = self._db.conn.execute(
                    f"SELECT {RECEIPT_COLUMNS} FROM {rtable} WHERE credit_status = 'pending' AND opened_at < ? "
                    "ORDER BY opened_at LIMIT ?",
                    (opened_before_ms, limit),
                )
                found += (receipt_from_row(r) for r in rows)
            return sorted(found, key=lambda r: r.opened_at_ms)[:limit]

        return await self._db.run(scan)
