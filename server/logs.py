"""Where the server's log lines go and how they look (docs/operations.md "Logs"), set up once by
the master before it forks, so that every worker writes the same way.

- ``log_file`` empty: stderr; else the file, appended to by every process (O_APPEND)
  and reopened by ``reopen`` on SIGHUP, after logrotate has moved it.
- ``log_format = "text"``: ``time LEVEL logger pid=N message``; ``"json"``: one JSON object a
  line (``JsonFormatter``).
- ``hongbao.access`` (access_log.py) logs at INFO when ``access_log`` is on, whatever
  ``log_level`` says; ``hongbao.audit`` (admin actions) always logs at INFO.

A structured line passes its fields as one mapping, ``log.info("status=%(status)d", fields)``:
logging formats it only when a handler takes the record, and the JSON formatter puts the fields
beside the message.
"""

from __future__ import annotations

import logging
import sys
from importlib.metadata import version
from typing import Any

import orjson
from hongbao.core.redact import redact
from hongbao.core.times import rfc3339
from hongbao.server.config import Settings

log = logging.getLogger("hongbao.master")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s pid=%(process)d %(message)s"
ACCESS_LOGGER, AUDIT_LOGGER = "hongbao.access", "hongbao.audit"
REGIONS = {1: "north", 2: "south"}


class Compact:
    """A value shown as compact JSON in a text line and as itself in a JSON line (nested
    arguments of an audit line)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __str__(self) -> str:
        return orjson.dumps(self.value, default=str).decode()


def _plain(value: Any) -> Any:
    """orjson's fallback for the values of a JSON line: a Compact's value, anything else as text."""
    return value.value if isinstance(value, Compact) else str(value)


class JsonFormatter(logging.Formatter):
    """A record as one JSON object: ``time`` (RFC 3339 UTC, ms), ``level``, ``logger``, ``pid``,
    ``message`` (formatted), then the fields of a structured line (see the module docstring),
    and ``exc`` (the traceback text) when the record carries one. Never more than one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": rfc3339(int(record.created * 1000)),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        args = record.args
        if isinstance(args, dict) and "%(" in str(record.msg):
            for key, value in args.items():
                line.setdefault(key, value)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(line, default=_plain).decode()


def configure(settings: Settings) -> None:
    """Send every log record of this process (and of the workers it forks) to stderr or
    ``log_file``, in ``log_format``, at ``log_level``; the access logger at INFO when
    ``access_log`` is on (silent otherwise), the audit logger at INFO. Raises OSError when the
    log file cannot be opened for appending."""
    handler: logging.StreamHandler[Any]
    if settings.log_file:
        handler = logging.FileHandler(settings.log_file, encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if settings.log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.log_level.upper())
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.INFO if settings.access_log else logging.CRITICAL + 1)
    logging.getLogger(AUDIT_LOGGER).setLevel(logging.INFO)


def reopen() -> str | None:
    """Reopen the log file (SIGHUP; after logrotate moved it, the lines go to a new file of the
    same name): its path, or None when this process logs to stderr. A file that cannot be opened
    is logged and the old one kept (the process goes on)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            try:
                stream = open(handler.baseFilename, "a", encoding=handler.encoding)
            except OSError as exc:
                log.error("SIGHUP: cannot reopen %s (%s): still writing to the old file", handler.baseFilename, exc)
                return handler.baseFilename
            old = handler.setStream(stream)
            if old is not None:
                old.close()
            return handler.baseFilename
    return None


def banner(settings: Settings) -> None:
    """Log the master's start line: version, backend, where the money and the state live (DSNs
    with their passwords masked), layout, address, workers, data directory, region, log setup;
    and a WARNING when the test clock is on (admins can move time: never in production)."""
    fields = {
        "version": version("hongbao"),
        "backend": settings.backend,
        "mysql": redact(settings.mysql_dsn) if settings.backend == "production" else "-",
        "redis": redact(settings.redis_url) if settings.redis_url else "-",
        "layout": (
            f"{settings.mysql_dbs} dbs x {settings.mysql_tables} tables"
            if settings.backend == "production"
            else "SQLite"
        ),
        "listen": f"{settings.host}:{settings.port}",
        "workers": settings.worker_count(),
        "data_dir": str(settings.data_dir),
        "region": f"{settings.region} ({REGIONS[settings.region]})",
        "log": f"{settings.log_format} to {settings.log_file or 'stderr'}",
        "access_log": "on" if settings.access_log else "off",
    }
    log.info(
        "hongbao %(version)s starting: backend=%(backend)s mysql=%(mysql)s redis=%(redis)s "
        "layout=%(layout)s listen=%(listen)s workers=%(workers)d data_dir=%(data_dir)s region=%(region)s "
        "log=%(log)s access_log=%(access_log)s",
        fields,
    )
    if settings.test_clock:
        log.warning(
            "test_clock is on: any admin can move this server's time (POST /v1/admin/clock), and with it "
            "expiries, refunds and order-id days; never use it in production"
        )
