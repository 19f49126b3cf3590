"""The push channel's storage (hongbao.core.push_ports) for one worker, chosen from Settings.

Today: the embedded SQLite adapters on the worker's database (shared by the workers of one host
through the file). This is the one place a deployment's push storage is picked.
"""

from __future__ import annotations

from dataclasses import dataclass

from hongbao.core.adapters.sqlite_db import SqliteDb
from hongbao.core.adapters.sqlite_push import SqliteMessageLog, SqliteNodeDirectory, SqliteSessionStore, SqliteTopicLog
from hongbao.core.push_ports import MessageLog, NodeDirectory, SessionStore, TopicLog
from hongbao.server.config import Settings


@dataclass(frozen=True, slots=True)
class PushStores:
    """The four push ports one hub runs on."""

    sessions: SessionStore
    nodes: NodeDirectory
    log: MessageLog
    topics: TopicLog


def open_push_stores(settings: Settings, db: SqliteDb) -> PushStores:
    """The push stores of ``settings`` (``db``: the worker's embedded database): sessions with
    ``push_session_ttl_s``, per-user logs bounded by ``push_log_max_messages`` and ``push_log_max_age_s``."""
    return PushStores(
        SqliteSessionStore(db, settings.push_session_ttl_s),
        SqliteNodeDirectory(db, settings.push_session_ttl_s),
        SqliteMessageLog(db, settings.push_log_max_messages, settings.push_log_max_age_s),
        SqliteTopicLog(db),
    )
