"""The push channel's ports (hongbao.core.push_ports) on the embedded push file (``push_db``).

Shared by every worker of one host through that file (``push.db``, apart from the money's, with
its own write thread): point reads run on the event loop's thread over the read-only connection,
writes go through the file's write executor, one transaction per call. A ``t_push_session`` row
is at once the user's ``session:{uid}``, the ``route:{sid}`` and the online entry; a node is
alive while its ``t_push_node`` row has not expired, and its sessions read as offline as soon as it has.
Times are wall-clock (``time.time()``), never the service's test clock.
"""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import time
from collections.abc import Sequence

import orjson
from hongbao.core.adapters.sqlite.db import SqliteDb
from hongbao.core.push_ports import BodyMaker, Gaps, Replay, Route, SharedBody, Stored, place

BROADCAST_RETENTION_MS = 60_000  # broadcasts stay readable this long (nodes read them within ms)
BROADCAST_POLL_S = 0.02  # how often a node looks for broadcasts published by other processes
BROADCAST_READ_LIMIT = 1000
TRIM_EVERY = 64  # a stream's messages past ``max_messages`` are deleted once every this many offsets
DROP_EVERY_MS = 1000  # old messages and unused heads are deleted at most this often per log
LOST_KEPT = 100_000  # t_push_lost rows kept: every worker reads them each second, so none lags that far
LOST_READ = 10_000  # uids one sync reads at most (the rest at the next)
_IN_UIDS = "uid IN (SELECT value FROM json_each(?))"
_STREAMS = f"SELECT uid, epoch, last_offset FROM t_push_stream WHERE {_IN_UIDS}"
_STREAM_LAST = (
    "INSERT INTO t_push_stream (uid, epoch, last_offset, acked) VALUES (?, ?, ?, 0) "
    "ON CONFLICT (uid) DO UPDATE SET last_offset = excluded.last_offset"
)
_HELD = (
    "SELECT m.offset, h.head FROM t_push_message m JOIN t_push_head h ON h.id = m.head_id "
    "WHERE m.uid = ? AND m.offset > ? AND h.created_at >= ? ORDER BY m.offset"
)
_LIVE_SESSIONS = (
    "SELECT s.uid, s.node, s.sid FROM t_push_session s JOIN t_push_node n ON n.node = s.node "
    "WHERE s.uid IN (SELECT value FROM json_each(?)) AND n.expires_at > ? AND s.active_at > ?"
)


def _now_ms() -> int:
    return int(time.time() * 1000)


def new_epoch() -> str:
    """A fresh random stream epoch (8 url-safe characters, 48 bits)."""
    return secrets.token_urlsafe(6)


class SqliteSessionStore:
    """SessionStore on t_push_session; a session unrefreshed for ``ttl_s`` seconds reads as offline."""

    __slots__ = ("_db", "_ttl_ms")

    def __init__(self, db: SqliteDb, ttl_s: float = 600.0) -> None:
        self._db, self._ttl_ms = db, int(ttl_s * 1000)

    async def login(self, uid: str, sid: str, node: str, now_ms: int) -> Route | None:
        """Make ``sid`` on ``node`` the user's session; the replaced one's Route, if any."""

        def login() -> Route | None:
            with self._db.immediate() as conn:
                old = conn.execute("SELECT node, sid FROM t_push_session WHERE uid = ?", (uid,)).fetchone()
                conn.execute(
                    "INSERT OR REPLACE INTO t_push_session (uid, sid, node, login_at, active_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (uid, sid, node, now_ms, now_ms),
                )
            return Route(str(old[0]), str(old[1])) if old is not None and old[1] != sid else None

        return await self._db.run(login)

    async def touch(self, sessions: Sequence[tuple[str, str]], now_ms: int) -> list[tuple[str, str]]:
        """Refresh lastActiveTime of each (uid, sid) still current; the pairs whose user has no
        session row (logged out meanwhile), unwritten."""
        rows = [(now_ms, uid, sid) for uid, sid in sessions]

        def touch() -> list[tuple[str, str]]:
            with self._db.immediate() as conn:
                if conn.executemany(
                    "UPDATE t_push_session SET active_at = ? WHERE uid = ? AND sid = ?", rows
                ).rowcount == len(rows):
                    return []
                return [
                    (uid, sid)
                    for uid, sid in sessions
                    if conn.execute("SELECT 1 FROM t_push_session WHERE uid = ?", (uid,)).fetchone() is None
                ]

        return await self._db.run(touch)

    async def restore(self, sessions: Sequence[tuple[str, str, int]], node: str, now_ms: int) -> None:
        """Write each (uid, sid, login ms) session of ``node`` whose user has no session row, or
        one that logged in before it; one logged in since stays."""
        rows = [(uid, sid, node, login_ms, now_ms) for uid, sid, login_ms in sessions]

        def restore() -> None:
            with self._db.immediate() as conn:
                conn.executemany(
                    "INSERT INTO t_push_session (uid, sid, node, login_at, active_at) VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (uid) DO UPDATE SET sid = excluded.sid, node = excluded.node,"
                    " login_at = excluded.login_at, active_at = excluded.active_at"
                    " WHERE t_push_session.login_at < excluded.login_at",
                    rows,
                )

        await self._db.run(restore)

    async def logout(self, uid: str, sid: str, node: str) -> bool:
        """Compare-and-delete: remove the user's session only if it is still ``sid``."""

        def logout() -> bool:
            with self._db.immediate() as conn:
                return conn.execute("DELETE FROM t_push_session WHERE uid = ? AND sid = ?", (uid, sid)).rowcount == 1

        return await self._db.run(logout)

    async def lookup(self, uid: str) -> Route | None:
        """The live session's Route (its node alive, refreshed within the TTL), or None."""
        return (await self.lookup_many([uid])).get(uid)

    async def lookup_many(self, uids: Sequence[str]) -> dict[str, Route]:
        """The live sessions' Routes of ``uids`` (one query), keyed by user id."""
        now = _now_ms()
        args = (orjson.dumps(uids).decode(), now, now - self._ttl_ms)
        rows = self._db.read(lambda: self._db.reader.execute(_LIVE_SESSIONS, args).fetchall())
        return {str(uid): Route(str(node), str(sid)) for uid, node, sid in rows}

    async def online_count(self) -> int:
        """Users whose session is live."""
        now = _now_ms()
        sql = (
            "SELECT COUNT(*) FROM t_push_session s JOIN t_push_node n ON n.node = s.node "
            "WHERE n.expires_at > ? AND s.active_at > ?"
        )
        return int(self._db.read(lambda: self._db.reader.execute(sql, (now, now - self._ttl_ms)).fetchone()[0]))


class SqliteNodeDirectory:
    """NodeDirectory on t_push_node. An expired row stays until a sweep has removed the dead
    node's sessions (and sessions idle past ``session_ttl_s``); then the row goes too."""

    __slots__ = ("_db", "_session_ttl_ms")

    def __init__(self, db: SqliteDb, session_ttl_s: float = 600.0) -> None:
        self._db, self._session_ttl_ms = db, int(session_ttl_s * 1000)

    async def heartbeat(self, node: str, address: str, ttl_s: float) -> None:
        """Mark ``node`` alive for ``ttl_s`` seconds at ``address``."""
        expires = _now_ms() + int(ttl_s * 1000)

        def beat() -> None:
            with self._db.immediate() as conn:
                conn.execute(
                    "INSERT INTO t_push_node (node, address, expires_at) VALUES (?, ?, ?) ON CONFLICT (node) "
                    "DO UPDATE SET address = excluded.address, expires_at = excluded.expires_at",
                    (node, address, expires),
                )

        await self._db.run(beat)

    async def address(self, node: str) -> str | None:
        """The address of ``node`` while it is alive, else None."""
        sql = "SELECT address FROM t_push_node WHERE node = ? AND expires_at > ?"
        row = self._db.read(lambda: self._db.reader.execute(sql, (node, _now_ms())).fetchone())
        return None if row is None else str(row[0])

    async def sweep(self, alive_node: str) -> int:
        """Remove the sessions of dead nodes and the idle ones; a read when there are none (any
        number of nodes may sweep at once: the deletes are idempotent). ``alive_node`` is not
        needed here."""
        now = _now_ms()
        idle_before = now - self._session_ttl_ms
        reader = self._db.reader
        dead = self._db.read(
            lambda: [str(r[0]) for r in reader.execute("SELECT node FROM t_push_node WHERE expires_at <= ?", (now,))]
        )
        idle = self._db.read(
            lambda: reader.execute(
                "SELECT 1 FROM t_push_session WHERE active_at <= ? LIMIT 1", (idle_before,)
            ).fetchone()
        )
        if not dead and idle is None:
            return 0

        def sweep() -> int:
            with self._db.immediate() as conn:
                removed = conn.execute("DELETE FROM t_push_session WHERE active_at <= ?", (idle_before,)).rowcount
                for node in dead:
                    if conn.execute("DELETE FROM t_push_node WHERE node = ? AND expires_at <= ?", (node, now)).rowcount:
                        removed += conn.execute("DELETE FROM t_push_session WHERE node = ?", (node,)).rowcount
                return int(removed)

        return await self._db.run(sweep)

    async def leave(self, node: str) -> None:
        """Expire ``node`` now; the next sweep removes its sessions."""

        def leave() -> None:
            with self._db.immediate() as conn:
                conn.execute("UPDATE t_push_node SET expires_at = 0 WHERE node = ?", (node,))

        await self._db.run(leave)


class SqliteMessageLog:
    """MessageLog on t_push_stream (epoch, last offset, acked offset per user), t_push_message (a
    message's place: user, offset, head id) and t_push_head (a message's head, kept once for every
    stream it goes to, and its time), keeping at most ``max_messages`` per user, none older than
    ``max_age_s`` seconds. Replays read within those bounds; the rows past them are deleted as
    appends go (a stream's oldest every ``TRIM_EVERY`` offsets; old messages and unused heads at
    most every ``DROP_EVERY_MS``)."""

    __slots__ = ("_db", "_max_messages", "_max_age_ms", "_dropped_at", "_generation", "_lost_cursor")

    def __init__(self, db: SqliteDb, max_messages: int, max_age_s: float) -> None:
        self._db, self._max_messages, self._max_age_ms = db, max_messages, int(max_age_s * 1000)
        self._dropped_at = 0  # when this log last deleted old messages and unused heads (ms)
        self._generation: int | None = None  # t_meta generation at the last sync (None: not read yet)
        self._lost_cursor: int | None = None  # the last t_push_lost id read (None: not read yet)

    async def append(self, entries: Sequence[tuple[str, SharedBody]], now_ms: int) -> list[Stored]:
        """Append every entry in one transaction (one head row per distinct BodyMaker; the streams
        read at once; heads, rows and streams each written with one executemany), then trim."""
        return await self._db.run(lambda: self._append(entries, now_ms))

    def _append(self, entries: Sequence[tuple[str, SharedBody]], now_ms: int) -> list[Stored]:
        uids = list(dict.fromkeys(uid for uid, _ in entries))
        with self._db.immediate() as conn:
            found = conn.execute(_STREAMS, (orjson.dumps(uids).decode(),)).fetchall()
            streams = {str(uid): (str(epoch), int(last)) for uid, epoch, last in found}
            streams.update((uid, (new_epoch(), 0)) for uid in uids if uid not in streams)
            firsts = {uid: last for uid, (_, last) in streams.items()}
            next_head = int(conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM t_push_head").fetchone()[0])
            head_ids: dict[int, int] = {}  # id(make_body) -> its t_push_head id (the write lock is ours)
            heads: list[tuple[int, int, bytes]] = []
            rows: list[tuple[str, int, int]] = []
            stored: list[Stored] = []
            for uid, make_body in entries:
                head_id = head_ids.get(id(make_body))
                if head_id is None:
                    head_id = head_ids[id(make_body)] = next_head + len(heads)
                    heads.append((head_id, now_ms, make_body.head))
                epoch, offset = streams[uid][0], streams[uid][1] + 1
                streams[uid] = (epoch, offset)
                rows.append((uid, offset, head_id))
                stored.append(Stored(offset, epoch, make_body(offset, epoch)))
            conn.executemany("INSERT INTO t_push_head (id, created_at, head) VALUES (?, ?, ?)", heads)
            conn.executemany("INSERT INTO t_push_message (uid, offset, head_id) VALUES (?, ?, ?)", rows)
            conn.executemany(_STREAM_LAST, [(uid, epoch, last) for uid, (epoch, last) in streams.items()])
            conn.executemany(
                "DELETE FROM t_push_message WHERE uid = ? AND offset <= ?",
                [
                    (uid, last - self._max_messages)
                    for uid, (_, last) in streams.items()
                    if last > self._max_messages and last // TRIM_EVERY != firsts[uid] // TRIM_EVERY
                ],
            )
            if now_ms >= self._dropped_at + DROP_EVERY_MS:
                self._drop_old(conn, now_ms)
        if now_ms >= self._dropped_at + DROP_EVERY_MS:  # committed
            self._dropped_at = now_ms
        return stored

    def _drop_old(self, conn: sqlite3.Connection, now_ms: int) -> None:
        """Delete the messages past the age limit, then the heads no message names any more."""
        aged = conn.execute(
            "SELECT MAX(id) FROM t_push_head INDEXED BY t_push_head_age WHERE created_at < ?",
            (now_ms - self._max_age_ms,),
        ).fetchone()[0]
        if aged is not None:
            conn.execute("DELETE FROM t_push_message WHERE head_id <= ?", (aged,))
        conn.execute(
            "DELETE FROM t_push_head WHERE id < COALESCE((SELECT MIN(head_id) FROM t_push_message), "
            "(SELECT MAX(id) + 1 FROM t_push_head))"
        )

    async def ack(self, acks: Sequence[tuple[str, int, str]]) -> None:
        """Drop each user's messages up to the acked offset (capped at the stream's last), when
        the stream is still of the ack's epoch."""
        rows = [(offset, uid, epoch) for uid, offset, epoch in acks]

        def ack() -> None:
            with self._db.immediate() as conn:
                conn.executemany(
                    "DELETE FROM t_push_message WHERE uid = ?2 AND offset <= ?1 AND EXISTS "
                    "(SELECT 1 FROM t_push_stream WHERE uid = ?2 AND epoch = ?3)",
                    rows,
                )
                conn.executemany(
                    "UPDATE t_push_stream SET acked = MAX(acked, MIN(?1, last_offset)) WHERE uid = ?2 AND epoch = ?3",
                    rows,
                )

        await self._db.run(ack)

    async def replay(self, uid: str, after: int | None, epoch: str | None, now_ms: int) -> Replay:
        """What follows ``after`` in ``uid``'s stream (one consistent read); see the port."""
        reader = self._db.reader

        def read() -> tuple[tuple[str, int, int] | None, list[tuple[int, bytes]]]:
            reader.execute("BEGIN")
            try:
                head = reader.execute(
                    "SELECT epoch, last_offset, acked FROM t_push_stream WHERE uid = ?", (uid,)
                ).fetchone()
                rows = (
                    []
                    if head is None
                    else reader.execute(
                        _HELD, (uid, int(head[1]) - self._max_messages, now_ms - self._max_age_ms)
                    ).fetchall()
                )
            finally:
                reader.execute("COMMIT")
            return (None if head is None else (str(head[0]), int(head[1]), int(head[2]))), [
                (int(o), bytes(b)) for o, b in rows
            ]

        head, rows = self._db.read(read)
        if head is None:  # create the stream (or find the one an append just made), then read again
            await self._db.run(lambda: self._create_in_transaction(uid))
            return await self.replay(uid, after, epoch, now_ms)
        stream_epoch, last, acked = head
        base = acked if after is None else after
        same = (epoch is None or epoch == stream_epoch) and base <= last
        kept = [(o, b) for o, b in rows if o > base] if same else rows
        held = [Stored(o, stream_epoch, place(b, o, stream_epoch)) for o, b in kept]
        complete = same and len(held) == last - base and (not held or held[0].offset == base + 1)
        return Replay(stream_epoch, held, complete, last)

    async def lost(self, uids: Sequence[str] | None = None) -> None:
        """The streams of ``uids`` start a new epoch now (their held messages dropped, offsets from
        1 again) and t_push_lost names them for every worker of the host (which share the file);
        ``None``: every stream does, and the file's generation (t_meta ``generation``) rises. One
        transaction."""
        where, params = (
            ("", ()) if uids is None else (f" WHERE {_IN_UIDS}", (orjson.dumps(sorted(set(uids))).decode(),))
        )

        def renew() -> None:
            with self._db.immediate() as conn:
                conn.execute(
                    f"UPDATE t_push_stream SET epoch = lower(hex(randomblob(6))), last_offset = 0, acked = 0{where}",
                    params,
                )
                conn.execute(f"DELETE FROM t_push_message{where}", params)
                if uids is None:
                    conn.execute(
                        "INSERT INTO t_meta (key, value) VALUES ('generation', '1') "
                        "ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1"
                    )
                    return
                conn.execute("INSERT INTO t_push_lost (uid) SELECT value FROM json_each(?)", params)
                conn.execute("DELETE FROM t_push_lost WHERE id <= (SELECT MAX(id) FROM t_push_lost) - ?", (LOST_KEPT,))

        await self._db.run(renew)

    async def sync(self) -> Gaps:
        """The streams renewed since the last call: ``every`` when the file's generation rose (a
        ``lost()`` of any worker), ``uids`` from t_push_lost past this log's cursor (none on the
        first call, which takes the cursor)."""

        def read() -> tuple[int, int, list[tuple[int, str]]]:
            reader = self._db.reader
            row = reader.execute("SELECT value FROM t_meta WHERE key = 'generation'").fetchone()
            if self._lost_cursor is None:
                top = reader.execute("SELECT COALESCE(MAX(id), 0) FROM t_push_lost").fetchone()[0]
                return 0 if row is None else int(row[0]), int(top), []
            rows = reader.execute(
                "SELECT id, uid FROM t_push_lost WHERE id > ? ORDER BY id LIMIT ?", (self._lost_cursor, LOST_READ)
            ).fetchall()
            return 0 if row is None else int(row[0]), int(rows[-1][0]) if rows else self._lost_cursor, rows

        generation, self._lost_cursor, rows = self._db.read(read)
        before, self._generation = self._generation, generation
        return Gaps(before is not None and generation != before, tuple(str(uid) for _, uid in rows))

    def _create_in_transaction(self, uid: str) -> None:
        with self._db.immediate() as conn:
            if conn.execute("SELECT 1 FROM t_push_stream WHERE uid = ?", (uid,)).fetchone() is None:
                conn.execute(
                    "INSERT INTO t_push_stream (uid, epoch, last_offset, acked) VALUES (?, ?, 0, 0)", (uid, new_epoch())
                )


class SqliteTopicLog:
    """TopicLog on t_push_topic (epoch, last offset per topic) and t_push_broadcast, whose row id
    is the cursor. Broadcasts are kept ``BROADCAST_RETENTION_MS``; a reader polls every
    ``BROADCAST_POLL_S`` and is woken at once by a publish from its own process."""

    __slots__ = ("_db", "_published")

    def __init__(self, db: SqliteDb) -> None:
        self._db = db
        self._published: asyncio.Event | None = None

    async def publish(self, topic: str, make_body: BodyMaker) -> Stored:
        """Append one broadcast to ``topic`` and drop those past the retention."""
        now = _now_ms()

        def publish() -> Stored:
            with self._db.immediate() as conn:
                row = conn.execute("SELECT epoch, last_offset FROM t_push_topic WHERE topic = ?", (topic,)).fetchone()
                epoch, offset = (str(row[0]), int(row[1]) + 1) if row is not None else (new_epoch(), 1)
                conn.execute(
                    "INSERT INTO t_push_topic (topic, epoch, last_offset) VALUES (?, ?, ?) "
                    "ON CONFLICT (topic) DO UPDATE SET last_offset = excluded.last_offset",
                    (topic, epoch, offset),
                )
                body = make_body(offset, epoch)
                conn.execute(
                    "INSERT INTO t_push_broadcast (topic, offset, epoch, body, created_at) VALUES (?, ?, ?, ?, ?)",
                    (topic, offset, epoch, body, now),
                )
                conn.execute("DELETE FROM t_push_broadcast WHERE created_at < ?", (now - BROADCAST_RETENTION_MS,))
            return Stored(offset, epoch, body)

        stored = await self._db.run(publish)
        self._wake().set()
        return stored

    async def read(self, cursor: str | None, timeout_s: float) -> tuple[str, list[tuple[str, Stored]]]:
        """Broadcasts after ``cursor`` (a row id; None: the newest now), waiting up to ``timeout_s``."""
        reader = self._db.reader
        after = (
            int(cursor)
            if cursor is not None
            else int(
                self._db.read(lambda: reader.execute("SELECT COALESCE(MAX(id), 0) FROM t_push_broadcast").fetchone()[0])
            )
        )
        sql = "SELECT id, topic, offset, epoch, body FROM t_push_broadcast WHERE id > ? ORDER BY id LIMIT ?"
        deadline = time.monotonic() + timeout_s
        wake = self._wake()
        while True:
            wake.clear()
            rows = self._db.read(lambda: reader.execute(sql, (after, BROADCAST_READ_LIMIT)).fetchall())
            left = deadline - time.monotonic()
            if rows or left <= 0:
                break
            try:
                await asyncio.wait_for(wake.wait(), min(left, BROADCAST_POLL_S))
            except TimeoutError:
                pass
        return str(rows[-1][0] if rows else after), [
            (str(t), Stored(int(o), str(e), bytes(b))) for _, t, o, e, b in rows
        ]

    def _wake(self) -> asyncio.Event:
        if self._published is None:
            self._published = asyncio.Event()
        return self._published
