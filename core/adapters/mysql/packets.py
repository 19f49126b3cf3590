"""PacketStore on the sharded MySQL/MariaDB schema: the batched open transaction of docs/architecture.md
section 6 (lock each packet row of the batch once with SELECT ... FOR UPDATE, in order id order,
joined with the batch's receipts already there; insert the new receipts in one multi-row INSERT
per table, update each remainder once: the inserts, the updates, best luck's read for the packets
the batch finishes, and the COMMIT in one round trip), and
the refund serialised by that same row lock.

Point updates by order id name the primary key (FORCE INDEX): on small tables the optimizer
would otherwise range-scan the (status, expires_at) index and lock its neighbours, which turns
concurrent refunds of different packets into deadlocks. Scans (due refunds, uncredited receipts,
unpaid refunds) send one UNION ALL query per database over its day tables, every database at once,
instead of a round trip per table.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import defaultdict
from collections.abc import Callable, Sequence

from asyncmy.constants.ER import DUP_ENTRY
from asyncmy.cursors import Cursor
from asyncmy.errors import IntegrityError
from hongbao.core.adapters.mysql.db import (
    SCAN_TIMEOUT_S,
    Committed,
    MysqlShards,
    Row,
    commit_with,
    key_rows,
    marks,
    result_sets,
    run_statement,
)
from hongbao.core.adapters.mysql.ledger import credit_statements
from hongbao.core.adapters.mysql.schema import day_tables
from hongbao.core.adapters.sql import (
    PACKET_COLUMNS,
    RECEIPT_COLUMNS,
    OpenPlan,
    packet_from_row,
    packet_table,
    packet_values,
    plan_opens,
    receipt_from_row,
    receipt_table,
)
from hongbao.core.packet import Packet, Receipt, Status
from hongbao.core.ports import Draw, OpenResult, credit_entry
from hongbao.core.vocabulary import Refusal

#: The packet's and the receipt's columns, qualified for the open's join (p: packet, r: receipt).
_P_COLUMNS = ", ".join(f"p.{c.strip()}" for c in PACKET_COLUMNS.split(","))
_R_COLUMNS = ", ".join(f"r.{c.strip()}" for c in RECEIPT_COLUMNS.split(","))
_N_P = len(PACKET_COLUMNS.split(","))
_INSERT_PACKET = (
    f"INSERT INTO {{table}} ({PACKET_COLUMNS}) VALUES ({', '.join(['%s'] * 14)}) "
    "ON DUPLICATE KEY UPDATE order_id = order_id"
)


class MysqlPacketStore:
    """The production PacketStore (see hongbao.core.ports.PacketStore for the contract).
    ``ledger_here``: the accounts and the ledger are in ``shards`` too (hongbao.core.adapters.mysql.
    ledger), so an open may credit its receipts in its own transaction where the receiver's
    database is on the packet's server (``open_batches``)."""

    __slots__ = ("_shards", "_ledger_here")

    def __init__(self, shards: MysqlShards, *, ledger_here: bool = False) -> None:
        self._shards, self._ledger_here = shards, ledger_here

    def _where(self, order_id: str) -> tuple[int, str, str]:
        db, table, day = self._shards.layout.order_shard(order_id)
        return db, packet_table(table, day), receipt_table(table, day)

    async def insert_packet(self, packet: Packet) -> bool:
        """Insert the packet row; False if the order id exists (idempotent pay)."""
        db, ptable, _ = self._where(packet.order_id)
        return await self._shards.execute(db, _INSERT_PACKET.format(table=ptable), packet_values(packet)) == 1

    async def get_packet(self, order_id: str) -> Packet | None:
        """The packet row, or None."""
        db, ptable, _ = self._where(order_id)
        row = await self._shards.fetchone(db, f"SELECT {PACKET_COLUMNS} FROM {ptable} WHERE order_id = %s", (order_id,))
        return None if row is None else packet_from_row(row)

    async def get_packets(self, order_ids: Sequence[str]) -> dict[str, Packet]:
        """The packet rows of ``order_ids`` that exist: one query per database (every database at
        once), each within SCAN_TIMEOUT_S."""
        rows = await self._packet_rows(order_ids, PACKET_COLUMNS, SCAN_TIMEOUT_S)
        return {packet.order_id: packet for packet in map(packet_from_row, rows)}

    def database(self, order_id: str) -> int:
        """The database of the packet (hongbao.core.ports.PacketStore.database)."""
        return self._where(order_id)[0]

    async def open_batches(
        self, batches: Sequence[tuple[str, Sequence[str]]], now_ms: int, draw: Draw, credit_from: int | None = None
    ) -> list[list[OpenResult]]:
        """The batched open transaction of packets on one database (hongbao.core.ports.PacketStore.
        open_batches): one round trip locks the rows in order id order (per packet, the row joined
        with the batch's receipts already there: one prepared statement for a lone opener, else
        one text statement per packet), one more inserts the new receipts (one multi-row INSERT per
        receipt table), writes the credits of those at or above ``credit_from`` whose receiver's
        database is on this server (``ledger_here``; their ledger rows and balances, ledger.
        credit_statements), updates each remainder, reads best luck of what finished, and commits.
        A credit's ledger row already there (DUP_ENTRY) reruns the transaction with no credit in it."""
        places = [self._where(order_id) for order_id, _ in batches]
        if len({db for db, _, _ in places}) > 1:
            raise ValueError("open_batches takes the packets of one database")
        if credit_from is None or not self._ledger_here:
            return await self._open_batches(batches, places, now_ms, draw, None)
        layout, db = self._shards.layout, places[0][0]

        def credit(user_id: str, amount_fen: int) -> bool:
            return amount_fen >= credit_from and self._shards.same_server(db, layout.key_shard(user_id)[0])

        try:
            return await self._open_batches(batches, places, now_ms, draw, credit)
        except IntegrityError as exc:
            if exc.args[0] != DUP_ENTRY:
                raise
            return await self._open_batches(batches, places, now_ms, draw, None)

    async def _open_batches(
        self,
        batches: Sequence[tuple[str, Sequence[str]]],
        places: list[tuple[int, str, str]],
        now_ms: int,
        draw: Draw,
        credit: Callable[[str, int], bool] | None,
    ) -> list[list[OpenResult]]:
        """``open_batches``' transaction, crediting the new receipts ``credit(user_id, amount_fen)`` picks."""
        order = sorted(range(len(batches)), key=lambda i: batches[i][0])

        async def body(cur: Cursor) -> list[list[OpenResult]] | Committed[list[list[OpenResult]]]:
            results: list[list[OpenResult]] = [[] for _ in batches]
            plans: dict[int, OpenPlan] = {}
            for i, found in zip(
                order, await self._lock(cur, [(places[i][1:], *batches[i]) for i in order]), strict=True
            ):
                order_id, user_ids = batches[i]
                if not found:
                    results[i] = [OpenResult(None, Refusal.NOT_FOUND) for _ in user_ids]
                    continue
                existing = {str(r[_N_P + 1]): receipt_from_row(r[_N_P:]) for r in found if r[_N_P] is not None}
                plans[i] = plan = plan_opens(packet_from_row(found[0][:_N_P]), existing, user_ids, now_ms, draw, credit)
                results[i] = plan.results
            writing = [i for i in order if i in plans and plans[i].inserts]
            if not writing:
                return results
            receipts: dict[str, list[object]] = defaultdict(list)  # receipt table -> the values of its rows
            for i in writing:
                receipts[places[i][2]] += [value for insert in plans[i].inserts for value in insert]
            statements = [
                f"INSERT INTO {rtable} (order_id, user_id, position, amount_fen, opened_at, credit_status) VALUES "
                + ", ".join(["(%s, %s, %s, %s, %s, %s)"] * (len(values) // 6))
                for rtable, values in receipts.items()
            ]
            args = [value for values in receipts.values() for value in values]
            credited = [
                credit_entry(result.receipt, now_ms)
                for i in writing
                for result in plans[i].results
                if result.receipt is not None and result.receipt.credited and not result.repeat
            ]
            if credited:
                more, values = credit_statements(self._shards.layout, credited)
                statements += more
                args += values
            finishing = []
            for i in writing:
                plan, (_, ptable, rtable), order_id = plans[i], places[i], batches[i][0]
                update = f"UPDATE {ptable} SET remaining_fen = %s, remaining_count = %s, status = %s"
                status = Status.FINISHED if plan.finished else Status.ACTIVE
                args += [plan.remaining_fen, plan.remaining_count, status.value]
                if plan.finished:  # best luck among every receipt, this batch's included (largest, earliest on ties)
                    best_sql = f"FROM {rtable} WHERE order_id = %s ORDER BY amount_fen DESC, position LIMIT 1"
                    statements.append(f"{update}, best_luck_user_id = (SELECT user_id {best_sql}) WHERE order_id = %s")
                    statements.append(f"SELECT {RECEIPT_COLUMNS} {best_sql}")
                    args += [order_id, order_id, order_id]
                    finishing.append(i)
                else:
                    statements.append(f"{update} WHERE order_id = %s")
                    args.append(order_id)
            bests = await commit_with(cur, "; ".join(statements), args)  # one round trip, the COMMIT with it
            crowned = {i: receipt_from_row(row) for i, row in zip(finishing, bests, strict=True)}
            for i in writing:
                results[i] = plans[i].crowned(crowned.get(i))
            return Committed(results)

        return await self._shards.transaction(places[0][0], body)

    @staticmethod
    async def _lock(cur: Cursor, packets: list[tuple[tuple[str, str], str, Sequence[str]]]) -> list[list[Row]]:
        """Lock each of ``packets`` ((packet table, receipt table), order id, user ids), in the
        order given, in one round trip: per packet, its row joined with those users' receipts
        (no rows: no such packet)."""
        statements: list[str] = []
        args: list[object] = []
        for (ptable, rtable), order_id, user_ids in packets:
            statements.append(
                f"SELECT {_P_COLUMNS}, {_R_COLUMNS} FROM {ptable} p LEFT JOIN {rtable} r "
                f"ON r.order_id = p.order_id AND r.user_id IN ({marks(user_ids)}) WHERE p.order_id = %s FOR UPDATE"
            )
            args += [*user_ids, order_id]
        if len(packets) == 1:  # one packet: one statement, prepared for a lone opener
            await run_statement(cur, statements[0], args, once=len(packets[0][2]) > 1)
            return [[tuple(row) for row in await cur.fetchall()]]
        await run_statement(cur, "; ".join(statements), args, once=True)
        return await result_sets(cur)

    async def best_luck(self, order_id: str) -> str | None:
        """The best-luck user id once the packet is finished (largest share, earliest open on ties)."""
        db, ptable, _ = self._where(order_id)
        row = await self._shards.fetchone(
            db, f"SELECT best_luck_user_id FROM {ptable} WHERE order_id = %s", (order_id,)
        )
        return None if row is None or row[0] is None else str(row[0])

    async def best_lucks(self, order_ids: Sequence[str]) -> dict[str, str | None]:
        """``best_luck`` of each packet: one query per database (every database at once)."""
        found: dict[str, str | None] = dict.fromkeys(order_ids)
        rows = await self._packet_rows(list(found), "order_id, best_luck_user_id")
        found.update((str(order_id), None if best is None else str(best)) for order_id, best in rows)
        return found

    async def _packet_rows(self, order_ids: Sequence[str], columns: str, timeout_s: float | None = None) -> list[Row]:
        """``columns`` of the packet rows of ``order_ids`` that exist (``_union``, within ``timeout_s``)."""
        tables: dict[int, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        for order_id in order_ids:
            db, ptable, _ = self._where(order_id)
            tables[db][ptable].add(order_id)

        def select(table: str, ids: list[str]) -> tuple[str, list[str]]:
            return f"SELECT {columns} FROM {table} WHERE order_id IN ({marks(ids)})", ids

        return await self._union(tables, select, timeout_s)

    async def receipts_of(self, keys: Sequence[tuple[str, str]]) -> list[Receipt]:
        """The receipts of ``keys`` that exist: one query per database (every database at once)."""
        wanted = set(keys)
        tables: dict[int, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        users: dict[str, set[str]] = defaultdict(set)  # receipt table -> the users asked for there
        for order_id, user_id in wanted:
            db, _, rtable = self._where(order_id)
            tables[db][rtable].add(order_id)
            users[rtable].add(user_id)

        def select(table: str, ids: list[str]) -> tuple[str, list[str]]:
            them = sorted(users[table])
            where = f"order_id IN ({marks(ids)}) AND user_id IN ({marks(them)})"
            return f"SELECT {RECEIPT_COLUMNS} FROM {table} WHERE {where}", [*ids, *them]

        rows = await self._union(tables, select)
        return [r for r in map(receipt_from_row, rows) if (r.order_id, r.user_id) in wanted]

    async def _union(
        self,
        tables: dict[int, dict[str, set[str]]],
        select: Callable[[str, list[str]], tuple[str, list[str]]],
        timeout_s: float | None = None,
    ) -> list[Row]:
        """The rows of ``select(table, order_ids) -> (sql, args)`` over each database's tables, as
        one UNION ALL per database, every database at once (each within ``timeout_s``, None: a
        statement's bound)."""

        async def one_db(by_table: dict[str, set[str]], db: int) -> list[Row]:
            parts = [select(table, sorted(ids)) for table, ids in sorted(by_table.items())]
            sql = " UNION ALL ".join(part for part, _ in parts)
            values = [arg for _, args in parts for arg in args]
            return await self._shards.fetchall(db, sql, values, timeout_s=timeout_s, once=len(values) > 2)

        found = await asyncio.gather(*(one_db(by_table, db) for db, by_table in tables.items()))
        return [row for rows in found for row in rows]

    async def receipts(self, order_id: str) -> list[Receipt]:
        """Every receipt of the packet, in open order."""
        db, _, rtable = self._where(order_id)
        rows = await self._shards.fetchall(
            db, f"SELECT {RECEIPT_COLUMNS} FROM {rtable} WHERE order_id = %s ORDER BY position", (order_id,)
        )
        return [receipt_from_row(r) for r in rows]

    async def receipt(self, order_id: str, user_id: str) -> Receipt | None:
        """The user's receipt for the packet, or None."""
        db, _, rtable = self._where(order_id)
        row = await self._shards.fetchone(
            db, f"SELECT {RECEIPT_COLUMNS} FROM {rtable} WHERE order_id = %s AND user_id = %s", (order_id, user_id)
        )
        return None if row is None else receipt_from_row(row)

    async def refund(self, order_id: str, now_ms: int) -> Packet | None:
        """Record the refund of the remainder once, at or after expiry (PacketStore.refund); the
        row lock serialises it with any open of the same packet."""
        db, ptable, _ = self._where(order_id)

        async def body(cur: Cursor) -> Packet | None:
            # MySQL assigns left to right: status must read remaining_fen before it is zeroed.
            changed = await cur.execute(
                f"UPDATE {ptable} FORCE INDEX (PRIMARY) SET status = CASE WHEN remaining_fen > 0 THEN %s ELSE %s END, "
                "refunded_fen = remaining_fen, remaining_fen = 0 "
                "WHERE order_id = %s AND status = %s AND expires_at <= %s",
                (Status.EXPIRED.value, Status.FINISHED.value, order_id, Status.ACTIVE.value, now_ms),
            )
            if changed != 1:
                return None
            await cur.execute(f"SELECT {PACKET_COLUMNS} FROM {ptable} WHERE order_id = %s", (order_id,))
            packet = packet_from_row(await cur.fetchone())
            return packet if packet.status is Status.EXPIRED else None

        return await self._shards.transaction(db, body)

    async def mark_refunded(self, order_id: str) -> None:
        """Expired -> refunded once the sender's refund is in the ledger."""
        db, ptable, _ = self._where(order_id)
        await self._shards.execute(
            db,
            f"UPDATE {ptable} FORCE INDEX (PRIMARY) SET status = %s WHERE order_id = %s AND status = %s",
            (Status.REFUNDED.value, order_id, Status.EXPIRED.value),
        )

    async def mark_credited(self, receipts: Sequence[tuple[str, str]]) -> None:
        """Mark each (order_id, user_id) receipt credited: one UPDATE per receipt table joined on
        its receipts' unique key (``key_rows``; locked in key order), every table at once."""
        by_table: dict[tuple[int, str], list[str]] = defaultdict(list)
        for order_id, user_id in sorted(set(receipts)):
            db, _, rtable = self._where(order_id)
            by_table[(db, rtable)] += (order_id, user_id)
        await asyncio.gather(
            *(
                self._shards.execute(
                    db,
                    f"UPDATE {rtable} r JOIN {key_rows(('order_id', 'user_id'), len(args) // 2)} "
                    "ON r.order_id = k.order_id AND r.user_id = k.user_id SET r.credit_status = 'credited'",
                    args,
                    once=len(args) > 2,
                )
                for (db, rtable), args in by_table.items()
            )
        )

    async def _scan(
        self, select: str, where: str, order: str, args: Sequence[object], limit: int, receipts: bool
    ) -> list[Row]:
        """Run ``SELECT {select} FROM <each day table> WHERE {where} ORDER BY {order} LIMIT limit``
        over every database (one UNION ALL each) and merge the rows, the ``limit`` first by ``order``."""
        parts = [
            f"(SELECT {select} FROM {rtable if receipts else ptable} WHERE {where} ORDER BY {order} LIMIT %s)"
            for ptable, rtable in day_tables(self._shards.layout)
        ]
        sql = f"SELECT * FROM ({' UNION ALL '.join(parts)}) AS due ORDER BY {order} LIMIT %s"
        values = [*[v for _ in parts for v in (*args, limit)], limit]
        found = await asyncio.gather(
            *(
                self._shards.fetchall(db, sql, values, timeout_s=SCAN_TIMEOUT_S)
                for db in range(self._shards.layout.n_dbs)
            )
        )
        return list(heapq.merge(*found, key=lambda row: row[0]))[:limit]

    async def unpaid_refunds(self, limit: int) -> list[Packet]:
        """Expired packets whose refund has not been credited yet, oldest expiry first."""
        rows = await self._scan(
            f"expires_at AS sort_key, {PACKET_COLUMNS}",
            "status = %s",
            "sort_key",
            (Status.EXPIRED.value,),
            limit,
            receipts=False,
        )
        return [packet_from_row(r[1:]) for r in rows]

    async def due_refunds(self, now_ms: int, limit: int) -> list[str]:
        """Active packets past expiry, oldest first (the scan behind the refund scheduler)."""
        rows = await self._scan(
            "expires_at AS sort_key, order_id",
            "status = %s AND expires_at <= %s",
            "sort_key",
            (Status.ACTIVE.value, now_ms),
            limit,
            receipts=False,
        )
        return [str(r[1]) for r in rows]

    async def uncredited(self, opened_before_ms: int, limit: int) -> list[Receipt]:
        """Pending receipts opened before ``opened_before_ms``, oldest first (the reconciler's scan)."""
        rows = await self._scan(
            f"opened_at AS sort_key, {RECEIPT_COLUMNS}",
            "credit_status = 'pending' AND opened_at < %s",
            "sort_key",
            (opened_before_ms,),
            limit,
            receipts=True,
        )
        return [receipt_from_row(r[1:]) for r in rows]

    async def opened_between(self, start_ms: int, end_ms: int, limit: int) -> list[Receipt]:
        """Receipts opened in [start_ms, end_ms), oldest first (ListScans; the ``pending`` index)."""
        rows = await self._scan(
            f"opened_at AS sort_key, {RECEIPT_COLUMNS}",
            "credit_status IN ('pending', 'credited') AND opened_at >= %s AND opened_at < %s",
            "sort_key",
            (start_ms, end_ms),
            limit,
            receipts=True,
        )
        return [receipt_from_row(r[1:]) for r in rows]

    async def paid_between(self, start_ms: int, end_ms: int, expiry_ms: int, limit: int) -> list[Packet]:
        """Packets paid in [start_ms, end_ms), i.e. expiring ``expiry_ms`` later, oldest first
        (ListScans; the ``expiry`` index)."""
        paid = (Status.ACTIVE.value, Status.FINISHED.value, Status.EXPIRED.value, Status.REFUNDED.value)
        rows = await self._scan(
            f"expires_at AS sort_key, {PACKET_COLUMNS}",
            "status IN (%s, %s, %s, %s) AND expires_at >= %s AND expires_at < %s",
            "sort_key",
            (*paid, start_ms + expiry_ms, end_ms + expiry_ms),
            limit,
            receipts=False,
        )
        return [packet_from_row(r[1:]) for r in rows]
