"""`hongbao audit --backend production` when it cannot read the shards: one line naming the MySQL
server (user, host, port, never the password) and the server's error, exit 2 (1 means violations)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hongbao.bench.http.run import free_port

from tests.integration.mariadb import USER, MariaDb


def _audit(cwd: Path, dsn: str) -> subprocess.CompletedProcess[str]:
    """Run the audit on ``dsn``, given through HONGBAO_MYSQL_DSN as an operator would."""
    return subprocess.run(
        [sys.executable, "-m", "hongbao.server.cli", "audit", "--backend", "production"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HONGBAO_MYSQL_DSN": dsn},
    )


def test_audit_with_a_wrong_password_says_so(tmp_path: Path, mariadb: MariaDb) -> None:
    """A wrong password: exit 2 and one line with the server's access-denied error, no password, no traceback."""
    result = _audit(tmp_path, f"mysql://{USER}:not-the-password-42@127.0.0.1:{mariadb.port}")
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"hongbao audit: MySQL at mysql://{USER}@127.0.0.1:{mariadb.port}: (1045, ")
    assert "Access denied" in line and "not-the-password-42" not in line


def test_audit_of_an_unreachable_mysql_says_so(tmp_path: Path) -> None:
    """No server on the port: exit 2 and one line with the connect error, no password, no traceback."""
    port = free_port()
    result = _audit(tmp_path, f"mysql://{USER}:secret-pw@127.0.0.1:{port}")
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"hongbao audit: MySQL at mysql://{USER}@127.0.0.1:{port}: (2003, ")
    assert "Can't connect" in line and "secret-pw" not in line
