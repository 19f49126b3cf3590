"""The sharded layout of docs/architecture.md section 5: N databases x M tables (x 31 days for packets and
receipts), and which shard holds an order id, a user or a group.

Routing: packets, receipts and pre-orders by the order id (``hongbao_native.shard_of``: db, table,
day); accounts, ledger, user lists and profiles by the user id, and groups by the group id, with
the same rule over xxh3-64 of the id's UTF-8 bytes (db = h mod N, table = (h div N) mod M).
The servers that hold the databases come from the MySQL DSN (``parse_dsn``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import hongbao_native
from hongbao.core.redact import redact


@dataclass(frozen=True, slots=True)
class Layout:
    """N databases x M tables (x 31 days for packets and receipts), named ``{prefix}db_{i:02}``;
    ``hot_days``: the hot window of the cold move (days)."""

    n_dbs: int
    n_tables: int
    prefix: str = ""
    hot_days: int = 3

    def db_name(self, db: int) -> str:
        """The database of shard ``db``."""
        return f"{self.prefix}db_{db:02}"

    def cold_name(self, db: int) -> str:
        """The cold database beside shard ``db`` (same table names, closed packets past the hot window)."""
        return f"{self.prefix}db_{db:02}_cold"

    def order_shard(self, order_id: str) -> tuple[int, int, int]:
        """(db, table, day) of an order id; raises ValueError for an invalid id."""
        return hongbao_native.shard_of(order_id, self.n_dbs, self.n_tables)

    def key_shard(self, key: str) -> tuple[int, int]:
        """(db, table) of a user or group id."""
        h = hongbao_native.xxh3_64(key.encode())
        return h % self.n_dbs, (h // self.n_dbs) % self.n_tables


def parse_dsn(dsn: str) -> list[dict[str, Any]]:
    """``mysql://user:pass@host:port[,mysql://...]`` -> asyncmy connect arguments, one per server.

    Raises ValueError for another scheme, a missing host or a bad port."""
    servers = []
    for part in (p.strip() for p in dsn.split(",")):
        url = urlsplit(part)
        try:
            port = url.port or 3306
        except ValueError:
            port = 0
        if url.scheme not in ("mysql", "mariadb") or not url.hostname or not port:
            raise ValueError(f"mysql_dsn must look like mysql://user:pass@host:port, got {redact(part)!r}")
        servers.append(
            {
                "host": url.hostname,
                "port": port,
                "user": unquote(url.username or "root"),
                "password": unquote(url.password or ""),
            }
        )
    return servers
