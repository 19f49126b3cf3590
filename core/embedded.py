"""The embedded backend: the whole service on SQLite files and the host's shared memory.

Nothing external is needed; every state shared between workers lives in SQLite (money in
``hongbao.db``, the push channel in ``push.db``, each file with its own writer) and the
per-packet admission table lives in /dev/shm, so several worker processes on one host agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import hongbao_native
from hongbao.core.adapters.sqlite_db import SqliteDb
from hongbao.core.adapters.sqlite_ledger import SqliteLedgerStore
from hongbao.core.adapters.sqlite_lists import SqliteProfileStore, SqliteUserListStore
from hongbao.core.adapters.sqlite_packets import SqlitePacketStore
from hongbao.core.adapters.sqlite_push_db import open_push_db
from hongbao.core.adapters.sqlite_state import (
    SqliteFlags,
    SqliteGroupStore,
    SqlitePreOrderStore,
    SqliteQueue,
    SqliteSequenceSource,
)
from hongbao.core.clock import Clock, SystemClock
from hongbao.core.ports import Draw
from hongbao.core.rules import Limits
from hongbao.core.service import PacketService, Ports

DB_FILE = "hongbao.db"
ADMISSION_SLOTS = 65536


@dataclass(frozen=True, slots=True)
class Embedded:
    """A running embedded backend: the service, its money database, the shared admission table,
    and the push channel's file (its stores when push is not on Redis; server/push_stores.py)."""

    service: PacketService
    db: SqliteDb
    admission: hongbao_native.AdmissionTable
    push_db: SqliteDb

    async def databases(self) -> dict[str, bool]:
        """Each money database -> whether it answers: the local file, always."""
        return {DB_FILE: True}

    def close(self) -> None:
        """Close the database connections (the admission table is unlinked by its creator)."""
        self.db.close()
        self.push_db.close()


def create_admission(name: str) -> hongbao_native.AdmissionTable:
    """Create the host-wide admission table ``name`` (the master does this once, before forking)."""
    return hongbao_native.AdmissionTable.create(name, ADMISSION_SLOTS)


def open_embedded(
    data_dir: Path,
    admission: hongbao_native.AdmissionTable,
    *,
    clock: Clock | None = None,
    limits: Limits | None = None,
    draw: Draw = hongbao_native.split_lucky,
    max_in_db: int = 2,
) -> Embedded:
    """Open (creating if needed) the embedded backend in ``data_dir`` for one worker.

    ``admission``: the host's AdmissionTable (created by the master, attached by workers);
    ``max_in_db``: open transactions per packet in the database at once (K of DESIGN.md section 6).
    """
    db = SqliteDb(data_dir / DB_FILE)
    ports = Ports(
        SqlitePacketStore(db),
        SqliteLedgerStore(db),
        SqlitePreOrderStore(db),
        SqliteGroupStore(db),
        SqliteSequenceSource(db),
        SqliteQueue(db),
        clock or SystemClock(),
        SqliteUserListStore(db),
        SqliteProfileStore(db),
        SqliteFlags(db),
    )
    service = PacketService(ports, limits or Limits(), admission, max_in_db=max_in_db, draw=draw)
    return Embedded(service, db, admission, open_push_db(data_dir))
