"""The push hub of one worker (docs/architecture.md section 7): the sessions held here, ordered delivery
with replay, and the push API (to a user, to a group, to a topic's subscribers).

Every message of a user's stream is appended to the user's log first (MessageLog: offsets and an
epoch), so nothing is lost; then it goes to the user's socket if the session is here, or is
forwarded to the node that holds it (server/push_internal.py), through a route cached 30 s. A
forward answered "not here" or not answered within ``push_forward_timeout_s`` drops the cached
route; the route is looked up once more and, if it changed, the forward is tried once more.
Otherwise the message stays queued in the log until the next connection replays it.

A session's socket gets its stream in offset order, each message once: messages that arrive
while a replay runs wait behind it, duplicates are dropped, and a message past a gap (an earlier
one still on its way from another worker, or never delivered) makes the session read the gap
from the log first (read again after a pause while the store blips, up to CATCH_UP_PAUSES_S).
What a session has sent starts at the stream's last offset when its replay read the log (never
at the first message to arrive: one that overtook an earlier one would make the earlier look
sent). A gap the log no longer holds, or another epoch, is announced with
``{"type": "reset", "epoch": e}`` before what is still held: never passed off as complete.
A replay is paced by the connection's waiting output (at most half of ``ws_max_output_bytes``),
so a backlog larger than the output cap reaches a client that reads instead of closing it (1013).

Messages: ``{"type": "event", "event", "data", "offset", "epoch"}`` (broadcasts also carry
``topic``; their offset and epoch are the topic's). Clients send ``{"type": "ack", "offset"}``,
``{"type": "subscribe" | "unsubscribe", "topic"}``; acks (which trim the log) and liveness
refreshes are written once a tick for every connection, and a closing connection's last ack at
once (a client that reconnects within the tick is not sent again what it acked).
``push_store_failures`` consecutive store failures close every connection here (1011): their
sessions can no longer be kept.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hongbao.core.breaker import BreakerOpen
from hongbao.core.events import Event
from hongbao.core.ports import Queue
from hongbao.core.push_ports import PushStores, Replay, Route, Stored
from hongbao.core.services.groups import Groups
from hongbao.server import push_messages
from hongbao.server.config import Settings
from hongbao.server.metric_catalog import PUSH_LATENCY
from hongbao.server.metrics import WorkerMetrics, observe
from hongbao.server.node import Node, node_id
from hongbao.server.push_appender import Appender
from hongbao.server.push_fanout import Fanout
from hongbao.server.push_internal import Forwarder, internal_secret, listen
from hongbao.server.push_messages import EventBody, now_ms
from hongbao.server.push_routes import RemoteDelivery

log = logging.getLogger("hongbao.push")
TICK_S = 1.0
REPLAY_PAUSE_S, REPLAY_PAUSE_MAX_S = 0.005, 0.1  # a paced replay looks at the output this often
CATCH_UP_PAUSES_S = (0.1, 0.3, 1.0, 2.0)  # a failed catch-up read is tried again after each (s)
MAX_TOPICS = 100  # subscriptions per connection
LOST_UIDS_MAX = 10_000  # users named in one worker's lost appends before it renews every stream instead
_TOPIC = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
DELIVERED, QUEUED = "delivered_to_socket", "queued"


class Conn(Protocol):
    """What the hub needs of a connection (server/ws_connection.py's WsConnection)."""

    uid: str
    sid: str
    subscriptions: set[str]

    def output_bytes(self) -> int: ...
    def send_text(self, body: bytes) -> bool: ...
    def send_frame(self, frame: bytes) -> bool: ...
    def close(self, code: int, reason: str = "") -> None: ...


@dataclass(frozen=True, slots=True)
class Pushed:
    """What became of a targeted push: ``result`` (delivered_to_socket | queued) and the
    message's place in the user's stream."""

    result: str
    offset: int
    epoch: str


class _Session:
    """A session held here: where its stream stands on the socket. ``held`` collects messages
    while a replay runs (None: live); ``epoch`` and ``sent`` (the last offset sent, or covered by
    the replay) are set by the first replay."""

    __slots__ = ("conn", "login_ms", "epoch", "sent", "held")

    def __init__(self, conn: Conn, login_ms: int) -> None:
        self.conn, self.login_ms, self.epoch, self.sent = conn, login_ms, "", 0
        self.held: list[Stored] | None = []


class PushHub:
    """One worker's hub (``app.push``) over ``stores``, for ``settings``: this worker's Node, its
    internal listener and forwarder, group pushes on ``queue`` with members from ``groups``."""

    def __init__(
        self, settings: Settings, stores: PushStores, metrics: WorkerMetrics, queue: Queue, groups: Groups
    ) -> None:
        self.settings, self.stores, self.metrics = settings, stores, metrics
        self.node = Node(node_id(settings.node_name), stores.nodes, settings.push_node_ttl_s, self.store_result)
        self.forwarder = Forwarder(internal_secret(settings), settings.push_forward_timeout_s)
        self.appender = Appender(stores.log, self.send_later, self._posts_failed)
        self.remote = RemoteDelivery(self.node.id, stores.sessions, stores.nodes, self.forwarder)
        self.fanout = Fanout(self, queue, groups, stores.topics)
        self.max_failures, self.failures = settings.push_store_failures, 0
        self._replay_budget = settings.ws_max_output_bytes // 2
        self.sessions: dict[str, _Session] = {}
        self.topics: dict[str, set[Conn]] = {}
        self._touched: set[tuple[str, str]] = set()
        self._acks: dict[str, tuple[int, str]] = {}  # uid -> (offset, epoch) acked, written at the tick
        self._tasks: set[asyncio.Task[Any]] = set()
        self._listener: asyncio.AbstractServer | None = None
        self._lost = 0  # events for streams it cannot name not logged since the store last took ``lost``
        self._lost_uids: set[str] = set()  # the streams of the posted events it could not log since then
        self._restore = False  # the store's process changed: the sessions here are to be written back

    async def start(self, *, after_crash: bool = False) -> None:
        """Before the worker accepts connections: open the internal listener, join as a live
        node at its address, take the broadcast cursor. A store that is down does not stop it:
        the node joins with its first heartbeat that reaches the store (logins are refused until
        then: the store's breaker is open), and broadcasts are read from the log's end from then on.
        ``after_crash``: this worker replaces one that died (its events in flight died with it, and
        so did its knowledge of them), so every stream starts a new epoch (``MessageLog.lost``) and
        each client is told; the renewal is done here, before this worker logs an event or holds a
        session (``_renew``), or, with the store down, at the first flush that reaches it, as for a
        start while the store is down (the log's first ``sync``, which starts this worker's reading
        of the renewals, fails too)."""
        self._listener, address = await listen(self, self.settings)
        joined = await self.node.join(address) and await self._first_sync()
        if not joined or (after_crash and not await self._renew()):
            self._lost += 1
        await self.fanout.start()

    async def _renew(self) -> bool:
        """Renew every stream (``MessageLog.lost``) and take this renewal in (``MessageLog.sync``:
        the sessions of later ticks need no recheck for it), so what this worker logs from now on is
        of the new epochs; False when the store failed (the first flush that reaches it renews every
        stream then)."""
        try:
            await self.stores.log.lost()
            await self.stores.log.sync()  # this worker's own renewal: nothing to recheck at the next tick
        except Exception as exc:
            if not isinstance(exc, BreakerOpen):
                log.warning("push streams could not be renewed at start: %s", exc)
            return False
        log.warning("a worker died: every push stream starts a new epoch (clients reload)")
        return True

    async def _first_sync(self) -> bool:
        """Take the log's place in the renewals (MessageLog.sync) before any session is held, so a
        stream renewed once a session is here is named at a tick; False when the store is down."""
        try:
            await self.stores.log.sync()
        except Exception as exc:
            if not isinstance(exc, BreakerOpen):
                log.warning("push renewals could not be read at start: %s", exc)
            return False
        return True

    def jobs(self) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        """The hub's background jobs: liveness and sweep, the tick's writes, group pushes, broadcasts."""
        return [self.node.beat_forever, self._flush_forever, self.fanout.groups_forever, self.fanout.broadcasts_forever]

    async def stop(self) -> None:
        """After the connections have closed: write the last acks and the events posted, log out,
        leave, close the listener."""
        await self.flush()
        await self.appender.drained()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.node.leave()
        await self.forwarder.close()
        if self._listener is not None:
            self._listener.close()

    # --- connections (the WsConnection interface) -------------------------------------------------

    async def attach(self, conn: Conn, offset: int | None, epoch: str | None, *, hello: bool = False) -> None:
        """Log the session in (replacing an older one: closed with 4001 here or on its node),
        register it, and replay the stream after (``offset``, ``epoch``), first with the hello
        frame (the stream's epoch) when ``hello`` and the replay is whole (an incomplete one starts
        with its reset, which names the epoch); raises on store failure."""
        login_ms = now_ms()
        old = await self.stores.sessions.login(conn.uid, conn.sid, self.node.id, login_ms)
        session = _Session(conn, login_ms)
        previous = self.sessions.get(conn.uid)
        self.sessions[conn.uid] = session
        if previous is not None and previous.conn is not conn:
            previous.conn.close(4001, "replaced by a newer session")
        if old is not None and old.node != self.node.id:
            self.spawn(self._kick(old, conn.uid))
        replay = await self.stores.log.replay(conn.uid, offset, epoch, now_ms())
        if hello and replay.complete:
            conn.send_text(push_messages.hello(replay.epoch))
        self._replay(session, replay, offset)

    def on_message(self, conn: Conn, message: dict[str, Any]) -> None:
        """A client message: ack (coalesced per tick), subscribe / unsubscribe (answered)."""
        kind, topic = message.get("type"), message.get("topic")
        if kind == "ack":
            offset = message.get("offset")
            session = self.sessions.get(conn.uid)
            if type(offset) is not int or offset < 0:
                conn.send_text(push_messages.error("ack needs an offset: a non-negative integer"))
            elif session is not None and session.conn is conn:
                offset = min(offset, session.sent)  # never past what was sent: an ack trims the log
                pending = self._acks.get(conn.uid)  # one of an older epoch is replaced: the log would ignore it
                if pending is None or pending[1] != session.epoch or pending[0] < offset:
                    self._acks[conn.uid] = (offset, session.epoch)
        elif kind in ("subscribe", "unsubscribe"):
            if not isinstance(topic, str) or not _TOPIC.fullmatch(topic):
                conn.send_text(push_messages.error("topic must be 1..64 of [A-Za-z0-9_.:-]"))
            elif kind == "subscribe" and topic not in conn.subscriptions and len(conn.subscriptions) >= MAX_TOPICS:
                conn.send_text(push_messages.error(f"at most {MAX_TOPICS} topics per connection"))
            else:
                self._subscribe(conn, topic, kind == "subscribe")
                conn.send_text(push_messages.subscription(kind == "subscribe", topic))
        else:
            conn.send_text(push_messages.error("unknown message type"))

    def touched(self, conn: Conn) -> None:
        """Inbound frames: refresh the session at the next tick."""
        self._touched.add((conn.uid, conn.sid))

    def detach(self, conn: Conn) -> None:
        """The connection is gone: unregister it, write its ack not yet written (a reconnect
        within the tick gets no acked message again), and log the session out if it is still this one."""
        session = self.sessions.get(conn.uid)
        ack = None
        if session is not None and session.conn is conn:
            del self.sessions[conn.uid]
            ack = self._acks.pop(conn.uid, None)
        for topic in list(conn.subscriptions):
            self._subscribe(conn, topic, False)
        self._touched.discard((conn.uid, conn.sid))
        self.spawn(self._logout(conn.uid, conn.sid, ack))

    def _subscribe(self, conn: Conn, topic: str, on: bool) -> None:
        if on:
            conn.subscriptions.add(topic)
            self.topics.setdefault(topic, set()).add(conn)
            return
        conn.subscriptions.discard(topic)
        subscribers = self.topics.get(topic)
        if subscribers is not None:
            subscribers.discard(conn)
            if not subscribers:
                del self.topics[topic]

    async def _logout(self, uid: str, sid: str, ack: tuple[int, str] | None) -> None:
        if ack is not None:
            try:
                await self.stores.log.ack([(uid, *ack)])
            except Exception as exc:  # written at the next tick instead, unless a newer one is pending
                if not isinstance(exc, BreakerOpen):
                    log.warning("push ack of a closed session failed: %s", exc)
                self._acks.setdefault(uid, ack)
        try:
            await self.stores.sessions.logout(uid, sid, self.node.id)
        except Exception as exc:  # the session reads offline after its TTL; the sweep removes it
            if not isinstance(exc, BreakerOpen):
                log.warning("push logout of a session failed: %s", exc)

    async def _kick(self, old: Route, uid: str) -> None:
        """Ask the node of the replaced session ``old`` to close it (4001). Best effort: with the
        push store down the old session is closed by its own node's failure count, or expires."""
        try:
            address = await self.stores.nodes.address(old.node)
        except Exception as exc:
            if not isinstance(exc, BreakerOpen):
                log.warning("push kick of a replaced session failed: %s", exc)
            return
        if address is not None:
            await self.forwarder.kick(address, uid, old.sid)

    # --- ordered delivery to the sessions held here -----------------------------------------------

    def deliver(self, session: _Session, message: Stored) -> bool:
        """Send ``message`` of the session's stream in order (see the module docstring); False
        when the socket refused it (closing, or over its output cap)."""
        if session.held is not None:
            session.held.append(message)
            return True
        same = message.epoch == session.epoch
        if same and message.offset <= session.sent:
            return True
        if not same or message.offset > session.sent + 1:
            session.held = [message]
            self.spawn(self._catch_up(session))
            return True
        session.sent = message.offset
        return session.conn.send_text(message.body)

    def _replay(self, session: _Session, replay: Replay, after: int | None) -> None:
        """Send ``replay`` (what followed ``after``; a reset first if incomplete), then what arrived meanwhile."""
        if not replay.complete:
            session.conn.send_text(push_messages.reset(replay.epoch))
            after, session.sent = None, 0
        session.epoch = replay.epoch
        self._pump(session, deque(m for m in replay.messages if after is None or m.offset > after), replay.last)

    def _pump(self, session: _Session, pending: deque[Stored], last: int) -> None:
        """Send ``pending`` while the connection's output stays under half its cap (a backlog
        larger than the cap flows as the client reads it), then go live from offset ``last``
        with what was held meanwhile."""
        conn = session.conn
        while pending:
            waiting = conn.output_bytes()
            if waiting and waiting + len(pending[0].body) > self._replay_budget:
                self.spawn(self._pump_later(session, pending, last))
                return
            message = pending.popleft()
            session.sent = message.offset
            conn.send_text(message.body)
        session.sent = last
        held, session.held = session.held or [], None
        for message in held:
            self.deliver(session, message)

    async def _pump_later(self, session: _Session, pending: deque[Stored], last: int) -> None:
        pause = REPLAY_PAUSE_S
        while self.sessions.get(session.conn.uid) is session:
            await asyncio.sleep(pause)
            if session.conn.output_bytes() + len(pending[0].body) <= self._replay_budget:
                self._pump(session, pending, last)
                return
            pause = min(pause * 2, REPLAY_PAUSE_MAX_S)

    async def _catch_up(self, session: _Session) -> None:
        """Read the session's stream from what it has sent and send it on; a failed read is tried
        again after each of CATCH_UP_PAUSES_S while the session is held here (a blip, or a breaker
        opened by one, is ridden out with the later messages held), then the session is closed
        (1011) and its client resumes from its cursor on another connection."""
        for pause in (*CATCH_UP_PAUSES_S, None):
            try:
                replay = await self.stores.log.replay(session.conn.uid, session.sent, session.epoch, now_ms())
            except Exception as exc:
                if pause is None:
                    log.warning("push catch-up from the log failed, closing the session: %s", exc)
                    session.conn.close(1011, "push store unavailable")
                    return
                await asyncio.sleep(pause)
                if self.sessions.get(session.conn.uid) is not session:
                    return  # closed meanwhile: nothing to catch up
                continue
            self._replay(session, replay, session.sent)
            return

    def receive(self, uid: str, sid: str, message: Stored) -> bool:
        """A message forwarded by another node for session ``sid``; False if it is not here."""
        session = self.sessions.get(uid)
        if session is None or session.conn.sid != sid:
            return False
        return self.deliver(session, message)

    def kick(self, uid: str, sid: str) -> bool:
        """Close session ``sid`` (replaced by a login on another node) with 4001; False if not here."""
        session = self.sessions.get(uid)
        if session is None or session.conn.sid != sid:
            return False
        session.conn.close(4001, "replaced by a newer session")
        return True

    # --- the push API -------------------------------------------------------------------------------

    async def push_to_user(self, uid: str, event: str, data: Any) -> Pushed:
        """Append ``event`` with ``data`` to ``uid``'s stream (with the other appends of this loop
        turn), then send it to the user's socket wherever it is. Raises when the log cannot be
        written (then nothing was queued)."""
        started = time.perf_counter()
        message = await self.appender.append(uid, EventBody(event, data))
        [sent] = await self.send([(uid, message)])
        self.delivered_after([sent], [started], time.perf_counter())
        return Pushed(DELIVERED if sent else QUEUED, message.offset, message.epoch)

    async def push_to_group(self, group_id: str, event: str, data: Any) -> None:
        """Queue ``event`` for every member of ``group_id`` (delivered by the group job of some
        worker). Raises NotFound for an unknown group."""
        await self.fanout.push_to_group(group_id, event, data)

    async def broadcast(self, topic: str, event: str, data: Any) -> Stored:
        """Publish ``event`` to ``topic``: every node sends it to its subscribers, encoded once."""
        return await self.fanout.broadcast(topic, event, data)

    async def send(self, items: Sequence[tuple[str, Stored]]) -> list[bool]:
        """Send logged (uid, message) pairs to the users' sockets, here or on their nodes; per
        message True if it reached a socket, False if it stays queued in the log."""
        results = [False] * len(items)
        remote: list[int] = []
        for i, (uid, message) in enumerate(items):
            session = self.sessions.get(uid)
            if session is not None:
                results[i] = self.deliver(session, message)
            else:
                remote.append(i)
        if remote:
            forwarded = await self.remote.send([items[i] for i in remote])
            for i, sent in zip(remote, forwarded, strict=True):
                results[i] = sent
            self.metrics.events["push_forwarded"] += sum(forwarded)
        delivered = sum(results)
        self.metrics.events["push_delivered"] += delivered
        self.metrics.events["push_queued"] += len(results) - delivered
        return results

    def notify(self, event: Event) -> None:
        """The services' Notifier: queue ``event`` for its group (in the background) and post it
        to its users' streams (the appender's next write; the messages it logs are sent together,
        one route lookup). Failures are logged and counted (``push_failures``), never raised, and
        told: an event not taken renews every stream at the next flush (``lost``)."""
        try:
            if event.group_id is not None:
                self.spawn(self._notify_group(event))
            if event.user_ids:
                body = EventBody(event.name, event.data)
                for uid in event.user_ids:
                    self.appender.post(uid, body)
        except Exception as exc:
            log.warning("push of event %s failed: %s", event.name, exc)
            self.lost()

    def lost(self) -> None:
        """The services' Notifier: an event whose audience is unknown was lost; counted
        (``push_failures``), and every stream starts a new epoch at the next flush (``_tell_gaps``),
        so each client here and on every node is told ``reset``."""
        self.metrics.events["push_failures"] += 1
        self._lost += 1

    async def _notify_group(self, event: Event) -> None:
        assert event.group_id is not None
        try:
            await self.fanout.queue_group(event.group_id, event.name, event.data)
        except Exception as exc:
            self.metrics.events["push_failures"] += 1
            if not isinstance(exc, BreakerOpen):  # Redis down: its breaker logged that once
                log.warning("push of event %s failed: %s", event.name, exc)
            try:  # the group's members missed it: their streams start new epochs, not every stream
                self._name_lost(await self.fanout.groups.members(event.group_id))
            except Exception:  # nobody to name: every stream
                self._lost += 1

    def delivered_after(self, sent: Sequence[bool], since: Sequence[float | None], now: float) -> None:
        """Count the push latency (``now`` - ``since``, seconds, on one clock) of each message
        ``sent`` to a socket (``send``'s answers); a ``since`` of None is not known."""
        hist = self.metrics.histograms[PUSH_LATENCY.name]
        for reached, at in zip(sent, since, strict=True):
            if reached and at is not None:
                observe(hist, max(0.0, now - at))

    def send_later(self, items: list[tuple[str, Stored]], since: Sequence[float | None]) -> None:
        """``send`` the logged (uid, message) pairs in the background, then count each delivered
        one's latency from ``since`` (seconds since the epoch, ``time.time()``: the push may have
        been made by another worker; None: unknown). A failure is logged and counted
        (``push_failures``), never raised: the messages stay in the users' logs, and the session
        catches up from there (``deliver`` tells a gap as it comes)."""
        self.spawn(self._send_logged(items, since))

    def _posts_failed(self, uids: list[str], exc: Exception) -> None:
        self.metrics.events["push_failures"] += len(uids)
        self._name_lost(uids)
        if not isinstance(exc, BreakerOpen):
            log.warning("appending %d event push(es) failed: %s", len(uids), exc)

    def _name_lost(self, uids: Iterable[str]) -> None:
        """The streams of ``uids`` missed an event: they start new epochs at the next flush
        (``_tell_gaps``); past LOST_UIDS_MAX users named, every stream does instead."""
        self._lost_uids.update(uids)
        if len(self._lost_uids) > LOST_UIDS_MAX:  # a long outage: every stream, rather than a list without end
            self._lost += len(self._lost_uids)
            self._lost_uids.clear()

    async def _send_logged(self, items: list[tuple[str, Stored]], since: Sequence[float | None]) -> None:
        try:
            sent = await self.send(items)
        except Exception as exc:  # they stay queued in the log
            self.metrics.events["push_failures"] += 1
            log.warning("sending %d logged push(es) failed: %s", len(items), exc)
            return
        self.delivered_after(sent, since, time.time())

    # --- housekeeping ---------------------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` in the background, keeping a reference until it is done."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def store_result(self, ok: bool) -> None:
        """Count consecutive push store failures; at ``max_failures`` close every connection here."""
        if ok:
            self.failures = 0
            return
        self.failures += 1
        if self.failures >= self.max_failures:
            if self.sessions:  # once per outage: none are left to close after that
                log.error(
                    "push store failed %d times in a row: closing %d connection(s)", self.failures, len(self.sessions)
                )
            self.failures = 0
            for session in list(self.sessions.values()):
                session.conn.close(1011, "push store unavailable")

    async def _tell_gaps(self) -> None:
        lost, named = self._lost, sorted(self._lost_uids)
        try:
            if lost:
                await self.stores.log.lost()
                self._lost -= lost
                log.warning(
                    "%d push event(s) could not be logged: every stream starts a new epoch (clients reload)", lost
                )
            elif named:
                await self.stores.log.lost(named)
                log.warning("push events of %d user(s) could not be logged: their streams start new epochs", len(named))
            self._lost_uids.difference_update(named)  # (every stream covers them too)
            gaps = await self.stores.log.sync()
        except Exception as exc:  # the store is still down: next tick
            if not isinstance(exc, BreakerOpen):
                log.warning("push gap bookkeeping failed: %s", exc)
            return
        moved = gaps.every
        self._restore = self._restore or moved  # its routes to the sessions here may be gone
        restored = False
        if self._restore and self.sessions:
            held = [(uid, session.conn.sid, session.login_ms) for uid, session in self.sessions.items()]
            try:
                await self.stores.sessions.restore(held, self.node.id, now_ms())
                self._restore, restored = False, True
            except Exception as exc:  # tried again at the next tick, until it is done
                if not isinstance(exc, BreakerOpen):
                    log.warning("push sessions could not be written back: %s", exc)
        if lost or moved or restored:  # (restored: what was logged while the routes were gone is sent)
            self._recheck_sessions()
        elif renewed := set(gaps.uids).union(named):  # by any node's lost(uids), this one's included
            self._recheck_sessions(sorted(renewed))

    def _recheck_sessions(self, uids: list[str] | None = None) -> None:
        """Every session held here (or those of ``uids``) reads its stream again from what it has
        sent: one whose stream started a new epoch gets its ``reset`` now, not at its next message,
        and one that missed messages while the store had lost its route gets them now."""
        sessions = self.sessions.values() if uids is None else [self.sessions[u] for u in uids if u in self.sessions]
        for session in list(sessions):
            if session.held is None:  # (a replay under way reads the stream anyway)
                session.held = []
                self.spawn(self._catch_up(session))

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            await self.flush()

    async def flush(self) -> None:
        """Write this tick's liveness refreshes and acks (one round trip each); a session the store
        lost while its connection lives here is written back (a third, only then), one logged
        out meanwhile is not. Then the gaps: when events could not be logged since the last tick
        that reached the store, their users' streams start new epochs (every stream when they could
        not be named; ``MessageLog.lost``: clients are told), and what other nodes decided so is
        picked up (``MessageLog.sync``); either way the sessions held here look at their streams at
        once, and when the store's process changed (a restart, a failover) they are written back to
        it first (their routes may be gone)."""
        await self._tell_gaps()
        touched, self._touched = self._touched, set()
        acks, self._acks = self._acks, {}
        if not touched and not acks:
            return
        try:
            if touched:
                lost = await self.stores.sessions.touch(sorted(touched), now_ms())
                live = [
                    (uid, sid, s.login_ms)
                    for uid, sid in lost
                    if (s := self.sessions.get(uid)) is not None and s.conn.sid == sid
                ]
                if live:  # a session the store lost while its connection lives here (not one logged out meanwhile)
                    await self.stores.sessions.restore(live, self.node.id, now_ms())
                    self._recheck_sessions([uid for uid, _, _ in live])  # what it missed meanwhile
            if acks:
                await self.stores.log.ack(sorted((uid, *ack) for uid, ack in acks.items()))
        except Exception as exc:
            if not isinstance(exc, BreakerOpen):
                log.warning("push store refresh failed: %s", exc)
            for uid, ack in acks.items():  # tried again at the next tick, unless a newer one is pending
                self._acks.setdefault(uid, ack)
            self.store_result(False)
            return
        self.store_result(True)
