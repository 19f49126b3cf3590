"""After the load: wait for the reconciler to drain, then audit the money (docs/architecture.md section 11).

Draining: ``/metrics`` exports ``hongbao_credits_pending`` (queued credit messages); the storm
polls it until it reads 0 twice in a row, bounded by ``timeout_s``. The audit
(``hongbao.core.audit``) reads the target's database, so it runs only when the storm knows it
(the data directory of an embedded server, or the shards of a production one), and
``check_audit_target`` makes sure before the load that it can be named; it runs with ``drained``
when the queue drained, and is repeated while a violation remains and time is left, since
a credit's two steps (ledger, then the receipt's mark) may straddle the first look.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from hongbao.core.audit import AuditReport
from hongbao.core.sharding import parse_dsn
from hongbao.server.composition import DB_FILE, Auditor
from hongbao.server.config import Settings

PENDING_METRIC = "hongbao_credits_pending"
POLL_S = 0.2


@dataclass
class Settlement:
    """How the storm ended: ``drained`` (credits pending reached 0), the last ``pending`` count
    read (None: /metrics did not say), seconds ``waited``, and the ``audit`` (None: not run,
    ``note`` says why)."""

    drained: bool
    pending: int | None
    waited_s: float
    audit: AuditReport | None
    note: str = ""


def credits_pending(url: str) -> int | None:
    """The target's ``hongbao_credits_pending`` gauge, or None when its /metrics lacks it (or
    answers 404); raises OSError when it does not answer."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=5) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    for line in text.splitlines():
        if line.startswith(PENDING_METRIC + " "):
            return int(float(line.split()[1]))
    return None


def wait_drained(url: str, timeout_s: float) -> tuple[bool, int | None, float]:
    """Poll until credits pending reads 0 twice in a row or ``timeout_s`` pass; returns
    (drained, last count read, seconds waited). A target whose /metrics lacks the gauge (not a
    hongbao server) is not waited for: (False, None, the time of one look)."""
    started = time.monotonic()
    zeros, pending = 0, None
    while time.monotonic() - started < timeout_s:
        try:
            pending = credits_pending(url)
        except OSError:
            time.sleep(POLL_S)  # busy or restarting: look again
            continue
        if pending is None:
            break
        zeros = zeros + 1 if pending == 0 else 0
        if zeros >= 2:
            return True, pending, time.monotonic() - started
        time.sleep(POLL_S)
    return False, pending, time.monotonic() - started


def check_audit_target(settings: Settings) -> None:
    """Raise ValueError unless the database ``composition.auditor(settings)`` would read can be named
    before the load: a production target's DSN (well formed), an embedded target's
    ``data_dir/hongbao.db`` (present). The messages say which flags name the target's database."""
    if settings.backend == "production":
        if not settings.mysql_dsn:
            raise ValueError(
                "a production target's audit needs its MySQL DSN: --mysql-dsn mysql://user:pass@host:port (or "
                "HONGBAO_MYSQL_DSN, or the server's hongbao.toml with --config)"
            )
        parse_dsn(settings.mysql_dsn)
    elif not (settings.data_dir / DB_FILE).is_file():
        raise ValueError(
            f"no database at {settings.data_dir / DB_FILE} to audit: is --data-dir the target's data directory? "
            "(a production target: give its --mysql-dsn, or its hongbao.toml with --config)"
        )


def settle(
    url: str, auditor: Auditor | None, timeout_s: float = 30.0, on_drained: Callable[[], None] | None = None
) -> Settlement:
    """Drain, call ``on_drained`` (if given: before the audit reads the database), then run
    ``auditor`` (if given); see the module's docstring."""
    started = time.monotonic()
    drained, pending, waited = wait_drained(url, timeout_s)
    if on_drained is not None:
        on_drained()
    if auditor is None:
        return Settlement(
            drained, pending, waited, None, "audit not run: the storm does not know the target's database"
        )
    deadline = started + timeout_s
    while True:
        report = auditor(drained)
        if report.ok or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    note = "" if drained else f"credits still pending after {waited:.0f} s: audited as not drained"
    return Settlement(drained, pending, time.monotonic() - started, report, note)
