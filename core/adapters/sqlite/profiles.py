"""The embedded backend's non-critical store (docs/architecture.md section 5: "a SQLite side table
when embedded"): hongbao.core.ports.ProfileStore on ``t_packet_note`` (greetings) and
``t_profile`` (nicknames, avatar URLs) of the money file. It is never down, so it never raises
``BreakerOpen``; greetings are kept for good."""

from __future__ import annotations

from collections.abc import Sequence

from hongbao.core.adapters.sqlite.db import SqliteDb


class SqliteProfileStore:
    """The embedded ProfileStore (hongbao.core.ports.ProfileStore)."""

    __slots__ = ("_db",)

    def __init__(self, db: SqliteDb) -> None:
        self._db = db

    async def set_greeting(self, order_id: str, greeting: str) -> None:
        """Keep the greeting."""

        def put() -> None:
            with self._db.immediate() as conn:
                conn.execute(
                    "INSERT OR REPLACE INTO t_packet_note (order_id, greeting) VALUES (?, ?)", (order_id, greeting)
                )

        await self._db.run(put)

    async def greeting(self, order_id: str) -> str | None:
        """The greeting, or None."""

        def get() -> str | None:
            row = self._db.reader.execute(
                "SELECT greeting FROM t_packet_note WHERE order_id = ?", (order_id,)
            ).fetchone()
            return None if row is None else str(row[0])

        return self._db.read(get)

    async def set_profile(self, user_id: str, nickname: str, avatar_url: str) -> None:
        """Keep the profile fields."""

        def put() -> None:
            with self._db.immediate() as conn:
                conn.execute(
                    "INSERT OR REPLACE INTO t_profile (user_id, nickname, avatar_url) VALUES (?, ?, ?)",
                    (user_id, nickname, avatar_url),
                )

        await self._db.run(put)

    async def profiles(self, user_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """(nickname, avatar_url) of the users that set a profile: one SELECT by primary key
        (a details page names at most the sender and 100 openers, far below SQLite's limit of
        bound parameters)."""
        wanted = list(dict.fromkeys(user_ids))
        if not wanted:
            return {}
        sql = f"SELECT user_id, nickname, avatar_url FROM t_profile WHERE user_id IN ({', '.join('?' * len(wanted))})"

        def get() -> dict[str, tuple[str, str]]:
            return {str(u): (str(n), str(a)) for u, n, a in self._db.reader.execute(sql, wanted)}

        return self._db.read(get)
